/* A signal handler reads threads' CPU clocks while the thread it
 * interrupted is reading them too (haproxy's watchdog does so from SIGALRM).
 *
 * The main thread reads another thread's clock and its own in a loop,
 * while an interval timer's SIGALRM arrives every 200 us and its handler
 * reads the same clocks.  Under fibers, reading another thread's clock held
 * a lock of the engine's; a handler that came in the middle of that read
 * spun on the lock its own thread held, for ever.
 *
 * Prints one line; exit 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static clockid_t other_clk;
static volatile sig_atomic_t handled, bad;
static volatile int stop;

static int readable(clockid_t clk)
{
    struct timespec ts;
    return clock_gettime(clk, &ts) == 0;
}

static void on_alarm(int sig)
{
    (void)sig;
    if (!readable(other_clk) || !readable(CLOCK_THREAD_CPUTIME_ID))
        bad = 1;
    handled++;
}

static void *idle(void *arg)
{
    (void)arg;
    while (!stop)
        usleep(1000);
    return 0;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, 0, idle, 0) || pthread_getcpuclockid(t, &other_clk))
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, 0);
    long reads = 0;
    while (handled < 2000) {
        if (!readable(other_clk) || !readable(CLOCK_THREAD_CPUTIME_ID))
            bad = 1;
        reads++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    stop = 1;
    pthread_join(t, 0);
    printf("2000 handlers read the clocks beside %s reads: %s\n", reads > 0 ? "the thread's" : "no",
           bad ? "some failed" : "all read");
    return 0;
}
