/* ferry.dll's raw batches (ferry_submit / ferry_reap) and pools, observed
 * from a Windows program that does not link ferry.dll: it finds the API
 * with GetProcAddress.  A read of an empty pipe stays pending on a worker
 * until the program writes to the pipe, so "returned before X completed"
 * needs no clock (the Windows port of tests/programs/agg_policies.c).
 * Usage: agg_batches none|any|some_limit|some_timeout|all|adaptive|invalid|
 *                    stats|big|affinity|priority|off|profile|threads DIR|results MODE DIR|
 *                    counted N|groups N */
#include <windows.h>
#include <tlhelp32.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../../shim/include/ferry.h"

#define BAD_HANDLE_STATUS ((long long)(int)0xC0000008)   /* STATUS_INVALID_HANDLE */
#define BAD_SERVICE ((long long)(int)0xC000001C)       /* STATUS_INVALID_SYSTEM_SERVICE */

static struct {
    int (*config_default)(struct ferry_group_config *, int);
    int (*create)(struct ferry_group **, const struct ferry_group_config *);
    int (*destroy)(struct ferry_group *);
    int (*submit)(struct ferry_group *, unsigned, struct ferry_call *, unsigned, enum ferry_wait,
                  unsigned, uint64_t);
    int (*reap)(struct ferry_group *, unsigned, unsigned);
    int (*stats)(struct ferry_group *, struct ferry_group_stats *);
    int (*number)(const char *);
} F;

#include "../check.h"

static void *must(HMODULE m, const char *name)
{
    void *p = (void *)GetProcAddress(m, name);
    if (!p) {
        printf("ferry.dll has no %s\n", name);
        exit(3);
    }
    return p;
}

static void load(void)
{
    HMODULE m = GetModuleHandleA("ferry.dll");
    if (!m) {
        printf("ferry.dll is not loaded (run me under `ferry run`)\n");
        exit(3);
    }
    F.config_default = must(m, "ferry_group_config_default");
    F.create = must(m, "ferry_group_create");
    F.destroy = must(m, "ferry_group_destroy");
    F.submit = must(m, "ferry_submit");
    F.reap = must(m, "ferry_reap");
    F.stats = must(m, "ferry_group_stats");
    F.number = must(m, "ferry_call_number");
}

static long long nr(const char *name)
{
    int n = F.number(name);
    if (n < 0) {
        printf("no call number for %s\n", name);
        exit(3);
    }
    return n;
}

struct iosb {
    uint64_t status, info;
};

/* THREAD_BASIC_INFORMATION (winternl.h has no such type in mingw) */
struct thread_info {
    LONG exit_status;
    void *teb;
    struct {
        void *process, *thread;
    } client_id;
    ULONG_PTR affinity;
    LONG priority, base_priority;
};

static struct ferry_call call(long long n, long long a0, long long a1, long long a2, long long a3)
{
    struct ferry_call c;
    memset(&c, 0, sizeof(c));
    c.nr = n;
    c.args[0] = a0, c.args[1] = a1, c.args[2] = a2, c.args[3] = a3;
    return c;
}

/* NtReadFile / NtWriteFile(h, 0, 0, 0, iosb, buf, len, offset, 0) */
static struct ferry_call rw(const char *name, HANDLE h, struct iosb *io, void *buf, unsigned len,
                            LARGE_INTEGER *offset)
{
    struct ferry_call c = call(nr(name), (long long)h, 0, 0, 0);
    c.args[4] = (long long)io;
    c.args[5] = (long long)buf;
    c.args[6] = len;
    c.args[7] = (long long)offset;
    return c;
}

static struct ferry_call nop(void)
{
    return call(FERRY_NR_NOP, 0, 0, 0, 0);
}

static HANDLE r1, w1, r2, w2;
static volatile LONG written;

static void put(HANDLE h, const char *s)
{
    DWORD n;
    WriteFile(h, s, (DWORD)strlen(s), &n, 0);
}

static DWORD WINAPI late_writer(void *arg)
{
    (void)arg;
    Sleep(50);
    InterlockedExchange(&written, 1);
    put(w1, "late");
    return 0;
}

