/* ferry.dll's start-up and its process file. */
#include <windows.h>
#include <winternl.h>

#include "ferry_dll.h"
#include "teb.h"
#include "wagg.h"
#include "wagg_fiber.h"
#include "wagg_stats.h"
#include "../src/procfile.h"

/* threads alive at once with a block of their own; more count in overflow
 * (the file is sparse: a block takes room once a thread has used it) */
#define WIN_MAX_BLOCKS FERRY_MAX_BLOCKS
#define FERRY_PLATFORM_WINDOWS 1

static struct ferry_stub stubs[FERRY_WIN_MAX_STUBS];
static int nstubs, nntdll;      /* all stubs; ntdll's (the other modules' follow) */
/* The modules whose stubs are patched: ntdll, win32u, the ones `ferry
 * instrument` rewrote (`linked`: their stubs jump through slots), and any
 * loaded later (late_load); stubs[first .. first + n) are a module's. */
#define MAX_MODULES 32
static struct {
    char name[64];
    int first, n, linked;
} mods[MAX_MODULES];
static int nmods;
static uint64_t *slots[FERRY_WIN_MAX_STUBS];   /* a linked stub's slot, by call number */
static uint8_t *names;                         /* the process file's name table */
static uint32_t tls_slot;
static int timed;
static struct ferry_proc_header *hdr;
static uint8_t *blocks;
static uint32_t block_size;
static uint64_t spare[FERRY_NR_MAX + 8] __attribute__((aligned(64)));  /* threads beyond the file */
static DWORD tls_index = TLS_OUT_OF_INDEXES;
static struct ferry_hooks hooks;
static uint64_t ns_per_tick_q24 = 1 << 24;     /* ns per TSC tick, 24 fraction bits */    /* kept by NtTerminateProcess's trampoline (patch.c) */

void ferry_zero(void *p, uint64_t n)
{
    volatile uint8_t *d = p;
    while (n--)
        *d++ = 0;
}

void ferry_copy(void *d, const void *s, uint64_t n)
{
    volatile uint8_t *dd = d;
    const uint8_t *ss = s;
    while (n--)
        *dd++ = *ss++;
}

/* memset and memcpy: what the compiler may emit for a struct copy */
void *memset(void *p, int c, size_t n)
{
    volatile uint8_t *d = p;
    while (n--)
        *d++ = (uint8_t)c;
    return p;
}

void *memcpy(void *d, const void *s, size_t n)
{
    ferry_copy(d, s, n);
    return d;
}

static uint64_t qpc_ns(void)
{
    LARGE_INTEGER c, f;
    QueryPerformanceCounter(&c);
    QueryPerformanceFrequency(&f);
    return (uint64_t)(c.QuadPart / f.QuadPart) * 1000000000ULL +
           (uint64_t)(c.QuadPart % f.QuadPart) * 1000000000ULL / (uint64_t)f.QuadPart;
}

