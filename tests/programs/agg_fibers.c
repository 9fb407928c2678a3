/* Fibers on one carrier: per-fiber glibc state, sharing a mutex and a
 * condition variable, the order of one fiber's calls, a failing call in a
 * batch, worker fallback, and the API's answers to bad arguments.
 * Usage: agg_fibers TEST [DIR]; prints "ok ..." lines or "FAIL ..." and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agg_common.h"

static const char *dir;

/* ---- errno, malloc, printf per fiber ---- */
static int *errno_addr[2];
static void errno_fiber(void *arg)
{
    long i = (long)arg;
    errno_addr[i] = &errno;
    if (i == 0)
        close(-1);                        /* EBADF */
    else
        open("/nonexistent/x", O_RDONLY); /* ENOENT */
    int mine = errno;
    for (int k = 0; k < 5; k++) {
        ferry_fiber_yield();
        char *p = malloc(64 + k * 1000);
        CHECK(p != NULL, "malloc");
        snprintf(p, 64, "fiber %ld round %d", i, k);
        free(p);
        CHECK(errno == mine, "fiber %ld errno %d, expected %d", i, errno, mine);
    }
    printf("ok errno fiber %ld keeps %d\n", i, mine);
}
static void test_errno(void *arg)
{
    (void)arg;
    struct ferry_fiber *a, *b;
    ferry_fiber_spawn(&a, errno_fiber, (void *)0);
    ferry_fiber_spawn(&b, errno_fiber, (void *)1);
    ferry_fiber_join(a);
    ferry_fiber_join(b);
    CHECK(errno_addr[0] != errno_addr[1], "fibers share errno at %p", (void *)errno_addr[0]);
    CHECK(ferry_fiber_self() != NULL, "main fiber has no self");
}

