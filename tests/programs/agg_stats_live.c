/* The group's figures (tests/test_aggregate_crossings.py).
 * Usage: agg_stats_live busy | waves N
 *   busy: one fiber makes ring calls while another keeps yielding, so the
 *         carrier never waits; the figures it prints once the calls are done
 *         must already show them.
 *   waves N: N waves of 100 fibers that each end before the next wave
 *         starts, as a server's connections come and go. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "agg_common.h"

enum { CALLS = 2000 };
static volatile int finished;

static void caller(void *arg)
{
    (void)arg;
    int fd = open("/dev/zero", O_RDONLY);
    CHECK(fd >= 0, "open /dev/zero");
    char b[8];
    for (int i = 0; i < CALLS; i++)
        CHECK(read(fd, b, sizeof b) == (ssize_t)sizeof b, "read %d", i);
    close(fd);
    finished = 1;
}

static void first(void *arg)
{
    (void)arg;
    int r = ferry_fiber_spawn(NULL, caller, NULL);
    if (r)
        agg_die("ferry_fiber_spawn", r);
    while (!finished)
        ferry_fiber_yield();
    struct ferry_group_stats st;
    ferry_group_stats(agg_group, &st);
    printf("calls=%d aggregated=%lu native=%lu\n", CALLS, (unsigned long)st.aggregated, (unsigned long)st.native);
}

static void idle(void *arg) { (void)arg; }

static void waves(void *arg)
{
    long n = (long)arg;
    for (long w = 0; w < n; w++) {
        struct ferry_fiber *f[100];
        for (int i = 0; i < 100; i++) {
            int r = ferry_fiber_spawn(&f[i], idle, NULL);
            if (r)
                agg_die("ferry_fiber_spawn", r);
        }
        for (int i = 0; i < 100; i++)
            ferry_fiber_join(f[i]);
    }
    struct ferry_group_stats st;
    ferry_group_stats(agg_group, &st);
    printf("fibers=%lu crossings=%lu\n", (unsigned long)st.fibers, (unsigned long)st.crossings);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "waves"))
        agg_run("fiber", waves, (void *)atol(argv[2]));
    else if (argc == 2 && !strcmp(argv[1], "busy"))
        agg_run("fiber", first, NULL);
    else
        return 2;
    return failures != 0;
}
