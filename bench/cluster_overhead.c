/* bench/cluster_overhead: the per-call cost of a no-op system call, alone
 * and in Cluster Calls batches (the thesis's Table 6.2).
 *
 *   cluster_overhead native B    getppid, a plain `syscall`
 *   cluster_overhead floor B     B NOPs per io_uring_enter with liburing alone, no Ferry
 *                                code: the kernel's own cost, the floor of the raw path
 *   cluster_overhead raw B       B io_uring NOPs per ferry_submit (WaitAll), same core
 *   cluster_overhead remote B    the same on a pool whose SQPOLL thread runs on another core
 *   cluster_overhead fiber B     B fibers each calling sched_yield() through the
 *                                rewritten libc: the shim routes it to an io_uring NOP,
 *                                the fiber parks, the carrier submits all B at once
 *
 * Prints the best of 5 runs, in ns per call.  The calling thread is pinned
 * to CPU 0 (the remote pool's SQPOLL thread to CPU 1).  `fiber` needs libc
 * rewritten by `ferry instrument` (bench/cluster_overhead.py arranges it).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "ferry.h"

/* calls per timed run; the optional third argument raises it (for perf record,
 * where set-up and teardown should be a negligible part of the samples) */
static unsigned total_calls = 200000;
#define TOTAL_CALLS total_calls
#define REPS 5

static uint64_t now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static long raw_getppid(void)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
    return r;
}

static void die(const char *what, int r)
{
    fprintf(stderr, "cluster_overhead: %s: %s\n", what, strerror(-r));
    exit(1);
}

static struct ferry_group *make_group(unsigned batch, int sqpoll_cpu)
{
    struct ferry_group_config cfg;
    ferry_group_config_default(&cfg, 0);
    unsigned entries = 1;
    while (entries < batch)
        entries <<= 1;
    cfg.pools[0].entries = entries < 8 ? 8 : entries;
    cfg.pools[0].sqpoll_cpu = sqpoll_cpu;
    cfg.pools[0].wait = FERRY_WAIT_ALL;
    cfg.route[SYS_sched_yield] = 0;
    struct ferry_group *g;
    int r = ferry_group_create(&g, &cfg);
    if (r)
        die("ferry_group_create", r);
    return g;
}