static uint64_t real_ns(void)
{
    FILETIME ft;
    GetSystemTimePreciseAsFileTime(&ft);
    uint64_t t = ((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime;
    return (t - 116444736000000000ULL) * 100;      /* since 1601 in 100 ns -> Unix ns */
}

/* ns from TSC ticks without a division (on the way back to the program) */
uint64_t ferry_ticks_ns(uint64_t dt)
{
    return dt < (1ULL << 32) ? (dt * ns_per_tick_q24) >> 24 : ((dt >> 16) * ns_per_tick_q24) >> 8;
}

int ferry_stub_count(void)
{
    return nstubs;
}

const struct ferry_stub *ferry_stub_at(unsigned index)
{
    return index < (unsigned)nstubs ? &stubs[index] : 0;
}

static struct ferry_blk *block_at(uint32_t idx)
{
    return (struct ferry_blk *)(blocks + (uint64_t)idx * block_size);
}

static int is_file_block(const void *b)
{
    const uint8_t *p = b;
    return blocks && p >= blocks && p < blocks + (uint64_t)WIN_MAX_BLOCKS * block_size;
}

/* A block no live thread counts into: one an ended thread left (its counts
 * stay, the report sums them, as the Linux shim's claim), else a new one;
 * NULL when WIN_MAX_BLOCKS threads are alive.  A new block is taken by the
 * same compare-and-swap as a left one: a thread scanning the blocks may see
 * the new index before its taker marks it. */
static struct ferry_blk *take_block(void)
{
    for (;;) {
        uint32_t n = __atomic_load_n(&hdr->nblocks, __ATOMIC_ACQUIRE);
        for (uint32_t i = 0; i < n && i < WIN_MAX_BLOCKS; i++) {
            uint32_t expect = 0;
            /* a block in use is passed over without writing its line */
            if (!__atomic_load_n(&block_at(i)->in_use, __ATOMIC_RELAXED) &&
                __atomic_compare_exchange_n(&block_at(i)->in_use, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                return block_at(i);
        }
        uint32_t idx = __atomic_fetch_add(&hdr->nblocks, 1, __ATOMIC_ACQ_REL);
        if (idx >= WIN_MAX_BLOCKS) {
            __atomic_fetch_sub(&hdr->nblocks, 1, __ATOMIC_ACQ_REL);
            return 0;
        }
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&block_at(idx)->in_use, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return block_at(idx);
    }
}

/* Threads ferry.dll made that have not run ferry_own_thread yet: their
 * ids.  Wine's start of a thread makes calls (an NtContinue) before the
 * thread's own code runs, and a suspended thread has no TEB to preset the
 * slot in (NtQueryInformationThread gives none before it starts), so the
 * claim itself knows them and gives them `own`. */
#define OWN_STARTING_MAX 256
static uint32_t own_starting[OWN_STARTING_MAX];
static uint32_t nown_starting;

static int own_starting_take(uint32_t tid)
{
    if (!__atomic_load_n(&nown_starting, __ATOMIC_ACQUIRE))
        return 0;
    for (int i = 0; i < OWN_STARTING_MAX; i++) {
        uint32_t expect = tid;
        if (__atomic_compare_exchange_n(&own_starting[i], &expect, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_sub(&nown_starting, 1, __ATOMIC_RELEASE);
            return 1;
        }
    }
    return 0;
}

static uint64_t own[FERRY_NR_MAX + 8] __attribute__((aligned(64)));

/* Called by ferry_claim_entry (claim.S): the calling thread's block. */
void *ferry_claim_block(void)
{
    uint32_t tid = (uint32_t)GetCurrentThreadId();
    void *b;
    if (own_starting_take(tid))
        b = own;
    else {
        struct ferry_blk *blk = take_block();
        if (blk) {
            blk->tid = (int32_t)tid;
            b = blk;
        } else {
            __atomic_fetch_add(&hdr->overflow, 1, __ATOMIC_RELAXED);
            b = spare;
        }
    }
    /* TlsSetValue would reset the thread's last error: the TEB slot directly */
    ferry_teb_set(TEB_TLS_SLOTS + 8ULL * tls_index, (uint64_t)b);
    return b;
}

static struct ferry_blk *thread_block(void)
{
    if (!tls_slot)      /* nothing patched: no thread has a block */
        return 0;
    uint64_t b = ferry_teb_get(tls_slot);
    return (struct ferry_blk *)b;
}

/* ferry.dll's own calls (loading Detours, writing a child's imports, patching
 * a DLL that loads late) go through the same patched stubs as the program's.
 * While ferry.dll works, the thread's slot points at `own`, which nobody
 * reads: the trampolines stay as they are and the report holds only what the
 * program called. */
uint64_t *const ferry_own_blk = own;
/* the route hook's words (wagg_fiber.h): set in aggregate mode */
uint32_t ferry_route_slot, ferry_block_slot;

void *ferry_agg_area(void)
{
    return hdr ? hdr->aggregate : 0;
}

const struct ferry_proc_header *ferry_proc_header(void)
{
    return hdr;
}

uint64_t ferry_own_begin(void)
{
    if (!tls_slot)      /* nothing patched: no call of ours is counted */
        return 0;
    uint64_t was = ferry_teb_get(tls_slot);
    ferry_teb_set(tls_slot, (uint64_t)own);
    return was;
}

/* The calling thread's block goes back for a later thread, its counts kept;
 * the thread's slot is emptied first, so that a call it still makes (if
 * its end fails) takes a block again rather than count into one another
 * thread took. */
static void retire_block(void)
{
    struct ferry_blk *b = thread_block();
    if (!is_file_block(b))
        return;
    ferry_teb_set(tls_slot, 0);
    __atomic_store_n(&b->in_use, 0, __ATOMIC_RELEASE);
}

/* A thread of ferry.dll's, made suspended: from its first instruction it
 * counts nothing (ferry_claim_block gives it `own`). */
HANDLE ferry_own_thread_create(LPTHREAD_START_ROUTINE fn, void *arg, SIZE_T stack)
{
    DWORD tid;
    HANDLE h = CreateThread(0, stack, fn, arg, STACK_SIZE_PARAM_IS_A_RESERVATION | CREATE_SUSPENDED, &tid);
    if (!h)
        return 0;
    for (int i = 0; i < OWN_STARTING_MAX; i++) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&own_starting[i], &expect, (uint32_t)tid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&nown_starting, 1, __ATOMIC_RELEASE);
            break;
        }
    }
    ResumeThread(h);
    return h;
}

/* Called first thing by a thread ferry.dll made: from now on it counts
 * nothing.  It normally claimed `own` at its start; one made while
 * OWN_STARTING_MAX others were starting took a block, which goes back
 * (what wine's start of the thread counted in it stays). */
void ferry_own_thread(void)
{
    own_starting_take((uint32_t)GetCurrentThreadId());
    retire_block();
    ferry_own_begin();
}

/* NtTerminateThread: the calling thread's own end gives its block back (it
 * was counted on its way in); another thread's is left alone, since it may
 * still be counting until it has really ended. */
typedef long (__stdcall *terminate_thread_fn)(void *, long);

long __stdcall ferry_terminate_thread(void *thread, long status)
{
    terminate_thread_fn original = (terminate_thread_fn)hooks.terminate_thread_original;
    int self = !thread || thread == (void *)-2;    /* 0 and GetCurrentThread() */
    if (!self) {
        uint64_t was = ferry_own_begin();
        self = GetThreadId(thread) == GetCurrentThreadId();
        ferry_own_end(was);
    }
    if (self)
        retire_block();
    return original(thread, status);
}

void ferry_own_end(uint64_t was)
{
    if (!tls_slot)
        return;
    ferry_teb_set(tls_slot, was);
}

/* The end of a timed call (the trampolines of patch.c call it with the
 * stub's status in hand; it makes no system call).  An NTSTATUS of error
 * severity (0xC...) counts as an error. */
void ferry_account(int64_t status, uint64_t exit_tsc, uint64_t enter_tsc, uint32_t index)
{
    struct ferry_blk *b = thread_block();
    if (!b || (void *)b == (void *)spare || (void *)b == (void *)own || index >= FERRY_NR_MAX)
        return;
    struct ferry_nr_stats *s = ferry_nr_figures(b, index);
    if (!s)
        return;
    uint64_t dt = exit_tsc - enter_tsc;
    s->time_total += dt;
    if (!s->time_min || dt < s->time_min)
        s->time_min = dt;
    if (dt > s->time_max)
        s->time_max = dt;
    uint64_t ns = ferry_ticks_ns(dt);
    int bucket = ns ? 63 - __builtin_clzll(ns) : 0;
    s->hist[bucket < FERRY_HIST_BUCKETS ? bucket : FERRY_HIST_BUCKETS - 1]++;
    if (((uint32_t)status >> 30) == 3)
        s->errors++;
}

static int utf8(const WCHAR *w, char *out, int cap)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, out, cap, 0, 0);
    if (n <= 0) {
        out[0] = 0;
        return 0;
    }
    return n - 1;
}