static struct ferry_group *group(unsigned concurrency)
{
    struct ferry_group_config cfg;
    F.config_default(&cfg, 0);
    cfg.pools[0].concurrency = concurrency;
    struct ferry_group *g = 0;
    int r = F.create(&g, &cfg);
    if (r) {
        printf("ferry_group_create: %d\n", r);
        exit(1);
    }
    return g;
}

static void policies(const char *t, struct ferry_group *g)
{
    struct ferry_call c[4];
    struct iosb io[4];
    char b1[16] = {0}, b2[16] = {0};
    int r;
    memset(io, 0, sizeof(io));
    if (!strcmp(t, "none")) {
        c[0] = rw("NtReadFile", r1, &io[0], b1, sizeof b1, 0);
        r = F.submit(g, 0, c, 1, FERRY_WAIT_NONE, 0, 0);
        CHECK(r == 0 && !c[0].done, "none: %d done, read done=%d", r, c[0].done);
        put(w1, "abc");
        r = F.reap(g, 0, 1);
        CHECK(r == 1 && c[0].done && c[0].result == 0 && io[0].info == 3 && !memcmp(b1, "abc", 3),
              "reap: %d done=%d result=%llx info=%llu", r, c[0].done, c[0].result,
              (unsigned long long)io[0].info);
    } else if (!strcmp(t, "any")) {
        c[0] = nop();
        c[1] = rw("NtReadFile", r1, &io[1], b1, sizeof b1, 0);
        r = F.submit(g, 0, c, 2, FERRY_WAIT_ANY, 0, 0);
        CHECK(r == 1 && c[0].done && c[0].result == 0 && !c[1].done, "any: %d %d %d", r, c[0].done, c[1].done);
        put(w1, "x");
        F.reap(g, 0, 1);
        CHECK(c[1].done && c[1].result == 0 && io[1].info == 1, "pending read %d %llx", c[1].done, c[1].result);
    } else if (!strcmp(t, "some_limit")) {
        struct thread_info tbi;
        memset(&tbi, 0, sizeof(tbi));
        c[0] = nop();
        c[1] = rw("NtReadFile", r1, &io[1], b1, sizeof b1, 0);
        /* about the calling thread (NtCurrentThread()): runs on it, at once */
        c[2] = call(nr("NtQueryInformationThread"), -2, 0 /* ThreadBasicInformation */, (long long)&tbi,
                    sizeof(tbi));
        c[3] = call(nr("NtClose"), 0x7ffffff0, 0, 0, 0);
        r = F.submit(g, 0, c, 4, FERRY_WAIT_SOME, 3, 10ULL * 1000000000ULL);
        CHECK(r == 3 && !c[1].done, "some(3): %d done, read done=%d", r, c[1].done);
        CHECK(c[2].result == 0 && (DWORD)(uintptr_t)tbi.client_id.thread == GetCurrentThreadId(),
              "thread info %llx tid %lu", c[2].result, (unsigned long)(uintptr_t)tbi.client_id.thread);
        CHECK(c[3].result == BAD_HANDLE_STATUS, "close of a bad handle %llx", c[3].result);
        put(w1, "y");
        F.reap(g, 0, 1);
        CHECK(c[1].done && c[1].result == 0 && io[1].info == 1, "read %llx", c[1].result);
    } else if (!strcmp(t, "some_timeout")) {
        c[0] = rw("NtReadFile", r1, &io[0], b1, sizeof b1, 0);
        c[1] = rw("NtReadFile", r2, &io[1], b2, sizeof b2, 0);
        r = F.submit(g, 0, c, 2, FERRY_WAIT_SOME, 2, 20000000ULL);
        CHECK(r == 0 && !c[0].done && !c[1].done, "some timeout: %d", r);
        put(w1, "1");
        put(w2, "22");
        r = F.reap(g, 0, 2);
        CHECK(r == 2 && io[0].info == 1 && io[1].info == 2, "reads %d %llu %llu", r,
              (unsigned long long)io[0].info, (unsigned long long)io[1].info);
    } else if (!strcmp(t, "all")) {
        c[0] = nop();
        c[1] = rw("NtReadFile", r1, &io[1], b1, sizeof b1, 0);
        c[2] = rw("NtWriteFile", w2, &io[2], "zz", 2, 0);
        HANDLE th = CreateThread(0, 0, late_writer, 0, 0, 0);
        r = F.submit(g, 0, c, 3, FERRY_WAIT_ALL, 0, 0);
        CHECK(r == 3 && written && c[1].result == 0 && io[1].info == 4 && c[2].result == 0 && io[2].info == 2,
              "all: %d written=%ld %llx %llx", r, written, c[1].result, c[2].result);
        WaitForSingleObject(th, INFINITE);
        CloseHandle(th);
    } else if (!strcmp(t, "adaptive")) {
        /* a batch that will not fill must not be waited for */
        c[0] = nop();
        c[1] = rw("NtReadFile", r1, &io[1], b1, sizeof b1, 0);
        r = F.submit(g, 0, c, 2, FERRY_WAIT_ADAPTIVE, 0, 0);
        CHECK(r >= 1 && !c[1].done, "adaptive: %d", r);
        put(w1, "q");
        F.reap(g, 0, 1);
        CHECK(c[1].result == 0 && io[1].info == 1, "read %llx", c[1].result);
    } else {
        printf("unknown mode %s\n", t);
        exit(2);
    }
}

