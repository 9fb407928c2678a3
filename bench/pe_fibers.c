/* bench/pe_fibers (a Windows program, built with mingw-w64 by
 * bench/pe_cluster_fibers.py): the per-call cost of NtYieldExecution made by
 * N fibers on one carrier of ferry.dll, each call routed as the profile
 * says (to a pool: stored, the fiber parks, the batch leaves when no fiber
 * is ready), or natively on the thread; best of 3 runs, ns per call.
 *
 *   pe_fibers.exe native CALLS
 *   pe_fibers.exe fibers N CALLS      (under `ferry run -p PROFILE`)
 *   pe_fibers.exe switch N CALLS      N fibers that only ferry_fiber_yield:
 *                                     ns per switch (SwitchToFiber and the
 *                                     scheduler's turn)
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../shim/include/ferry.h"
#include "pe_clock.h"

static yield_fn yield;
static long per_fiber;
static int nfibers;
static double best = 1e300;

typedef int (*config_fn)(struct ferry_group_config *, int);
typedef int (*create_fn)(struct ferry_group **, const struct ferry_group_config *);
typedef int (*run_fn)(struct ferry_group *, void (*)(void *), void *);
typedef int (*spawn_fn)(struct ferry_fiber **, void (*)(void *), void *);
typedef int (*join_fn)(struct ferry_fiber *);
typedef int (*yield_api_fn)(void);
static spawn_fn spawn;
static join_fn join;
static yield_api_fn fiber_yield;
static int switching;


static void caller(void *arg)
{
    (void)arg;
    if (switching)
        for (long i = 0; i < per_fiber; i++)
            fiber_yield();
    else
        for (long i = 0; i < per_fiber; i++)
            yield();
}

/* all fibers spawned first: the time is the calls', not the fibers' making */
static void fibers_main(void *arg)
{
    (void)arg;
    static struct ferry_fiber *f[4096];
    for (int i = 0; i < nfibers; i++)
        if (spawn(&f[i], caller, 0))
            exit(2);
    double t0 = now_ns();
    for (int i = 0; i < nfibers; i++)
        join(f[i]);
    double per = (now_ns() - t0) / ((double)per_fiber * nfibers);
    if (per < best)
        best = per;
}

int main(int argc, char **argv)
{
    yield = (yield_fn)(void (*)(void))GetProcAddress(GetModuleHandleA("ntdll.dll"), "NtYieldExecution");
    if (argc == 3 && !strcmp(argv[1], "native")) {
        long n = atol(argv[2]);
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_ns();
            for (long i = 0; i < n; i++)
                yield();
            double per = (now_ns() - t0) / (double)n;
            if (per < best)
                best = per;
        }
    } else if (argc == 4 && (!strcmp(argv[1], "fibers") || !strcmp(argv[1], "switch"))) {
        switching = !strcmp(argv[1], "switch");
        nfibers = atoi(argv[2]);
        long calls = atol(argv[3]);
        if (nfibers < 1 || nfibers > 4096)
            return 64;
        per_fiber = calls / nfibers > 0 ? calls / nfibers : 1;
        HMODULE dll = GetModuleHandleA("ferry.dll");
        if (!dll)
            return 3;
        config_fn config = (config_fn)(void (*)(void))GetProcAddress(dll, "ferry_group_config_default");
        create_fn create = (create_fn)(void (*)(void))GetProcAddress(dll, "ferry_group_create");
        run_fn run = (run_fn)(void (*)(void))GetProcAddress(dll, "ferry_carrier_run");
        spawn = (spawn_fn)(void (*)(void))GetProcAddress(dll, "ferry_fiber_spawn");
        join = (join_fn)(void (*)(void))GetProcAddress(dll, "ferry_fiber_join");
        fiber_yield = (yield_api_fn)(void (*)(void))GetProcAddress(dll, "ferry_fiber_yield");
        static struct ferry_group_config cfg;
        struct ferry_group *g;
        if (!config || !create || !run || !spawn || !join || !fiber_yield || config(&cfg, 1) || create(&g, &cfg))
            return 4;
        for (int rep = 0; rep < 3; rep++)
            if (run(g, fibers_main, 0))
                return 5;
    } else
        return 64;
    printf("%.1f\n", best);
    return 0;
}
