/* bench/pe_cluster (a Windows program, built with mingw-w64 by
 * bench/pe_cluster.py, run under `ferry run`): Table 6.2's shape for
 * ferry.dll.  The per-call cost of NtYieldExecution made natively, and made
 * through a pool of ferry.dll's workers as raw batches of 1, 2, 4 ... 1024
 * (ferry_submit, FERRY_WAIT_ALL), best of 5 runs of about N calls each;
 * or FERRY_NR_NOP through the pool, which makes no system call: what the
 * pool's rings and workers cost by themselves.
 *
 *   pe_cluster.exe native N               prints "NS" (runs under plain wine too)
 *   pe_cluster.exe raw N WORKERS yield|nop  prints "BATCH NS" lines, 1 .. 1024
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../shim/include/ferry.h"

#define MAX_BATCH 1024

#include "pe_clock.h"

static void *must(HMODULE m, const char *name)
{
    void *p = (void *)GetProcAddress(m, name);
    if (!p) {
        fprintf(stderr, "pe_cluster: no %s (run under `ferry run`)\n", name);
        exit(3);
    }
    return p;
}

static double native(long n)
{
    yield_fn yield = (yield_fn)(void (*)(void))GetProcAddress(GetModuleHandleA("ntdll.dll"), "NtYieldExecution");
    double best = 1e300;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            yield();
        double per = (now_ns() - t0) / (double)n;
        best = per < best ? per : best;
    }
    return best;
}

static int raw(long n, unsigned workers, int nop)
{
    HMODULE ferry = GetModuleHandleA("ferry.dll");
    if (!ferry) {
        fprintf(stderr, "pe_cluster: ferry.dll is not loaded (run under `ferry run`)\n");
        return 3;
    }
    int (*config_default)(struct ferry_group_config *, int) = must(ferry, "ferry_group_config_default");
    int (*create)(struct ferry_group **, const struct ferry_group_config *) = must(ferry, "ferry_group_create");
    int (*destroy)(struct ferry_group *) = must(ferry, "ferry_group_destroy");
    int (*submit)(struct ferry_group *, unsigned, struct ferry_call *, unsigned, enum ferry_wait, unsigned,
                  uint64_t) = must(ferry, "ferry_submit");
    int (*number)(const char *) = must(ferry, "ferry_call_number");
    struct ferry_group_config cfg;
    config_default(&cfg, 0);
    cfg.pools[0].entries = MAX_BATCH;
    cfg.pools[0].concurrency = workers;
    /* the program's thread on CPU 0, the pool's workers on the others: a
     * waiting client spins on its ring, and a worker sharing its CPU would
     * wait for it (the figures then depend on where the scheduler put them) */
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    if (si.dwNumberOfProcessors >= 2) {
        SetThreadAffinityMask(GetCurrentThread(), 1);
        cfg.pools[0].cpus = (si.dwNumberOfProcessors >= 64 ? ~0ULL : (1ULL << si.dwNumberOfProcessors) - 1) & ~1ULL;
    }
    struct ferry_group *g;
    int r = create(&g, &cfg);
    if (r) {
        fprintf(stderr, "pe_cluster: ferry_group_create: %d\n", r);
        return 1;
    }
    static struct ferry_call calls[MAX_BATCH];
    long long nr = nop ? FERRY_NR_NOP : number("NtYieldExecution");
    for (unsigned b = 1; b <= MAX_BATCH; b *= 2) {
        long rounds = n / b ? n / b : 1;
        double best = 1e300;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now_ns();
            for (long k = 0; k < rounds; k++) {
                for (unsigned i = 0; i < b; i++)
                    calls[i].nr = nr;
                if (submit(g, 0, calls, b, FERRY_WAIT_ALL, 0, 0) != (int)b) {
                    fprintf(stderr, "pe_cluster: a batch of %u did not complete\n", b);
                    return 1;
                }
            }
            double per = (now_ns() - t0) / (double)(rounds * b);
            best = per < best ? per : best;
        }
        printf("%u %.1f\n", b, best);
    }
    destroy(g);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "native")) {
        printf("%.1f\n", native(atol(argv[2])));
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "raw"))
        return raw(atol(argv[2]), (unsigned)atoi(argv[3]), !strcmp(argv[4], "nop"));
    return 64;
}