static void invalid(struct ferry_group *g)
{
    struct ferry_call c[1] = {nop()};
    struct iosb io;
    char b[4];
    CHECK(F.submit(g, 1, c, 1, FERRY_WAIT_ALL, 0, 0) == -EINVAL, "pool 1 of 1");
    CHECK(F.submit(g, 0, c, 1, FERRY_WAIT_SOME, 0, 1000) == -EINVAL, "some limit 0");
    CHECK(F.submit(g, 0, c, 1, FERRY_WAIT_SOME, 1, 0) == -EINVAL, "some timeout 0");
    CHECK(F.submit(g, 0, c, 1, (enum ferry_wait)7, 0, 0) == -EINVAL, "wait 7");
    CHECK(F.submit(0, 0, c, 1, FERRY_WAIT_ALL, 0, 0) == -EINVAL, "no group");
    CHECK(F.submit(g, 0, 0, 1, FERRY_WAIT_ALL, 0, 0) == -EINVAL, "no calls");
    CHECK(F.reap(g, 3, 0) == -EINVAL, "reap pool 3");
    /* numbers no stub has: what the kernel says of a bad service number,
     * and nothing else in the batch is touched */
    struct ferry_call k[5] = {nop(), call(100000, 0, 0, 0, 0), call(-5, 0, 0, 0, 0), call(0xffffffffLL, 0, 0, 0, 0),
                              nop()};
    CHECK(F.submit(g, 0, k, 5, FERRY_WAIT_ALL, 0, 0) == 5, "bad numbers");
    CHECK(k[0].result == 0 && k[4].result == 0 && k[1].result == BAD_SERVICE && k[2].result == BAD_SERVICE &&
          k[3].result == BAD_SERVICE, "results %llx %llx %llx %llx %llx", k[0].result, k[1].result, k[2].result,
          k[3].result, k[4].result);
    struct ferry_group_config cfg;
    struct ferry_group *other = 0;
    F.config_default(&cfg, 0);
    cfg.pools[0].entries = 3;
    CHECK(F.create(&other, &cfg) == -EINVAL, "entries 3");
    F.config_default(&cfg, 0);
    cfg.route[nr("NtReadFile")] = 5;
    CHECK(F.create(&other, &cfg) == -EINVAL, "route to pool 5 of 1");
    F.config_default(&cfg, 0);
    cfg.route[nr("NtContinue")] = 0;
    CHECK(F.create(&other, &cfg) == -EINVAL, "NtContinue routed to a pool");
    F.config_default(&cfg, 0);
    cfg.npools = 0;
    CHECK(F.create(&other, &cfg) == -EINVAL, "no pool");
    CHECK(F.config_default(0, 0) == -EINVAL, "no config");
    CHECK(F.number("NtNoSuchCall") == -ENOENT && F.number(0) == -ENOENT, "unknown name");
    /* a read still out: a worker writes into the caller's memory */
    c[0] = rw("NtReadFile", r1, &io, b, sizeof b, 0);
    CHECK(F.submit(g, 0, c, 1, FERRY_WAIT_NONE, 0, 0) == 0, "read queued");
    CHECK(F.destroy(g) == -EBUSY, "destroy with a call out");
    put(w1, "!");
    CHECK(F.reap(g, 0, 1) == 1 && c[0].result == 0 && io.info == 1, "read %llx", c[0].result);
}