/* ---- a mutex and a condition variable shared by fibers ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int queue[16], qn, produced, consumed, in_section, overlap;
static int p_[2];

static void locker(void *arg)
{
    (void)arg;
    /* as after pthread_create: glibc's locks must not take the
     * single-threaded shortcut (a plain store, no wake for the others) */
    CHECK(!__libc_single_threaded, "a fiber's glibc believes the process single-threaded");
    for (int k = 0; k < 20; k++) {
        pthread_mutex_lock(&mu);
        if (in_section++)
            overlap = 1;
        /* I/O and a yield while holding the lock: the others must park */
        char c = 'x';
        write(p_[1], &c, 1);
        read(p_[0], &c, 1);
        ferry_fiber_yield();
        in_section--;
        pthread_mutex_unlock(&mu);
    }
}
static void producer(void *arg)
{
    (void)arg;
    for (int k = 0; k < 100; k++) {
        pthread_mutex_lock(&mu);
        while (qn == 16)
            pthread_cond_wait(&cv, &mu);
        queue[qn++] = k;
        produced++;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}
static void consumer(void *arg)
{
    (void)arg;
    int expect = 0;
    while (expect < 100) {
        pthread_mutex_lock(&mu);
        while (qn == 0)
            pthread_cond_wait(&cv, &mu);
        CHECK(queue[0] == expect, "consumer got %d, expected %d", queue[0], expect);
        memmove(queue, queue + 1, --qn * sizeof(int));
        expect++;
        consumed++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}
static void test_mutex(void *arg)
{
    (void)arg;
    pipe(p_);
    struct ferry_fiber *f[4];
    for (int i = 0; i < 4; i++)
        ferry_fiber_spawn(&f[i], locker, 0);
    for (int i = 0; i < 4; i++)
        ferry_fiber_join(f[i]);
    CHECK(!overlap, "two fibers were inside the mutex at once");
    printf("ok mutex exclusive across I/O and yields\n");
    struct ferry_fiber *c, *p;
    ferry_fiber_spawn(&c, consumer, 0);
    ferry_fiber_spawn(&p, producer, 0);
    ferry_fiber_join(p);
    ferry_fiber_join(c);
    CHECK(produced == 100 && consumed == 100, "produced %d consumed %d", produced, consumed);
    printf("ok condvar producer/consumer %d\n", consumed);
}

/* ---- order within a fiber, with many fibers at once ---- */
#define NF 16
#define NW 50
static void writer(void *arg)
{
    long i = (long)arg;
    char name[600];
    snprintf(name, sizeof name, "%s/order.%ld", dir, i);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int k = 0; k < NW; k++) {
        char rec[16];
        int n = snprintf(rec, sizeof rec, "%03d\n", k);
        CHECK(write(fd, rec, n) == n, "short write");
    }
    close(fd);
}
static void test_order(void *arg)
{
    (void)arg;
    struct ferry_fiber *f[NF];
    for (long i = 0; i < NF; i++)
        ferry_fiber_spawn(&f[i], writer, (void *)i);
    for (int i = 0; i < NF; i++)
        ferry_fiber_join(f[i]);
    for (long i = 0; i < NF; i++) {
        char name[600], buf[NW * 4 + 8];
        snprintf(name, sizeof name, "%s/order.%ld", dir, i);
        int fd = open(name, O_RDONLY);
        long n = read(fd, buf, sizeof buf);
        close(fd);
        CHECK(n == NW * 4, "file %ld has %ld bytes", i, n);
        for (int k = 0; k < NW && n == NW * 4; k++)
            CHECK(atoi(buf + 4 * k) == k, "file %ld record %d is %d", i, k, atoi(buf + 4 * k));
    }
    printf("ok order %d fibers x %d writes\n", NF, NW);
}

/* ---- one failing call among a batch ---- */
#define NB 32
static long results[NB];
static int errnos[NB];
static int pipes_[NB][2];
static void one_read(void *arg)
{
    long i = (long)arg;
    char buf[32];
    int fd = i == NB / 2 ? 1000 + NB : pipes_[i][0];  /* a descriptor that is not open */
    errno = 0;
    results[i] = read(fd, buf, sizeof buf);
    errnos[i] = errno;
    if (results[i] > 0)
        CHECK(atoi(buf) == (int)i, "fiber %ld read %.*s", i, (int)results[i], buf);
}
static void test_failing(void *arg)
{
    (void)arg;
    for (int i = 0; i < NB; i++) {
        pipe(pipes_[i]);
        char b[8];
        int n = snprintf(b, sizeof b, "%d", i);
        write(pipes_[i][1], b, n);
    }
    struct ferry_fiber *f[NB];
    for (long i = 0; i < NB; i++)
        ferry_fiber_spawn(&f[i], one_read, (void *)i);
    for (int i = 0; i < NB; i++)
        ferry_fiber_join(f[i]);
    for (int i = 0; i < NB; i++) {
        if (i == NB / 2)
            CHECK(results[i] == -1 && errnos[i] == EBADF, "bad read gave %ld errno %d", results[i], errnos[i]);
        else
            CHECK(results[i] == (i < 10 ? 1 : 2) && errnos[i] == 0, "read %d gave %ld errno %d", i,
                  results[i], errnos[i]);
    }
    struct ferry_group_stats st;
    ferry_group_stats(agg_group, &st);
    uint64_t big = 0;
    for (int b = 4; b < FERRY_BATCH_BUCKETS; b++)  /* batches of 16 or more */
        big += st.pools[0].batches[b];
    CHECK(big > 0, "no batch of 16 or more calls");
    printf("ok failing call alone among %d\n", NB);
}

/* ---- worker fallback ---- */
static void test_worker(void *arg)
{
    (void)arg;
    struct ferry_group_stats before, after;
    ferry_group_stats(agg_group, &before);
    long ppid = getppid();   /* routed to pool 0, which has no operation for it */
    char name[600];
    snprintf(name, sizeof name, "%s/lock", dir);
    int fd = open(name, O_RDWR | O_CREAT, 0644);
    int r1 = flock(fd, LOCK_EX);
    int r2 = flock(-1, LOCK_EX);
    int e2 = errno;
    close(fd);
    ferry_group_stats(agg_group, &after);
    CHECK(ppid == syscall(SYS_getppid), "getppid %ld", ppid);
    CHECK(r1 == 0 && r2 == -1 && e2 == EBADF, "flock %d %d %d", r1, r2, e2);
    CHECK(after.worker - before.worker >= 3, "worker calls %lu", (unsigned long)(after.worker - before.worker));
    printf("ok worker ran %lu calls\n", (unsigned long)(after.worker - before.worker));
}

/* ---- the API's answers ---- */
static void test_api(void *arg)
{
    (void)arg;
    CHECK(ferry_fiber_join((struct ferry_fiber *)ferry_fiber_self()) == -EDEADLK, "self join");
    CHECK(ferry_carrier_run(agg_group, test_api, 0) == -EBUSY, "nested carrier");
    CHECK(ferry_group_destroy(agg_group) == -EBUSY, "destroy while running");
    printf("ok api on a carrier\n");
}

static int config_rejected(void (*edit)(struct ferry_group_config *), const char *what)
{
    struct ferry_group_config cfg;
    ferry_group_config_default(&cfg, 0);
    edit(&cfg);
    struct ferry_group *g = 0;
    int r = ferry_group_create(&g, &cfg);
    CHECK(r == -EINVAL, "%s: %d", what, r);
    if (r == 0)
        ferry_group_destroy(g);
    return r == -EINVAL;
}
#define BAD(what, body) static void bad_##what(struct ferry_group_config *c) { body; }
BAD(npools0, c->npools = 0)
BAD(npools9, c->npools = 9)
BAD(entries3, c->pools[0].entries = 3)
BAD(entries_big, c->pools[0].entries = 65536)
BAD(sqpoll_cpu, c->pools[0].sqpoll_cpu = 4096)
BAD(sqpoll_neg, c->pools[0].sqpoll_cpu = -2)
BAD(affinity, c->pools[0].cpus = 1ULL << 63)
BAD(prio_low, c->pools[0].priority = -21)
BAD(prio_high, c->pools[0].priority = 20)
BAD(some_limit0, { c->pools[0].wait = FERRY_WAIT_SOME; c->pools[0].wait_limit = 0; c->pools[0].wait_timeout_ns = 1000; })
BAD(some_timeout0, { c->pools[0].wait = FERRY_WAIT_SOME; c->pools[0].wait_limit = 4; c->pools[0].wait_timeout_ns = 0; })
BAD(wait_enum, c->pools[0].wait = (enum ferry_wait)9)
BAD(route_missing_pool, c->route[SYS_read] = 3)
BAD(route_clone, c->route[SYS_clone] = FERRY_ROUTE_WORKER)
BAD(route_exit, c->route[SYS_exit_group] = 0)
BAD(route_mmap, c->route[SYS_mmap] = 0)
BAD(stack_tiny, c->fiber_stack = 100)
BAD(workers, c->workers = 100000)

static void test_config(void)
{
    struct ferry_group *g;
    int n = 0;
    n += config_rejected(bad_npools0, "npools 0");
    n += config_rejected(bad_npools9, "npools 9");
    n += config_rejected(bad_entries3, "entries 3");
    n += config_rejected(bad_entries_big, "entries 65536");
    n += config_rejected(bad_sqpoll_cpu, "sqpoll cpu 4096");
    n += config_rejected(bad_sqpoll_neg, "sqpoll cpu -2");
    n += config_rejected(bad_affinity, "affinity cpu 63");
    n += config_rejected(bad_prio_low, "priority -21");
    n += config_rejected(bad_prio_high, "priority 20");
    n += config_rejected(bad_some_limit0, "some limit 0");
    n += config_rejected(bad_some_timeout0, "some timeout 0");
    n += config_rejected(bad_wait_enum, "wait 9");
    n += config_rejected(bad_route_missing_pool, "route to pool 3 of 1");
    n += config_rejected(bad_route_clone, "clone to worker");
    n += config_rejected(bad_route_exit, "exit_group to a pool");
    n += config_rejected(bad_route_mmap, "mmap to a pool");
    n += config_rejected(bad_stack_tiny, "stack 100");
    n += config_rejected(bad_workers, "workers 100000");
    CHECK(ferry_group_create(&g, NULL) == -EINVAL, "NULL config");
    CHECK(ferry_group_create(NULL, NULL) == -EINVAL, "NULL out");
    CHECK(ferry_carrier_run(NULL, test_api, 0) == -EINVAL, "NULL group");
    CHECK(ferry_fiber_spawn(NULL, test_api, 0) == -EINVAL, "spawn outside a carrier");
    CHECK(ferry_fiber_yield() == -EINVAL, "yield outside a carrier");
    CHECK(ferry_fiber_self() == NULL, "self outside a carrier");
    CHECK(ferry_group_config_default(NULL, 0) == -EINVAL, "default into NULL");
    printf("ok %d invalid configurations rejected\n", n);
    /* and a valid one with every setting */
    struct ferry_group_config cfg;
    ferry_group_config_default(&cfg, 0);
    cfg.npools = 2;
    cfg.pools[1] = (struct ferry_pool_config){.entries = 64, .concurrency = 2, .cpus = 1,
                                              .sqpoll_cpu = -1, .priority = 5,
                                              .wait = FERRY_WAIT_SOME, .wait_limit = 4,
                                              .wait_timeout_ns = 100000};
    cfg.route[SYS_pread64] = 1;
    int r = ferry_group_create(&g, &cfg);
    CHECK(r == 0, "valid two-pool group: %d", r);
    if (r == 0)
        CHECK(ferry_group_destroy(g) == 0, "destroy");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    dir = argc > 2 ? argv[2] : "/tmp";
    const char *t = argv[1];
    if (!strcmp(t, "config")) {
        test_config();
    } else {
        struct ferry_group_config cfg;
        ferry_group_config_default(&cfg, 1);
        if (!strcmp(t, "worker"))
            cfg.route[SYS_getppid] = 0;
        int r = ferry_group_create(&agg_group, &cfg);
        if (r)
            agg_die("ferry_group_create", r);
        void (*fn)(void *) = !strcmp(t, "errno") ? test_errno
                             : !strcmp(t, "mutex") ? test_mutex
                             : !strcmp(t, "order") ? test_order
                             : !strcmp(t, "failing") ? test_failing
                             : !strcmp(t, "worker") ? test_worker
                             : !strcmp(t, "api") ? test_api : NULL;
        if (!fn)
            return 2;
        r = ferry_carrier_run(agg_group, fn, 0);
        CHECK(r == 0, "carrier_run %d", r);
        struct ferry_group_stats st;
        ferry_group_stats(agg_group, &st);
        CHECK(st.aggregated > 0 || !strcmp(t, "api"), "nothing went through a pool");
        CHECK(ferry_group_destroy(agg_group) == 0, "destroy");
    }
    fflush(stdout);
    return failures ? 1 : 0;
}
