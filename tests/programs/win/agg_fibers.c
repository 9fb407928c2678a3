/* ferry.dll's carriers and fibers, and its routing of a fiber's Nt* calls,
 * checked from inside a Windows program.  ferry.dll is found at run time
 * (ferry run loads it); without it the program says so and exits 3.
 * The group is the profile's (ferry_group_config_default(cfg, 1)).
 *
 *   agg_fibers fibers N      N fibers that yield in turn: the order they ran
 *                            in, and each one's sum, joined
 *   agg_fibers seh           on a fiber: a raised exception continued by a
 *                            vectored handler, an access violation recovered,
 *                            a longjmp out of deep frames (RtlUnwindEx checks
 *                            the frames against the TEB's stack bounds), and a
 *                            192 KiB frame (__chkstk probes the guard page down)
 *   agg_fibers park          fibers whose calls wait on other fibers: a read of
 *                            an empty pipe, a wait on an unset event, a sleep;
 *                            the order of events shows whether each call parked
 *                            its fiber (routed) or blocked the carrier (native:
 *                            a read or wait would then never end);
 *                            `park sleep`: the sleep alone; `park spin`: the
 *                            sleep beside a fiber that only yields until it
 *                            ended (the stored call must leave all the same)
 *   agg_fibers results       calls made natively (before the carrier) and again
 *                            on a fiber: one line each with both results
 *   agg_fibers child ARGS    itself with ARGS as a child process (CreateProcess),
 *                            its exit code
 */
#include <windows.h>
#include <winternl.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../shim/include/ferry.h"

typedef int (*config_fn)(struct ferry_group_config *, int);
typedef int (*create_fn)(struct ferry_group **, const struct ferry_group_config *);
typedef int (*run_fn)(struct ferry_group *, void (*)(void *), void *);
typedef int (*spawn_fn)(struct ferry_fiber **, void (*)(void *), void *);
typedef int (*yield_fn)(void);
typedef int (*join_fn)(struct ferry_fiber *);
typedef struct ferry_fiber *(*self_fn)(void);
typedef int (*stats_fn)(struct ferry_group *, struct ferry_group_stats *);

static config_fn config_default;
static create_fn group_create;
static run_fn carrier_run;
static spawn_fn spawn;
static yield_fn yield;
static join_fn join;
static self_fn self;
static stats_fn group_stats;

typedef LONG (NTAPI *delay_fn)(BOOLEAN, LARGE_INTEGER *);
static delay_fn nt_delay;

/* the events of a scenario, in the order they happened */
static char trace[4096];
static void note(const char *s)
{
    strncat(trace, s, sizeof(trace) - strlen(trace) - 2);
    strcat(trace, " ");
}

/* ---- fibers ------------------------------------------------------------ */

struct worker {
    int id, rounds;
    long sum;
};

static void counter(void *p)
{
    struct worker *w = p;
    char s[32];
    for (int i = 0; i < w->rounds; i++) {
        w->sum += (long)w->id * 1000 + i;
        snprintf(s, sizeof(s), "%d.%d", w->id, i);
        note(s);
        if (self() == NULL || yield() != 0)
            note("BAD");
    }
}

static int nfibers;

static void fibers_main(void *arg)
{
    (void)arg;
    struct worker w[64];
    struct ferry_fiber *f[64];
    for (int i = 0; i < nfibers; i++) {
        w[i] = (struct worker){i, 3, 0};
        if (spawn(&f[i], counter, &w[i]) != 0)
            note("SPAWN-FAILED");
    }
    for (int i = 0; i < nfibers; i++)
        if (join(f[i]) != 0)
            note("JOIN-FAILED");
    printf("order: %s\n", trace);
    for (int i = 0; i < nfibers; i++)
        printf("sum %d %ld\n", i, w[i].sum);
    printf("self-outside-null %d\n", 0);
}

/* ---- SEH and stack probes ------------------------------------------------ */

#define MY_CODE 0xE0004321
static volatile LONG continued;
static volatile int *volatile bad_pointer;
static int fallback = 42;