/* 64 no-ops in one batch: the figures say so */
static void stats(struct ferry_group *g)
{
    struct ferry_call c[64];
    for (int i = 0; i < 64; i++)
        c[i] = nop();
    int r = F.submit(g, 0, c, 64, FERRY_WAIT_ALL, 0, 0);
    struct ferry_group_stats st;
    F.stats(g, &st);
    const struct ferry_pool_stats *p = &st.pools[0];
    CHECK(r == 64, "all: %d", r);
    CHECK(st.npools == 1 && p->submitted == 64 && p->completed == 64 && st.aggregated == 64,
          "npools %u submitted %llu completed %llu aggregated %llu", st.npools,
          (unsigned long long)p->submitted, (unsigned long long)p->completed,
          (unsigned long long)st.aggregated);
    CHECK(p->batches[6] == 1, "batch of 64 in bucket 64-127: %llu", (unsigned long long)p->batches[6]);
    CHECK(p->max_depth >= 1 && p->max_depth <= 64, "max depth %llu", (unsigned long long)p->max_depth);
    CHECK(st.crossings == p->enters, "crossings %llu, enters %llu", (unsigned long long)st.crossings,
          (unsigned long long)p->enters);
}

/* Batches larger than the pool's ring (16) and than a thread's completion
 * ring (4096): ferry_submit makes room by reaping, and every call completes
 * once, with its own result. */
static void big(void)
{
    struct ferry_group_config cfg;
    F.config_default(&cfg, 0);
    cfg.pools[0].entries = 16;
    cfg.pools[0].concurrency = 2;
    struct ferry_group *g = 0;
    CHECK(F.create(&g, &cfg) == 0, "create");
    static struct ferry_call c[6000];
    long long close = nr("NtClose");
    for (int i = 0; i < 6000; i++)
        c[i] = i % 100 == 7 ? call(close, 0x7ffffff0, 0, 0, 0) : nop();
    CHECK(F.submit(g, 0, c, 6000, FERRY_WAIT_ALL, 0, 0) == 6000, "all of 6000");
    int bad = 0;
    for (int i = 0; i < 6000; i++)
        bad += !c[i].done || c[i].result != (i % 100 == 7 ? BAD_HANDLE_STATUS : 0);
    CHECK(bad == 0, "%d calls wrong", bad);
    for (int i = 0; i < 6000; i++)
        c[i] = nop();
    int r = F.submit(g, 0, c, 6000, FERRY_WAIT_NONE, 0, 0);
    CHECK(r >= 6000 - 4096 && r <= 6000, "none of 6000: %d", r);
    int got = r < 0 ? 0 : r;
    while (got < 6000 && (r = F.reap(g, 0, 1)) > 0)
        got += r;
    int done = 0;
    for (int i = 0; i < 6000; i++)
        done += c[i].done;
    CHECK(got == 6000 && done == 6000, "reaped %d, %d done", got, done);
    struct ferry_group_stats st;
    F.stats(g, &st);
    CHECK(st.pools[0].submitted == 12000 && st.pools[0].completed == 12000, "submitted %llu completed %llu",
          (unsigned long long)st.pools[0].submitted, (unsigned long long)st.pools[0].completed);
    CHECK(F.destroy(g) == 0, "destroy");
}

