/* The wait policies' contracts, observed on raw batches (ferry_submit):
 * a read of an empty pipe stays pending until the test writes to it, so
 * "returned before X completed" needs no clock.
 * Usage: agg_policies none|any|some_limit|some_timeout|all|adaptive|reap */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agg_common.h"

static struct ferry_call call(long nr, long a, long b, long c)
{
    struct ferry_call k = {.nr = nr, .args = {a, b, c}};
    return k;
}

static int p1[2], p2[2];
static char b1[16], b2[16];
static volatile int written;

static void *late_writer(void *arg)
{
    (void)arg;
    usleep(50000);
    written = 1;
    write(p1[1], "late", 4);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    const char *t = argv[1];
    struct ferry_group_config cfg;
    ferry_group_config_default(&cfg, 0);
    int r = ferry_group_create(&agg_group, &cfg);
    if (r)
        agg_die("create", r);
    pipe(p1);
    pipe(p2);
    struct ferry_call c[4];
    if (!strcmp(t, "none")) {
        c[0] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        r = ferry_submit(agg_group, 0, c, 1, FERRY_WAIT_NONE, 0, 0);
        CHECK(r == 0 && !c[0].done, "none: %d done, read done=%d", r, c[0].done);
        write(p1[1], "abc", 3);
        r = ferry_reap(agg_group, 0, 1);
        CHECK(r == 1 && c[0].done && c[0].result == 3, "reap: %d done=%d result=%ld", r, c[0].done, c[0].result);
    } else if (!strcmp(t, "any")) {
        c[0] = call(FERRY_NR_NOP, 0, 0, 0);
        c[1] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        r = ferry_submit(agg_group, 0, c, 2, FERRY_WAIT_ANY, 0, 0);
        CHECK(r == 1 && c[0].done && c[0].result == 0 && !c[1].done, "any: %d %d %d", r, c[0].done, c[1].done);
        write(p1[1], "x", 1);
        ferry_reap(agg_group, 0, 1);
        CHECK(c[1].done && c[1].result == 1, "pending read %d %ld", c[1].done, c[1].result);
    } else if (!strcmp(t, "some_limit")) {
        c[0] = call(FERRY_NR_NOP, 0, 0, 0);
        c[1] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        c[2] = call(SYS_getppid, 0, 0, 0);  /* no io_uring operation: at once */
        c[3] = call(SYS_read, -1, (long)b2, 1);
        r = ferry_submit(agg_group, 0, c, 4, FERRY_WAIT_SOME, 3, 10ULL * 1000000000ULL);
        CHECK(r == 3 && !c[1].done, "some(3): %d done, read done=%d", r, c[1].done);
        CHECK(c[2].result == getppid() && c[3].result == -EBADF, "results %ld %ld", c[2].result, c[3].result);
        write(p1[1], "y", 1);
        ferry_reap(agg_group, 0, 1);
        CHECK(c[1].done && c[1].result == 1, "read %ld", c[1].result);
    } else if (!strcmp(t, "some_timeout")) {
        c[0] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        c[1] = call(SYS_read, p2[0], (long)b2, sizeof b2);
        r = ferry_submit(agg_group, 0, c, 2, FERRY_WAIT_SOME, 2, 20000000ULL);
        CHECK(r == 0 && !c[0].done && !c[1].done, "some timeout: %d", r);
        write(p1[1], "1", 1);
        write(p2[1], "22", 2);
        ferry_reap(agg_group, 0, 2);
        CHECK(c[0].result == 1 && c[1].result == 2, "reads %ld %ld", c[0].result, c[1].result);
    } else if (!strcmp(t, "all")) {
        pthread_t th;
        c[0] = call(FERRY_NR_NOP, 0, 0, 0);
        c[1] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        c[2] = call(SYS_write, p2[1], (long)"zz", 2);
        pthread_create(&th, 0, late_writer, 0);
        r = ferry_submit(agg_group, 0, c, 3, FERRY_WAIT_ALL, 0, 0);
        CHECK(r == 3 && written && c[1].result == 4 && c[2].result == 2, "all: %d written=%d %ld %ld", r,
              written, c[1].result, c[2].result);
        pthread_join(th, 0);
    } else if (!strcmp(t, "adaptive")) {
        /* a batch that will not fill must not be waited for */
        c[0] = call(FERRY_NR_NOP, 0, 0, 0);
        c[1] = call(SYS_read, p1[0], (long)b1, sizeof b1);
        r = ferry_submit(agg_group, 0, c, 2, FERRY_WAIT_ADAPTIVE, 0, 0);
        CHECK(r >= 1 && !c[1].done, "adaptive: %d", r);
        write(p1[1], "q", 1);
        ferry_reap(agg_group, 0, 1);
        CHECK(c[1].result == 1, "read %ld", c[1].result);
    } else if (!strcmp(t, "invalid")) {
        c[0] = call(FERRY_NR_NOP, 0, 0, 0);
        CHECK(ferry_submit(agg_group, 1, c, 1, FERRY_WAIT_ALL, 0, 0) == -EINVAL, "pool 1 of 1");
        CHECK(ferry_submit(agg_group, 0, c, 1, FERRY_WAIT_SOME, 0, 1000) == -EINVAL, "some limit 0");
        CHECK(ferry_submit(agg_group, 0, c, 1, FERRY_WAIT_SOME, 1, 0) == -EINVAL, "some timeout 0");
        CHECK(ferry_submit(agg_group, 0, c, 1, (enum ferry_wait)7, 0, 0) == -EINVAL, "wait 7");
        CHECK(ferry_submit(NULL, 0, c, 1, FERRY_WAIT_ALL, 0, 0) == -EINVAL, "no group");
        CHECK(ferry_reap(agg_group, 3, 0) == -EINVAL, "reap pool 3");
    } else {
        return 2;
    }
    struct ferry_group_stats st;
    ferry_group_stats(agg_group, &st);
    CHECK(ferry_group_destroy(agg_group) == 0, "destroy");
    if (!failures)
        printf("ok %s (%lu enters)\n", t, (unsigned long)st.pools[0].enters);
    return failures ? 1 : 0;
}