static double bench_native(unsigned batch)
{
    (void)batch;
    double best = 1e18;
    for (int rep = 0; rep < REPS; rep++) {
        uint64_t t0 = now();
        for (int i = 0; i < TOTAL_CALLS; i++)
            raw_getppid();
        double ns = (double)(now() - t0) / TOTAL_CALLS;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* Batches per timed run: TOTAL_CALLS calls, and never fewer than 20 batches. */
static unsigned rounds_for(unsigned batch)
{
    unsigned rounds = TOTAL_CALLS / batch;
    return rounds < 20 ? 20 : rounds;
}

/* ns per call of `round` (one batch of `batch` calls), the best of REPS
 * timed runs after one that warms the ring (and SQPOLL). */
static double best_per_call(unsigned batch, void (*round)(void *), void *arg)
{
    unsigned rounds = rounds_for(batch);
    double best = 1e18;
    for (int rep = 0; rep < REPS + 1; rep++) {
        uint64_t t0 = now();
        for (unsigned k = 0; k < rounds; k++)
            round(arg);
        double ns = (double)(now() - t0) / ((double)rounds * batch);
        if (rep && ns < best)
            best = ns;
    }
    return best;
}

struct raw_batch {
    struct ferry_group *g;
    struct ferry_call *calls;
    unsigned n;
};

static void raw_round(void *arg)
{
    struct raw_batch *b = arg;
    for (unsigned i = 0; i < b->n; i++)
        b->calls[i].nr = FERRY_NR_NOP;
    int r = ferry_submit(b->g, 0, b->calls, b->n, FERRY_WAIT_ALL, 0, 0);
    if (r != (int)b->n)
        die("ferry_submit", r < 0 ? r : -5);
}

struct floor_batch {
    struct io_uring *ring;
    unsigned n;
};

static void floor_round(void *arg)
{
    struct floor_batch *b = arg;
    for (unsigned i = 0; i < b->n; i++)
        io_uring_prep_nop(io_uring_get_sqe(b->ring));
    int r = io_uring_submit_and_wait(b->ring, b->n);
    if (r != (int)b->n)
        die("io_uring_submit_and_wait", r < 0 ? r : -5);
    struct io_uring_cqe *cqe;
    unsigned head, got = 0;
    io_uring_for_each_cqe(b->ring, head, cqe) got++;
    io_uring_cq_advance(b->ring, got);
}

static double bench_raw(unsigned batch, int sqpoll_cpu)
{
    struct ferry_group *g = make_group(batch, sqpoll_cpu);
    struct ferry_call *calls = calloc(batch, sizeof(*calls));
    struct raw_batch b = {g, calls, batch};
    double best = best_per_call(batch, raw_round, &b);
    free(calls);
    ferry_group_destroy(g);
    return best;
}

/* What raw does, with nothing of Ferry's between the program and the ring. */
static double bench_floor(unsigned batch)
{
    struct io_uring ring;
    unsigned entries = 8;
    while (entries < batch)
        entries <<= 1;
    int r = io_uring_queue_init(entries, &ring, 0);
    if (r)
        die("io_uring_queue_init", r);
    struct floor_batch b = {&ring, batch};
    double best = best_per_call(batch, floor_round, &b);
    io_uring_queue_exit(&ring);
    return best;
}

static unsigned fiber_rounds;
static unsigned fiber_batch;
static double fiber_ns;
static int yield_errors;
static uint64_t fiber_t1;

static void one_fiber(void *arg)
{
    (void)arg;
    for (unsigned k = 0; k < fiber_rounds; k++)
        if (sched_yield() != 0)
            yield_errors++;
    /* The first fiber past its last call ends the timing: the last batch has
     * completed by then, and what follows is fiber teardown (stacks unmapped,
     * TLS freed), as little a part of a call's cost as the spawning before t0. */
    if (!fiber_t1)
        fiber_t1 = now();
}

static void fiber_main(void *arg)
{
    struct ferry_fiber **f = arg;
    for (unsigned i = 0; i < fiber_batch; i++)
        if (ferry_fiber_spawn(&f[i], one_fiber, 0))
            die("ferry_fiber_spawn", -12);
    fiber_t1 = 0;
    uint64_t t0 = now();
    for (unsigned i = 0; i < fiber_batch; i++)
        ferry_fiber_join(f[i]);
    fiber_ns = (double)(fiber_t1 - t0) / ((double)fiber_rounds * fiber_batch);
}

static double bench_fiber(unsigned batch)
{
    struct ferry_group *g = make_group(batch, -1);
    struct ferry_fiber **f = calloc(batch, sizeof(*f));
    fiber_batch = batch;
    fiber_rounds = TOTAL_CALLS / batch;
    if (fiber_rounds < 20)
        fiber_rounds = 20;
    double best = 1e18;
    struct ferry_group_stats st;
    for (int rep = 0; rep < REPS; rep++) {
        int r = ferry_carrier_run(g, fiber_main, f);
        if (r)
            die("ferry_carrier_run", r);
        if (fiber_ns < best)
            best = fiber_ns;
    }
    ferry_group_stats(g, &st);
    /* every call must have gone through the ring, batch by batch */
    if (yield_errors || st.aggregated < (uint64_t)REPS * fiber_rounds * batch) {
        fprintf(stderr, "cluster_overhead: fibers' calls were not aggregated (%lu of %lu; is libc rewritten?)\n",
                (unsigned long)st.aggregated, (unsigned long)REPS * fiber_rounds * batch);
        exit(1);
    }
    free(f);
    ferry_group_destroy(g);
    return best;
}

int main(int argc, char **argv)
{
    if (argc == 4 && atoi(argv[3]) > 0)
        total_calls = (unsigned)atoi(argv[3]);
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: cluster_overhead native|floor|raw|remote|fiber BATCH\n");
        return 2;
    }
    unsigned batch = (unsigned)atoi(argv[2]);
    if (batch < 1 || batch > 4096)
        return 2;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    sched_setaffinity(0, sizeof(set), &set);
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double ns;
    if (!strcmp(argv[1], "native"))
        ns = bench_native(batch);
    else if (!strcmp(argv[1], "floor"))
        ns = bench_floor(batch);
    else if (!strcmp(argv[1], "raw"))
        ns = bench_raw(batch, -1);
    else if (!strcmp(argv[1], "remote"))
        ns = bench_raw(batch, ncpu > 1 ? 1 : 0);
    else if (!strcmp(argv[1], "fiber"))
        ns = bench_fiber(batch);
    else
        return 2;
    printf("%.2f\n", ns);
    return 0;
}