/* A pool pinned to CPU k runs every call on CPU k. */
static void affinity(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    int n = F.number("NtGetCurrentProcessorNumber");
    if (n < 0) {
        printf("skip: no NtGetCurrentProcessorNumber stub\n");
        return;
    }
    for (unsigned k = 0; k < si.dwNumberOfProcessors && k < 64; k++) {
        struct ferry_group_config cfg;
        F.config_default(&cfg, 0);
        cfg.pools[0].concurrency = 2;
        cfg.pools[0].cpus = 1ULL << k;
        cfg.pools[0].priority = k ? 10 : -10;
        struct ferry_group *g = 0;
        CHECK(F.create(&g, &cfg) == 0, "pool on cpu %u", k);
        if (!g)
            return;
        struct ferry_call c[32];
        for (int i = 0; i < 32; i++)
            c[i] = call(n, 0, 0, 0, 0);
        CHECK(F.submit(g, 0, c, 32, FERRY_WAIT_ALL, 0, 0) == 32, "32 calls");
        for (int i = 0; i < 32; i++)
            CHECK(c[i].result == k, "call %d ran on cpu %lld, not %u", i, c[i].result, k);
        CHECK(F.destroy(g) == 0, "destroy");
    }
    struct ferry_group_config cfg;
    struct ferry_group *g = 0;
    F.config_default(&cfg, 0);
    cfg.pools[0].cpus = 1ULL << 63;
    CHECK(si.dwNumberOfProcessors >= 63 || F.create(&g, &cfg) == -EINVAL, "a CPU that is not there");
}

/* The threads of this process at relative priority `rel` (THREAD_PRIORITY_*):
 * Windows says the base priority (8 + rel in a normal process), wine rel. */
static int threads_at(int rel)
{
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
    THREADENTRY32 te;
    te.dwSize = sizeof(te);
    int n = 0;
    for (BOOL ok = Thread32First(snap, &te); ok; ok = Thread32Next(snap, &te))
        n += te.th32OwnerProcessID == GetCurrentProcessId() && (te.tpBasePri == rel || te.tpBasePri == 8 + rel);
    CloseHandle(snap);
    return n;
}

/* A pool's workers run at the priority its nice value maps to. */
static void priority(void)
{
    static const int nice[] = {-20, -10, 10, 19}, rel[] = {2, 1, -1, -2};
    for (int i = 0; i < 4; i++) {
        int before = threads_at(rel[i]);
        struct ferry_group_config cfg;
        F.config_default(&cfg, 0);
        cfg.pools[0].concurrency = 3;
        cfg.pools[0].priority = nice[i];
        struct ferry_group *g = 0;
        CHECK(F.create(&g, &cfg) == 0, "create");
        struct ferry_call c[8];
        for (int k = 0; k < 8; k++)
            c[k] = nop();
        /* every worker has set its priority once it has taken a call or slept */
        CHECK(F.submit(g, 0, c, 8, FERRY_WAIT_ALL, 0, 0) == 8, "batch");
        int at = 0;
        for (int tries = 0; tries < 1000 && (at = threads_at(rel[i]) - before) < 3; tries++)
            Sleep(1);
        CHECK(at == 3, "nice %d: %d workers at priority %d", nice[i], at, rel[i]);
        CHECK(F.destroy(g) == 0, "destroy");
    }
}

/* ---- results: the same calls natively and through a pool ---------------- */

typedef uint64_t (*call16)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                           uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                           uint64_t, uint64_t);

#define NCALLS 12
struct scene {
    HANDLE src, dst;
    struct iosb io[NCALLS];
    char buf[NCALLS][32];
    LARGE_INTEGER off[NCALLS];
    struct {
        LARGE_INTEGER allocation, end_of_file;
        ULONG links;
        BOOLEAN delete_pending, directory;
    } fsi;      /* FILE_STANDARD_INFORMATION */
    const char *name[NCALLS];
    struct ferry_call c[NCALLS];
};

static HANDLE open_file(const char *dir, const char *name, int create)
{
    char path[MAX_PATH];
    snprintf(path, sizeof path, "%s\\%s", dir, name);
    return CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, 0,
                       create ? CREATE_ALWAYS : OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, 0);
}

/* reads of a known file at several offsets (one past its end), writes at
 * distinct offsets, a size query, a close of a bad handle in the middle */
