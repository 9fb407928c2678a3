/* Each thread's CPU-time clock counts what that thread ran, and every
 * thread's clock can be read by the others (pthread_getcpuclockid).
 *
 * A spinner runs until its own clock says 200 ms; an idle thread waits in a
 * read; the main thread watches the spinner's clock from a sleep loop, then
 * joins it.  The main thread's own clock and the idle one's must have
 * counted next to nothing.  Under fibers all three share a carrier, whose
 * kernel thread ran all of it: the main thread's clock had counted the
 * spinner's time, and the idle thread's clock, named by a tid the kernel
 * does not know, could not be read (EINVAL).
 *
 * Prints one line per check (the same natively and under every profile);
 * exits 1 if one failed, with the figures on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 200000000LL
#define LITTLE_NS 50000000LL

static int failed;
static int idle_pipe[2];

static long long ns_of(clockid_t clk, int *err)
{
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0) {
        *err = errno;
        return -1;
    }
    *err = 0;
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void check(int ok, const char *what, const char *detail)
{
    printf("%s: %s\n", what, ok ? "ok" : "FAILED");
    if (!ok) {
        fprintf(stderr, "%s: %s\n", what, detail);
        failed = 1;
    }
}

static void *spin(void *arg)
{
    (void)arg;
    int err;
    volatile unsigned long x = 0;
    while (ns_of(CLOCK_THREAD_CPUTIME_ID, &err) < SPIN_NS && !err)
        for (int i = 0; i < 10000; i++)
            x += (unsigned long)i;
    return 0;
}

static void *idle(void *arg)
{
    (void)arg;
    char c;
    while (read(idle_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    return 0;
}

int main(void)
{
    char detail[256];
    int err;
    pthread_t spinner, idler;
    clockid_t spin_clk, idle_clk;
    if (pipe(idle_pipe) || pthread_create(&idler, 0, idle, 0) || pthread_create(&spinner, 0, spin, 0) ||
        pthread_getcpuclockid(spinner, &spin_clk) || pthread_getcpuclockid(idler, &idle_clk)) {
        perror("set-up");
        return 2;
    }
    long long main0 = ns_of(CLOCK_THREAD_CPUTIME_ID, &err);

    /* the spinner's clock, read from here while it runs: it moves */
    long long seen = -1;
    int spin_err = 0;
    struct timespec pause = {0, 10000000};
    for (int i = 0; i < 3000 && seen < SPIN_NS / 2; i++) {
        nanosleep(&pause, 0);
        seen = ns_of(spin_clk, &spin_err);
        if (spin_err)
            break;
    }
    snprintf(detail, sizeof(detail), "read %lld ns (%s)", seen, spin_err ? strerror(spin_err) : "no error");
    check(!spin_err && seen >= SPIN_NS / 2, "the spinner's clock, read by another thread, advances", detail);
    pthread_join(spinner, 0);

    long long main1 = ns_of(CLOCK_THREAD_CPUTIME_ID, &err);
    snprintf(detail, sizeof(detail), "%lld ns while the spinner ran", main1 - main0);
    check(!err && main1 - main0 < LITTLE_NS, "the main thread's clock counts only its own time", detail);

    int e1, e2;
    long long idle1 = ns_of(idle_clk, &e1);
    long long idle2 = ns_of(idle_clk, &e2);
    snprintf(detail, sizeof(detail), "%lld then %lld ns (%s)", idle1, idle2, strerror(e1 ? e1 : e2));
    check(!e1 && !e2 && idle1 < LITTLE_NS && idle2 >= idle1,
          "the idle thread's clock is readable and counted next to nothing", detail);

    struct timespec res;
    int r = clock_getres(idle_clk, &res);
    snprintf(detail, sizeof(detail), "clock_getres: %s", r ? strerror(errno) : "no error");
    check(r == 0 && (res.tv_sec > 0 || res.tv_nsec > 0), "the idle thread's clock has a resolution", detail);

    if (write(idle_pipe[1], "x", 1) != 1)
        return 2;
    pthread_join(idler, 0);
    return failed;
}