/* argv as the C runtime splits a command line (quotes group; 2n backslashes
 * before a quote are n, 2n+1 an escaped quote), NUL-separated. */
static void fill_cmdline(const char *cl)
{
    char *out = hdr->cmdline;
    uint32_t cap = sizeof(hdr->cmdline), len = 0;
    while (*cl) {
        while (*cl == ' ' || *cl == '\t')
            cl++;
        if (!*cl)
            break;
        int quoted = 0;
        while (*cl && (quoted || (*cl != ' ' && *cl != '\t'))) {
            int slashes = 0;
            while (*cl == '\\') {
                slashes++;
                cl++;
            }
            if (*cl == '"') {
                for (int i = 0; i < slashes / 2 && len < cap - 1; i++)
                    out[len++] = '\\';
                if (slashes % 2) {
                    if (len < cap - 1)
                        out[len++] = '"';
                } else
                    quoted = !quoted;
                cl++;
            } else {
                for (int i = 0; i < slashes && len < cap - 1; i++)
                    out[len++] = '\\';
                if (*cl && len < cap - 1)
                    out[len++] = *cl++;
            }
        }
        if (len < cap)
            out[len++] = 0;
    }
    hdr->cmdline_len = len;
}

/* The parent ferry-launch.exe names (FERRY_WIN_PARENT): the process the run
 * started this program from, in place of the launcher; 0: none. */