static void scene_make(struct scene *s, const char *dir)
{
    memset(s, 0, sizeof(*s));
    s->src = open_file(dir, "src.txt", 1);
    put(s->src, "0123456789abcdefghijklmnopqrstuvwxyz");
    s->dst = open_file(dir, "dst.txt", 1);
    for (int i = 0; i < NCALLS; i++)
        s->off[i].QuadPart = 4 * i;
    int k = 0;
    for (int i = 0; i < 4; i++, k++) {
        s->name[k] = "NtReadFile";
        s->c[k] = rw(s->name[k], s->src, &s->io[k], s->buf[k], 5, &s->off[k]);
    }
    s->off[k].QuadPart = 1000;      /* past the end: STATUS_END_OF_FILE */
    s->name[k] = "NtReadFile";
    s->c[k] = rw(s->name[k], s->src, &s->io[k], s->buf[k], 5, &s->off[k]);
    k++;
    s->name[k] = "NtClose";
    s->c[k] = call(nr("NtClose"), 0x7ffffff0, 0, 0, 0);
    k++;
    for (int i = 0; i < 4; i++, k++) {
        s->name[k] = "NtWriteFile";
        snprintf(s->buf[k], sizeof s->buf[k], "w%02d", k);
        s->off[k].QuadPart = 3 * i;
        s->c[k] = rw(s->name[k], s->dst, &s->io[k], s->buf[k], 3, &s->off[k]);
    }
    s->name[k] = "NtQueryInformationFile";
    s->c[k] = call(nr("NtQueryInformationFile"), (long long)s->src, (long long)&s->io[k], (long long)&s->fsi,
                   sizeof(s->fsi));
    s->c[k].args[4] = 5;   /* FileStandardInformation */
    k++;
    s->name[k] = "NtFlushBuffersFile";
    s->c[k] = call(nr("NtFlushBuffersFile"), (long long)s->dst, (long long)&s->io[k], 0, 0);
}

static void scene_print(struct scene *s, const char *dir)
{
    for (int i = 0; i < NCALLS; i++)
        printf("%2d %-24s status %08llx info %llu data %.5s\n", i, s->name[i],
               (unsigned long long)(s->c[i].result & 0xffffffffULL), (unsigned long long)s->io[i].info,
               !strcmp(s->name[i], "NtReadFile") ? s->buf[i] : "");
    printf("size %lld\n", (long long)s->fsi.end_of_file.QuadPart);
    CloseHandle(s->src);
    CloseHandle(s->dst);
    HANDLE d = open_file(dir, "dst.txt", 0);
    char got[64] = {0};
    DWORD n = 0;
    ReadFile(d, got, sizeof got - 1, &n, 0);
    CloseHandle(d);
    printf("dst %lu %s\n", (unsigned long)n, got);
}

static void results(const char *how, const char *dir)
{
    static struct scene s;
    scene_make(&s, dir);
    if (!strcmp(how, "native")) {
        HMODULE ntdll = GetModuleHandleA("ntdll.dll");
        for (int i = 0; i < NCALLS; i++) {
            const uint64_t *a = (const uint64_t *)s.c[i].args;
            call16 f = (call16)(void *)GetProcAddress(ntdll, s.name[i]);
            s.c[i].result = (long long)(int)f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                                              a[10], a[11], a[12], a[13], a[14], a[15]);
        }
    } else {
        static const char *const names[] = {"none", "any", "some", "all", "adaptive"};
        int w = 0;
        while (w < 5 && strcmp(how, names[w]))
            w++;
        if (w == 5) {
            printf("unknown wait %s\n", how);
            exit(2);
        }
        struct ferry_group *g = group(4);
        int r = F.submit(g, 0, s.c, NCALLS, (enum ferry_wait)w, 2, 1000000);
        CHECK(r >= 0, "submit %d", r);
        int done = r;
        while (r >= 0 && done < NCALLS)
            done += r = F.reap(g, 0, 1);
        for (int i = 0; i < NCALLS; i++)
            CHECK(s.c[i].done, "call %d not done", i);
        CHECK(F.destroy(g) == 0, "destroy");
    }
    scene_print(&s, dir);
}

/* n NtYieldExecution through a pool and n NtQueryInformationThread about
 * the calling thread (run on it, at once), then 7 NtYieldExecution made by
 * the program itself: the report counts the program's own only (a call of
 * a raw batch is not one the program made through a stub, nor are
 * ferry.dll's waits and wakes) */