static LONG CALLBACK handler(EXCEPTION_POINTERS *ep)
{
    if (ep->ExceptionRecord->ExceptionCode == MY_CODE) {
        InterlockedIncrement(&continued);
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    if (ep->ExceptionRecord->ExceptionCode == EXCEPTION_ACCESS_VIOLATION) {
        DWORD64 *regs = &ep->ContextRecord->Rax;
        for (int r = 0; r < 16; r++)
            if (regs[r] == (DWORD64)(INT_PTR)bad_pointer)
                regs[r] = (DWORD64)(INT_PTR)&fallback;
        bad_pointer = &fallback;
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    return EXCEPTION_CONTINUE_SEARCH;
}

static jmp_buf out;
static volatile int jump = 1;

static __attribute__((noinline)) int deep(int n)
{
    volatile char pad[512];
    pad[0] = (char)n;
    if (n == 0) {
        if (jump)
            longjmp(out, 7);
        return 0;
    }
    return deep(n - 1) + pad[0];
}

static __attribute__((noinline)) long big_frame(void)
{
    volatile char buf[192 * 1024];
    for (size_t i = 0; i < sizeof(buf); i += 4096)
        buf[i] = (char)(i >> 12);
    long s = 0;
    for (size_t i = 0; i < sizeof(buf); i += 4096)
        s += buf[i];
    return s;
}

static void seh_fiber(void *arg)
{
    (void)arg;
    void *h = AddVectoredExceptionHandler(1, handler);
    RaiseException(MY_CODE, 0, 0, NULL);
    RaiseException(MY_CODE, 0, 0, NULL);
    bad_pointer = (volatile int *)(INT_PTR)0x10;
    int value = *bad_pointer;
    RemoveVectoredExceptionHandler(h);
    int jumped = setjmp(out);
    if (!jumped)
        deep(40);
    NT_TIB *tib;
    __asm__ volatile("movq %%gs:0x30, %0" : "=r"(tib));   /* NtCurrentTeb */
    char local;
    int on_fiber_stack = (char *)&local < (char *)tib->StackBase && (char *)&local >= (char *)tib->StackLimit;
    printf("continued %ld recovered %d longjmp %d probe %ld on-own-stack %d\n", continued, value, jumped,
           big_frame(), on_fiber_stack);
}

static void seh_main(void *arg)
{
    struct ferry_fiber *f;
    spawn(&f, seh_fiber, arg);
    join(f);
}

/* ---- a thread's own TEB fields, per fiber ----------------------------------- */

/* Each fiber sets its last error and WinSockData (ws2_32's per-thread data)
 * to values of its own, yields to the others, and reads them back. */
static void teb_fiber(void *arg)
{
    int i = (int)(INT_PTR)arg;
    SetLastError(1000 + i);
    NT_TIB *tib;
    __asm__ volatile("movq %%gs:0x30, %0" : "=r"(tib));
    void **ws = (void **)((char *)tib + 0x1738);
    *ws = (void *)(INT_PTR)(0x5000 + i);
    yield();
    yield();
    DWORD le = GetLastError();
    char line[96];
    int n = snprintf(line, sizeof(line), "fiber %d last-error %lu winsock %#llx\n", i, le,
                     (unsigned long long)(INT_PTR)*ws);
    DWORD put;      /* one write: an unbuffered printf's pieces would interleave with the others' */
    WriteFile(GetStdHandle(STD_OUTPUT_HANDLE), line, (DWORD)n, &put, NULL);
}

static void teb_main(void *arg)
{
    (void)arg;
    struct ferry_fiber *f[3];
    for (int i = 0; i < 3; i++)
        spawn(&f[i], teb_fiber, (void *)(INT_PTR)i);
    for (int i = 0; i < 3; i++)
        join(f[i]);
}

/* ---- parking -------------------------------------------------------------- */

static HANDLE pipe_r, pipe_w, event;

static void reader(void *arg)
{
    (void)arg;
    char buf[16] = {0};
    DWORD got = 0;
    note("read-starts");
    BOOL ok = ReadFile(pipe_r, buf, sizeof(buf) - 1, &got, NULL);
    char s[64];
    snprintf(s, sizeof(s), "read-got:%d:%s", ok, buf);
    note(s);
}

static void writer(void *arg)
{
    (void)arg;
    DWORD put;
    note("writer-runs");
    WriteFile(pipe_w, "hello", 5, &put, NULL);
}

static void waiter(void *arg)
{
    (void)arg;
    note("wait-starts");
    DWORD r = WaitForSingleObject(event, 10000);
    char s[32];
    snprintf(s, sizeof(s), "wait-got:%lu", r);
    note(s);
}

static void setter(void *arg)
{
    (void)arg;
    note("setter-runs");
    SetEvent(event);
}

static void sleeper(void *arg)
{
    (void)arg;
    note("sleep-starts");
    LARGE_INTEGER d = {.QuadPart = -200 * 10000LL};   /* 200 ms, relative */
    LONG st = nt_delay(FALSE, &d);
    char s[32];
    snprintf(s, sizeof(s), "sleep-done:%lx", st);
    note(s);
}

static void other(void *arg)
{
    (void)arg;
    note("other-runs");
}

static void pair(void (*a)(void *), void (*b)(void *))
{
    struct ferry_fiber *fa, *fb;
    spawn(&fa, a, 0);
    spawn(&fb, b, 0);
    join(fa);
    join(fb);
}

static int sleep_only, spin;
static volatile int slept;

/* only yields until the sleeper is done: its stored call must still leave */
static void spinner(void *arg)
{
    (void)arg;
    note("spinner-runs");
    long turns = 0;
    while (!slept)
        if (yield() != 0 || ++turns > 100000000)
            break;
    note(slept ? "spinner-saw-sleep-done" : "spinner-gave-up");
}

static void sleeper_then_flag(void *arg)
{
    sleeper(arg);
    slept = 1;
}

static void park_main(void *arg)
{
    (void)arg;
    if (spin)
        pair(sleeper_then_flag, spinner);
    else if (!sleep_only) {
        pair(reader, writer);
        pair(waiter, setter);
    }
    if (!spin)
        pair(sleeper, other);
    printf("order: %s\n", trace);
}

/* ---- results -------------------------------------------------------------- */

struct results {
    LONG wait_set, wait_timeout, wait_bad, delay, read_status, yield;
    ULONG_PTR read_info;
    char read_data[8];
};

typedef LONG (NTAPI *wait_fn)(HANDLE, BOOLEAN, LARGE_INTEGER *);
typedef LONG (NTAPI *read_fn)(HANDLE, HANDLE, void *, void *, IO_STATUS_BLOCK *, void *, ULONG,
                              LARGE_INTEGER *, ULONG *);
typedef LONG (NTAPI *yield_nt_fn)(void);
static wait_fn nt_wait;
static read_fn nt_read;
static yield_nt_fn nt_yield;

static void calls(struct results *r)
{
    LARGE_INTEGER zero = {.QuadPart = -1};
    HANDLE set = CreateEventA(NULL, TRUE, TRUE, NULL), unset = CreateEventA(NULL, TRUE, FALSE, NULL);
    r->wait_set = nt_wait(set, FALSE, &zero);
    r->wait_timeout = nt_wait(unset, FALSE, &zero);
    r->wait_bad = nt_wait((HANDLE)(INT_PTR)0x7ff0, FALSE, &zero);
    r->delay = nt_delay(FALSE, &zero);
    r->yield = nt_yield();
    HANDLE rd, wr;
    CreatePipe(&rd, &wr, NULL, 0);
    DWORD put;
    WriteFile(wr, "abcdef", 6, &put, NULL);
    IO_STATUS_BLOCK io = {0};
    memset(r->read_data, 0, sizeof(r->read_data));
    r->read_status = nt_read(rd, NULL, NULL, NULL, &io, r->read_data, 4, NULL, NULL);
    r->read_info = io.Information;
    CloseHandle(rd);
    CloseHandle(wr);
    CloseHandle(set);
    CloseHandle(unset);
}

static struct results on_fiber;

static void results_main(void *arg)
{
    (void)arg;
    calls(&on_fiber);
}

static void print_results(const char *where, const struct results *r)
{
    printf("%s wait_set=%lx wait_timeout=%lx wait_bad=%lx delay=%lx yield=%lx read=%lx/%llu/%s\n",
           where, r->wait_set, r->wait_timeout, r->wait_bad, r->delay, r->yield, r->read_status,
           (unsigned long long)r->read_info, r->read_data);
}

/* ------------------------------------------------------------------------------ */

#define GET(var, name) (var = (void *)GetProcAddress(dll, name))

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    HMODULE ntdll = GetModuleHandleA("ntdll.dll");
    nt_delay = (delay_fn)(void *)GetProcAddress(ntdll, "NtDelayExecution");
    nt_wait = (wait_fn)(void *)GetProcAddress(ntdll, "NtWaitForSingleObject");
    nt_read = (read_fn)(void *)GetProcAddress(ntdll, "NtReadFile");
    nt_yield = (yield_nt_fn)(void *)GetProcAddress(ntdll, "NtYieldExecution");
    HMODULE dll = GetModuleHandleA("ferry.dll");
    if (argc < 2)
        return 64;
    if (!strcmp(argv[1], "child")) {
        char cmd[4096], self_path[MAX_PATH];
        GetModuleFileNameA(NULL, self_path, sizeof(self_path));
        snprintf(cmd, sizeof(cmd), "\"%s\"", self_path);
        for (int i = 2; i < argc; i++)
            snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", argv[i]);
        STARTUPINFOA si = {.cb = sizeof(si)};
        PROCESS_INFORMATION pi;
        if (!CreateProcessA(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi))
            return 6;
        WaitForSingleObject(pi.hProcess, INFINITE);
        DWORD code = 7;
        GetExitCodeProcess(pi.hProcess, &code);
        return (int)code;
    }
    if (!dll) {
        printf("no ferry.dll\n");
        return 3;
    }
    if (!GET(config_default, "ferry_group_config_default") || !GET(group_create, "ferry_group_create") ||
        !GET(carrier_run, "ferry_carrier_run") || !GET(spawn, "ferry_fiber_spawn") ||
        !GET(yield, "ferry_fiber_yield") || !GET(join, "ferry_fiber_join") ||
        !GET(self, "ferry_fiber_self") || !GET(group_stats, "ferry_group_stats")) {
        printf("ferry.dll lacks the fiber API\n");
        return 4;
    }
    static struct ferry_group_config cfg;
    struct ferry_group *g;
    int r = config_default(&cfg, 1);
    if (r == 0)
        r = group_create(&g, &cfg);
    if (r != 0) {
        printf("no group: %d\n", r);
        return 5;
    }
    if (self() != NULL || yield() == 0)
        printf("fiber API works outside a carrier\n");
    void (*main_fn)(void *) = 0;
    struct results native;
    if (!strcmp(argv[1], "fibers") && argc == 3) {
        nfibers = atoi(argv[2]);
        if (nfibers < 1 || nfibers > 64)
            return 64;
        main_fn = fibers_main;
    } else if (!strcmp(argv[1], "seh"))
        main_fn = seh_main;
    else if (!strcmp(argv[1], "teb"))
        main_fn = teb_main;
    else if (!strcmp(argv[1], "park")) {
        sleep_only = argc == 3 && !strcmp(argv[2], "sleep");
        spin = argc == 3 && !strcmp(argv[2], "spin");
        CreatePipe(&pipe_r, &pipe_w, NULL, 0);
        event = CreateEventA(NULL, TRUE, FALSE, NULL);
        main_fn = park_main;
    } else if (!strcmp(argv[1], "results")) {
        calls(&native);
        main_fn = results_main;
    } else
        return 64;
    r = carrier_run(g, main_fn, 0);
    if (!strcmp(argv[1], "results")) {
        print_results("native", &native);
        print_results("fiber", &on_fiber);
    }
    struct ferry_group_stats st;
    group_stats(g, &st);
    printf("carrier %d fibers %llu switches %llu aggregated %llu\n", r, (unsigned long long)st.fibers,
           (unsigned long long)st.switches, (unsigned long long)(st.aggregated + st.worker));
    return 0;
}
