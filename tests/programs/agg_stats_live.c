/* The group's figures while its carrier never runs dry: one fiber makes
 * ring calls while another keeps yielding, so the carrier never waits.
 * The figures it prints once the calls are done must already show them
 * (tests/test_aggregate_crossings.py). */
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

int main(void)
{
    agg_run("fiber", first, NULL);
    return failures != 0;
}