static int32_t given_parent;

static void fill_identity(void)
{
    static char cl[8192];
    static WCHAR wbuf[1024];
    hdr->pid = (int32_t)GetCurrentProcessId();
    PROCESS_BASIC_INFORMATION pbi;
    ULONG got;
    if (given_parent)
        hdr->ppid = given_parent;
    else if (NtQueryInformationProcess(GetCurrentProcess(), ProcessBasicInformation, &pbi,
                                       sizeof(pbi), &got) == 0)
        hdr->ppid = (int32_t)pbi.InheritedFromUniqueProcessId;
    if (GetModuleFileNameW(0, wbuf, 1024))
        utf8(wbuf, hdr->exe, sizeof(hdr->exe));
    utf8(GetCommandLineW(), cl, sizeof(cl));
    fill_cmdline(cl);
}

static void calibrate(void)
{
    uint64_t n0 = qpc_ns(), t0 = __builtin_ia32_rdtsc(), n1;
    do
        n1 = qpc_ns();
    while (n1 - n0 < 1000000);
    hdr->cal_tsc = __builtin_ia32_rdtsc() - t0;
    hdr->cal_ns = n1 - n0;
    if (hdr->cal_tsc)
        ns_per_tick_q24 = (hdr->cal_ns << 24) / hdr->cal_tsc;
}