static void counted(int n)
{
    struct ferry_group *g = group(2);
    static struct ferry_call c[4096];
    static struct thread_info tbi;
    n = n < 2048 ? n : 2048;
    for (int i = 0; i < n; i++) {
        c[2 * i] = call(nr("NtYieldExecution"), 0, 0, 0, 0);
        c[2 * i + 1] = call(nr("NtQueryInformationThread"), -2, 0, (long long)&tbi, sizeof(tbi));
    }
    n *= 2;
    int r = F.submit(g, 0, c, (unsigned)n, FERRY_WAIT_ALL, 0, 0);
    CHECK(r == n, "submit %d of %d", r, n);
    for (int i = 0; i < 7; i++)
        SwitchToThread();
    CHECK(F.destroy(g) == 0, "destroy");
}

/* Four threads batch at once on one pool while the main thread has a read
 * pending: each thread reaps exactly its own calls, and nothing of theirs
 * reaches the main thread's ring. */
struct client_arg {
    struct ferry_group *g;
    int id, bad;
    HANDLE file;
};

static DWORD WINAPI client_main(void *p)
{
    struct client_arg *a = p;
    struct ferry_call c[8];
    struct iosb io;
    char buf[8];
    LARGE_INTEGER off;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 7; i++)
            c[i] = nop();
        off.QuadPart = round % 4;
        memset(buf, 0, sizeof buf);
        c[7] = rw("NtReadFile", a->file, &io, buf, 2, &off);
        int r = F.submit(a->g, 0, c, 8, FERRY_WAIT_NONE, 0, 0);
        int got = r < 0 ? r : r + F.reap(a->g, 0, 8 - r);
        if (got != 8 || c[7].result != 0 || io.info != 2 || buf[0] != 'a' + a->id + round % 4 ||
            buf[1] != buf[0] + 1)
            a->bad++;
    }
    return 0;
}

static void threads(const char *dir)
{
    struct ferry_group *g = group(4);
    struct ferry_call pending[1];
    struct iosb io;
    char b[4];
    pending[0] = rw("NtReadFile", r1, &io, b, sizeof b, 0);
    CHECK(F.submit(g, 0, pending, 1, FERRY_WAIT_NONE, 0, 0) == 0, "pending read");
    struct client_arg args[4];
    HANDLE th[4];
    for (int i = 0; i < 4; i++) {
        char name[16], text[8];
        snprintf(name, sizeof name, "t%d", i);
        for (int k = 0; k < 7; k++)
            text[k] = (char)('a' + i + k);
        args[i] = (struct client_arg){g, i, 0, open_file(dir, name, 1)};
        DWORD n;
        WriteFile(args[i].file, text, 7, &n, 0);
        th[i] = CreateThread(0, 0, client_main, &args[i], 0, 0);
    }
    WaitForMultipleObjects(4, th, TRUE, INFINITE);
    for (int i = 0; i < 4; i++) {
        CHECK(args[i].bad == 0, "thread %d: %d rounds wrong", i, args[i].bad);
        CloseHandle(th[i]);
        CloseHandle(args[i].file);
    }
    CHECK(F.reap(g, 0, 0) == 0 && !pending[0].done, "the main thread's ring got another's completion");
    put(w1, "m");
    CHECK(F.reap(g, 0, 1) == 1 && pending[0].done && io.info == 1, "pending read %llx", pending[0].result);
    struct ferry_group_stats st;
    F.stats(g, &st);
    CHECK(st.pools[0].submitted == 1 + 4 * 200 * 8 && st.pools[0].completed == st.pools[0].submitted,
          "submitted %llu completed %llu", (unsigned long long)st.pools[0].submitted,
          (unsigned long long)st.pools[0].completed);
    CHECK(F.destroy(g) == 0, "destroy");
}