static WCHAR *put_w(WCHAR *p, const WCHAR *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static WCHAR *put_u(WCHAR *p, unsigned long v)
{
    WCHAR digits[20];
    int n = 0;
    do
        digits[n++] = (WCHAR)(L'0' + v % 10);
    while ((v /= 10));
    while (n)
        *p++ = digits[--n];
    return p;
}

/* dir\proc\<pid>-<seq>.ferry; dir is at most 2048 characters */
static void proc_path(WCHAR *out, const WCHAR *dir, unsigned long pid, unsigned long seq)
{
    WCHAR *p = put_w(out, dir);
    p = put_w(p, L"\\proc\\");
    p = put_u(p, pid);
    *p++ = L'-';
    p = put_u(p, seq);
    p = put_w(p, L".ferry");
    *p = 0;
}

static int add_module(const char *name, int first, int n, int linked)
{
    if (nmods == MAX_MODULES || n <= 0)
        return -1;
    int i = nmods++;
    ferry_copy(mods[i].name, name, sizeof(mods[i].name));
    mods[i].name[sizeof(mods[i].name) - 1] = 0;
    mods[i].first = first;
    mods[i].n = n;
    mods[i].linked = linked;
    nstubs = first + n;
    return i;
}

/* Module i's entry and names into the process file. */
static void publish(int i)
{
    struct ferry_module_entry *e = ferry_module_at(hdr, hdr->nmodules);
    ferry_copy(e->name, mods[i].name, sizeof(mods[i].name));
    e->nsites = (uint32_t)mods[i].n;
    e->site_base = (uint32_t)mods[i].first;
    for (int k = mods[i].first; k < mods[i].first + mods[i].n; k++)
        ferry_copy(names + (uint64_t)k * FERRY_WIN_NAME_MAX, stubs[k].name, FERRY_WIN_NAME_MAX);
    hdr->nsites = (uint32_t)(mods[i].first + mods[i].n);
    __atomic_store_n(&hdr->names_size, hdr->nsites * FERRY_WIN_NAME_MAX, __ATOMIC_RELEASE);
    __atomic_store_n(&hdr->nmodules, hdr->nmodules + 1, __ATOMIC_RELEASE);
}

/* RUN_DIR\proc\<pid>-<seq>.ferry, made with CREATE_NEW as the shim makes it
 * with O_EXCL, sized for WIN_MAX_BLOCKS blocks and the name table after
 * them, and mapped whole; no handle is kept. */
static int open_file(const WCHAR *dir, int mode)
{
    static WCHAR path[2400];
    uint64_t names_off = FERRY_PROC_HEADER_SIZE + (uint64_t)WIN_MAX_BLOCKS * block_size;
    /* room for every name: modules loaded later add theirs */
    uint64_t size = names_off + (uint64_t)FERRY_WIN_MAX_STUBS * FERRY_WIN_NAME_MAX;
    HANDLE f = INVALID_HANDLE_VALUE;
    uint32_t seq = 0;
    for (; seq < 1000; seq++) {
        proc_path(path, dir, GetCurrentProcessId(), seq);
        f = CreateFileW(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE |
                        FILE_SHARE_DELETE, 0, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, 0);
        if (f != INVALID_HANDLE_VALUE || GetLastError() != ERROR_FILE_EXISTS)
            break;
    }
    if (f == INVALID_HANDLE_VALUE)
        return -1;
    HANDLE m = CreateFileMappingW(f, 0, PAGE_READWRITE, (DWORD)(size >> 32), (DWORD)size, 0);
    CloseHandle(f);
    if (!m)
        return -1;
    uint8_t *view = MapViewOfFile(m, FILE_MAP_WRITE, 0, 0, (SIZE_T)size);
    CloseHandle(m);
    if (!view)
        return -1;
    hdr = (struct ferry_proc_header *)view;
    blocks = view + FERRY_PROC_HEADER_SIZE;
    hdr->version = FERRY_PROC_VERSION;
    hdr->header_size = FERRY_PROC_HEADER_SIZE;
    hdr->block_size = block_size;
    hdr->max_blocks = WIN_MAX_BLOCKS;
    hdr->mode = mode;
    hdr->seq = seq;
    hdr->state = FERRY_STATE_RUNNING;
    hdr->platform = FERRY_PLATFORM_WINDOWS;
    hdr->names_offset = names_off;
    names = view + names_off;
    for (int i = 0; i < nmods; i++)
        publish(i);
    fill_identity();
    calibrate();
    hdr->start_real_ns = real_ns();
    hdr->start_mono_ns = qpc_ns();
    hdr->start_tsc = __builtin_ia32_rdtsc();
    /* the magic last: a reader never takes a half-made header for a process file */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ferry_copy(hdr->magic, FERRY_PROC_MAGIC, 16);
    return 0;
}

static int env_mode(void)
{
    char m[16];
    DWORD n = GetEnvironmentVariableA("FERRY_MODE", m, sizeof(m));
    if (n == 0 || n >= sizeof(m))
        return FERRY_MODE_COUNT;
    if (m[0] == 'o' && m[1] == 'f')
        return FERRY_MODE_OFF;
    if (m[0] == 't' && m[1] == 'r')
        return FERRY_MODE_TRACE;
    if (m[0] == 'a' && m[1] == 'g')
        return FERRY_MODE_AGGREGATE;
    return FERRY_MODE_COUNT;
}

/* Children: every process the program creates gets ferry.dll too, as the
 * FX!32 agent enabled every child.  NtCreateUserProcess is where CreateProcessA/W,
 * cmd.exe's and every other way of starting a program end up: the child is
 * created suspended with Ferry's settings added to its environment (its
 * ferry.dll takes them out again), Detours' DetourUpdateProcessWithDll adds
 * ferry.dll to its imports, then it runs as its creator asked. */
#define PARAMS_LENGTH 4
#define PARAMS_ENVIRONMENT 0x80
#define PARAMS_ENVIRONMENT_SIZE 0x3f0
#define CREATE_SUSPENDED_THREAD 1

typedef long (__stdcall *create_fn)(void *, void *, uint32_t, uint32_t, void *, void *, uint32_t,
                                    uint32_t, void *, void *, void *);
typedef BOOL (WINAPI *update_fn)(HANDLE, LPCSTR *, DWORD);
static update_fn update_with_dll;
static WCHAR run_dir[2048], detours_path[1024];
static char self_path[1024];
static int run_mode;

static WCHAR *put_setting(WCHAR *p, const WCHAR *name, const WCHAR *value)
{
    p = put_w(p, name);
    *p++ = L'=';
    p = put_w(p, value);
    *p++ = 0;
    return p;
}

/* `env` and Ferry's settings, in memory to free with VirtualFree; *chars its size */
static WCHAR *child_environment(const WCHAR *env, SIZE_T *chars)
{
    const WCHAR *e = env;
    while (*e) {
        while (*e)
            e++;
        e++;
    }
    SIZE_T old = (SIZE_T)(e - env);
    const char *agg = run_mode == FERRY_MODE_AGGREGATE ? wagg_profile_text() : "";
    SIZE_T nagg = 0;
    while (agg[nagg])
        nagg++;
    SIZE_T size = (old + 64 + 2048 + 1024 + 16 + nagg + 1) * sizeof(WCHAR);
    WCHAR *out = VirtualAlloc(0, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (!out)
        return 0;
    ferry_copy(out, env, old * sizeof(WCHAR));
    WCHAR *p = out + old;
    p = put_setting(p, L"FERRY_MODE", run_mode == FERRY_MODE_TRACE ? L"trace"
                                      : run_mode == FERRY_MODE_AGGREGATE ? L"aggregate" : L"count");
    if (nagg) {     /* the children aggregate by the same profile (ASCII) */
        p = put_w(p, L"FERRY_AGG=");
        for (SIZE_T i = 0; i < nagg; i++)
            *p++ = (WCHAR)(uint8_t)agg[i];
        *p++ = 0;
    }
    p = put_setting(p, L"FERRY_WIN_RUN_DIR", run_dir);
    p = put_setting(p, L"FERRY_WIN_DETOURS", detours_path);
    *p++ = 0;
    *chars = (SIZE_T)(p - out);
    return out;
}

static long create_user_process(void *ph, void *th, uint32_t pa, uint32_t ta, void *poa, void *toa,
                                uint32_t pflags, uint32_t tflags, void *params, void *info, void *attrs)
{
    if (!update_with_dll && detours_path[0]) {
        HMODULE d = LoadLibraryW(detours_path);
        if (d)
            update_with_dll = (update_fn)(void (*)(void))GetProcAddress(d, "DetourUpdateProcessWithDll");
    }
    uint8_t *pp = params;
    WCHAR **envp = pp ? (WCHAR **)(pp + PARAMS_ENVIRONMENT) : 0;
    if (!update_with_dll || !envp || !*envp)
        return ((create_fn)hooks.create_original)(ph, th, pa, ta, poa, toa, pflags, tflags, params, info, attrs);
    int has_size = *(uint32_t *)(pp + PARAMS_LENGTH) >= PARAMS_ENVIRONMENT_SIZE + 8;
    SIZE_T *sizep = has_size ? (SIZE_T *)(pp + PARAMS_ENVIRONMENT_SIZE) : 0;
    WCHAR *saved = *envp;
    SIZE_T saved_size = sizep ? *sizep : 0, chars = 0;
    WCHAR *env = child_environment(saved, &chars);
    if (env) {
        *envp = env;
        if (sizep)
            *sizep = chars * sizeof(WCHAR);
    }
    long st;
    for (int tries = 0;; tries++) {
        st = ((create_fn)hooks.create_original)(ph, th, pa, ta, poa, toa, pflags, tflags | CREATE_SUSPENDED_THREAD,
                                                params, info, attrs);
        if (st != FERRY_WIN_STATUS_INTERNAL_ERROR || tries == FERRY_WIN_START_TRIES - 1)
            break;
        /* wine's new process died before any of its code ran (see
         * FERRY_WIN_START_TRIES): nothing of it was seen, so it is started again */
        if (hdr)
            __atomic_fetch_add(&hdr->start_retries, 1, __ATOMIC_RELAXED);
        Sleep(FERRY_WIN_START_PAUSE_MS);
    }
    *envp = saved;
    if (sizep)
        *sizep = saved_size;
    if (env)
        VirtualFree(env, 0, MEM_RELEASE);
    if (st >= 0) {
        LPCSTR dlls[1] = {self_path};
        update_with_dll(*(HANDLE *)ph, dlls, 1);
        if (!(tflags & CREATE_SUSPENDED_THREAD))
            ResumeThread(*(HANDLE *)th);
    }
    return st;
}

long __stdcall ferry_create_user_process(void *ph, void *th, uint32_t pa, uint32_t ta, void *poa,
                                         void *toa, uint32_t pflags, uint32_t tflags, void *params,
                                         void *info, void *attrs)
{
    uint64_t was = ferry_own_begin();    /* the call itself was counted on its way in */
    long st = create_user_process(ph, th, pa, ta, poa, toa, pflags, tflags, params, info, attrs);
    ferry_own_end(was);
    return st;
}

static void patch_module(int i)
{
    struct ferry_stub *s = stubs + mods[i].first;
    uint32_t first = (uint32_t)mods[i].first;
    if (mods[i].linked)
        ferry_link_stubs(s, mods[i].n, first, tls_slot, timed, slots + first);
    else if (first == 0)    /* ntdll: the process's exit status, and its children */
        ferry_patch_stubs(s, mods[i].n, 0, tls_slot, timed, &hooks);
    else
        ferry_patch_stubs(s, mods[i].n, first, tls_slot, timed, 0);
}

/* A module `ferry instrument` rewrote: its stubs, a module of their own. */
static void take_rewritten(uint8_t *base, const UNICODE_STRING *full)
{
    int n = ferry_rewritten_stubs(base, stubs + nstubs, slots + nstubs, FERRY_WIN_MAX_STUBS - nstubs,
                                  stubs, nntdll);
    char name[64];
    ferry_base_name(full, name, sizeof(name));
    add_module(name, nstubs, n, 1);
}

/* A DLL mapped after start-up (LoadLibrary of user32 brings win32u): its
 * stubs, if it has any of ntdll's shape or was rewritten by `ferry
 * instrument`, are patched before its code or anyone's call to it runs.
 * The loader calls this with its lock held, one DLL at a time. */
struct loaded_dll {
    ULONG flags;
    const UNICODE_STRING *full, *base_name;
    void *base;
    ULONG size;
};

static void take_late(const struct loaded_dll *d)
{
    int first = nstubs, linked = 0;
    int n = ferry_find_stubs(d->base, stubs + first, FERRY_WIN_MAX_STUBS - first);
    if (n <= 0) {
        n = ferry_rewritten_stubs(d->base, stubs + first, slots + first, FERRY_WIN_MAX_STUBS - first,
                                  stubs, nntdll);
        linked = 1;
    }
    char name[64];
    ferry_base_name(d->full, name, sizeof(name));
    int i = add_module(name, first, n, linked);
    if (i < 0)
        return;
    publish(i);
    patch_module(i);
}

static void CALLBACK late_load(ULONG reason, const struct loaded_dll *d, void *context)
{
    (void)context;
    if (reason != 1 /* LDR_DLL_NOTIFICATION_REASON_LOADED */ || !hdr || nmods == MAX_MODULES)
        return;
    uint64_t was = ferry_own_begin();
    take_late(d);
    ferry_own_end(was);
}

typedef LONG (NTAPI *register_fn)(ULONG, void (CALLBACK *)(ULONG, const struct loaded_dll *, void *),
                                  void *, void **);

static void watch_loads(void)
{
    static void *cookie;
    register_fn reg = (register_fn)(void (*)(void))GetProcAddress(GetModuleHandleW(L"ntdll.dll"),
                                                                   "LdrRegisterDllNotification");
    if (reg)
        reg(0, late_load, 0, &cookie);
}

/* Another process ended with TerminateProcess: it never hears of its end,
 * so its killer records it (the pid and the exit code given) in its own
 * process file's waits, where `ferry report` looks for it. */
typedef long (__stdcall *terminate_fn)(void *, long);

long __stdcall ferry_terminate_process(void *process, long status)
{
    terminate_fn original = (terminate_fn)hooks.terminate_original;
    uint64_t was = ferry_own_begin();
    DWORD pid = process && process != (void *)-1 ? GetProcessId(process) : 0;
    ferry_own_end(was);
    if (!pid || pid == GetCurrentProcessId())
        return original(process, status);
    long st = original(process, status);
    if (st >= 0) {
        uint32_t i = __atomic_fetch_add(&hdr->nwaits, 1, __ATOMIC_ACQ_REL);
        if (i < FERRY_MAX_WAITS) {
            hdr->waits[i].status = (int32_t)status;
            hdr->waits[i].mono_ns = qpc_ns();
            __atomic_store_n(&hdr->waits[i].pid, (int32_t)pid, __ATOMIC_RELEASE);
        }
    }
    return st;
}

/* Aggregate mode: every counted stub looks at a route word of its own TLS
 * slot (wagg_route.c), set while a carrier runs a fiber. */
static void route_calls(void)
{
    DWORD i = TlsAlloc();
    if (i == TLS_OUT_OF_INDEXES || i >= 64)
        return;     /* no routing: the calls are counted, and fibers still run */
    ferry_block_slot = tls_slot;
    ferry_route_slot = TEB_TLS_SLOTS + 8 * i;
    ferry_route_calls(ferry_route_slot);
}

static void start(HINSTANCE self)
{
    wagg_init_slots();
    static WCHAR *const dir = run_dir;
    int mode = env_mode();
    DWORD n = GetEnvironmentVariableW(L"FERRY_WIN_RUN_DIR", dir, 2048);
    DWORD nd = GetEnvironmentVariableW(L"FERRY_WIN_DETOURS", detours_path, 1024);
    if (nd >= 1024)
        detours_path[0] = 0;
    GetModuleFileNameA(self, self_path, sizeof(self_path));
    run_mode = mode;
    char parent[16];
    DWORD np = GetEnvironmentVariableA("FERRY_WIN_PARENT", parent, sizeof(parent));
    for (DWORD i = 0; np < sizeof(parent) && i < np && parent[i] >= '0' && parent[i] <= '9'; i++)
        given_parent = given_parent * 10 + (parent[i] - '0');
    wagg_configure();
    /* the program sees its environment as it was given, without Ferry's */
    SetEnvironmentVariableW(L"FERRY_MODE", 0);
    SetEnvironmentVariableW(L"FERRY_WIN_RUN_DIR", 0);
    SetEnvironmentVariableW(L"FERRY_WIN_DETOURS", 0);
    SetEnvironmentVariableW(L"FERRY_WIN_PARENT", 0);
    SetEnvironmentVariableW(L"FERRY_AGG", 0);
    if (mode == FERRY_MODE_OFF || n == 0 || n >= 2048)
        return;
    nntdll = ferry_find_stubs(GetModuleHandleW(L"ntdll.dll"), stubs, FERRY_WIN_MAX_STUBS);
    if (add_module("ntdll.dll", 0, nntdll, 0) < 0)
        return;
    /* win32u (NtUser*, NtGdi*): mapped with user32, before any DLL's
     * initialization runs, when the program imports it; else late_load */
    void *win32u = GetModuleHandleW(L"win32u.dll");
    if (win32u)
        add_module("win32u.dll", nstubs, ferry_find_stubs(win32u, stubs + nstubs,
                                                          FERRY_WIN_MAX_STUBS - nstubs), 0);
    /* the programs and DLLs `ferry instrument` rewrote: their own stubs */
    ferry_each_module(take_rewritten);
    tls_index = TlsAlloc();
    if (tls_index == TLS_OUT_OF_INDEXES || tls_index >= 64)
        return;     /* the TEB's 64 inline slots only: the trampolines read one directly */
    block_size = (__builtin_offsetof(struct ferry_blk, events) + 4095) & ~4095u;
    if (open_file(dir, mode))
        return;
    tls_slot = TEB_TLS_SLOTS + 8 * tls_index;
    timed = mode == FERRY_MODE_TRACE;
    if (mode == FERRY_MODE_AGGREGATE)
        route_calls();
    uint64_t was = ferry_own_begin();
    for (int i = 0; i < nmods; i++)
        patch_module(i);
    watch_loads();
    ferry_own_end(was);
}

static void finish(void)
{
    if (!hdr)
        return;
    wagg_stats_publish_all();
    hdr->end_real_ns = real_ns();
    hdr->end_mono_ns = qpc_ns();
    hdr->end_tsc = __builtin_ia32_rdtsc();
    if (hooks.exit_status)
        hdr->exit_code = __atomic_load_n(hooks.exit_status, __ATOMIC_ACQUIRE);
    __atomic_store_n(&hdr->state, FERRY_STATE_EXITED, __ATOMIC_RELEASE);
}

BOOL WINAPI DllMain(HINSTANCE inst, DWORD why, LPVOID reserved)
{
    if (why == DLL_PROCESS_ATTACH)
        start(inst);
    else if (why == DLL_PROCESS_DETACH && reserved)   /* the process is ending */
        finish();
    return TRUE;
}

/* Windows requires an export at ordinal 1 in a DLL that Detours injects. */
__declspec(dllexport) int ferry_version(void)
{
    return FERRY_PROC_VERSION;
}