/* the profile's settings as ferry_group_config_default gives them */
static void profile(void)
{
    int (*aggregating)(void) = must(GetModuleHandleA("ferry.dll"), "ferry_is_aggregating");
    struct ferry_group_config cfg;
    CHECK(F.config_default(&cfg, 1) == 0, "config");
    printf("aggregating %d workers %u npools %u\n", aggregating(), cfg.workers, cfg.npools);
    for (unsigned i = 0; i < cfg.npools; i++) {
        const struct ferry_pool_config *p = &cfg.pools[i];
        printf("pool %u entries %u concurrency %u cpus %llx priority %d wait %d limit %u timeout %llu\n", i,
               p->entries, p->concurrency, (unsigned long long)p->cpus, p->priority, (int)p->wait,
               p->wait_limit, (unsigned long long)p->wait_timeout_ns);
    }
    static const char *const names[] = {"NtReadFile", "NtYieldExecution", "NtLockFile", "NtClose", 0};
    for (int i = 0; names[i]; i++)
        printf("route %s %lld %d\n", names[i], nr(names[i]), cfg.route[nr(names[i])]);
    printf("env %s\n", getenv("FERRY_AGG") ? "FERRY_AGG" : "-");
}

/* n groups of 2 workers made and ended one after the other, then a thread
 * of the program's own makes 5 NtYieldExecution: the report must have them
 * (ferry.dll's workers must not use up the process file's blocks). */
static DWORD WINAPI five_yields(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++)
        SwitchToThread();
    return 0;
}

static void groups(int n)
{
    for (int i = 0; i < n; i++) {
        struct ferry_group *g = group(2);
        struct ferry_call c[4] = {nop(), nop(), nop(), nop()};
        CHECK(F.submit(g, 0, c, 4, FERRY_WAIT_ALL, 0, 0) == 4, "batch");
        CHECK(F.destroy(g) == 0, "destroy");
    }
    HANDLE t = CreateThread(0, 0, five_yields, 0, 0, 0);
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}

/* n threads one after the other, each a batch on one group: ferry.dll's
 * group knows 256 threads at once, and ended ones must make room. */
static DWORD WINAPI one_batch(void *arg)
{
    struct ferry_group *g = arg;
    struct ferry_call c[4] = {nop(), nop(), nop(), nop()};
    return F.submit(g, 0, c, 4, FERRY_WAIT_ALL, 0, 0) == 4 && c[3].done ? 0 : 1;
}

static void turnover(int n)
{
    struct ferry_group *g = group(2);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        HANDLE t = CreateThread(0, 0, one_batch, g, 0, 0);
        DWORD code = 1;
        WaitForSingleObject(t, INFINITE);
        GetExitCodeThread(t, &code);
        CloseHandle(t);
        bad += code != 0;
    }
    CHECK(bad == 0, "%d of %d threads' batches refused or wrong", bad, n);
    CHECK(F.destroy(g) == 0, "destroy");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    setvbuf(stdout, 0, _IONBF, 0);
    load();
    const char *t = argv[1];
    if (!strcmp(t, "results") && argc == 4) {
        results(argv[2], argv[3]);
    } else if (!strcmp(t, "groups") && argc == 3) {
        groups(atoi(argv[2]));
    } else if (!strcmp(t, "turnover") && argc == 3) {
        turnover(atoi(argv[2]));
    } else if (!strcmp(t, "counted") && argc == 3) {
        counted(atoi(argv[2]));
    } else if (!strcmp(t, "threads") && argc == 3) {
        CreatePipe(&r1, &w1, 0, 0);
        threads(argv[2]);
    } else if (!strcmp(t, "profile")) {
        profile();
    } else if (!strcmp(t, "off")) {
        /* FERRY_MODE=off: ferry.dll runs none of the program's calls */
        struct ferry_group_config cfg;
        struct ferry_group *g = 0;
        F.config_default(&cfg, 0);
        CHECK(F.create(&g, &cfg) == -ENOSYS && !g, "a group in mode off");
    } else if (!strcmp(t, "big")) {
        big();
    } else if (!strcmp(t, "priority")) {
        priority();
    } else if (!strcmp(t, "affinity")) {
        affinity();
    } else {
        CreatePipe(&r1, &w1, 0, 0);
        CreatePipe(&r2, &w2, 0, 0);
        struct ferry_group *g = group(4);
        if (!strcmp(t, "invalid"))
            invalid(g);
        else if (!strcmp(t, "stats"))
            stats(g);
        else
            policies(t, g);
        CHECK(F.destroy(g) == 0, "destroy");
    }
    if (!failures)
        printf("ok %s\n", t);
    return failures ? 1 : 0;
}
