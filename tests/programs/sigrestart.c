/* sigrestart: system calls interrupted by signals.
 *
 * Phase 1 (SA_RESTART): a SIGALRM handler installed with SA_RESTART, an
 * interval timer firing every 10 ms, and a read() blocked on a pipe that a
 * forked child writes only after ~200 ms: the read is interrupted many times,
 * restarted by the kernel each time, and must return the child's data.  The
 * same for a blocking waitpid() on a child that exits after ~100 ms.
 * Phase 2 (no SA_RESTART): a one-shot timer interrupts a read() on an empty
 * pipe, which must fail with EINTR.
 * The output never includes the number of signals, which varies. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t hits;

static void on_alarm(int sig)
{
    (void)sig;
    hits++;
}

static void set_handler(int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    if (sigaction(SIGALRM, &sa, NULL) != 0) {
        perror("sigaction");
        exit(1);
    }
}

static void set_timer(long first_us, long interval_us)
{
    struct itimerval it;
    it.it_value.tv_sec = first_us / 1000000;
    it.it_value.tv_usec = first_us % 1000000;
    it.it_interval.tv_sec = interval_us / 1000000;
    it.it_interval.tv_usec = interval_us % 1000000;
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) {
        perror("setitimer");
        exit(1);
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void report_child(const char *what, pid_t child)
{
    int status;
    pid_t r;
    do
        r = waitpid(child, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r != child)
        printf("%s: waitpid failed: %s\n", what, strerror(errno));
    else if (WIFEXITED(status))
        printf("%s: child exit %d\n", what, WEXITSTATUS(status));
    else
        printf("%s: child killed by signal %d\n", what, WTERMSIG(status));
}

static void restarted_read(int round)
{
    int p[2];
    char msg[64], buf[128];
    int len = snprintf(msg, sizeof msg, "round %d: data written after a delay\n", round);

    if (pipe(p) != 0) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(p[0]);
        sleep_ms(200);
        if (write(p[1], msg, (size_t)len) != len)
            _exit(2);
        _exit(0);
    }
    close(p[1]);
    hits = 0;
    set_timer(10000, 10000);
    errno = 0;
    ssize_t n = read(p[0], buf, sizeof buf);
    int err = errno;
    set_timer(0, 0);
    printf("phase1 round %d: read returned %zd errno %s, interrupted: %s\n", round, n,
           n < 0 ? strerror(err) : "-", hits > 0 ? "yes" : "no");
    printf("phase1 round %d: data matches: %s\n", round,
           n == len && memcmp(buf, msg, (size_t)len) == 0 ? "yes" : "no");
    if (n > 0)
        printf("phase1 round %d: data: %.*s", round, (int)n, buf);
    close(p[0]);
    report_child("phase1 read", child);
}

static void restarted_waitpid(void)
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        sleep_ms(100);
        _exit(7);
    }
    hits = 0;
    set_timer(10000, 10000);
    int status = 0;
    errno = 0;
    pid_t r = waitpid(child, &status, 0);
    int err = errno;
    set_timer(0, 0);
    printf("phase1 waitpid: returned child: %s errno %s, interrupted: %s, exit %d\n",
           r == child ? "yes" : "no", r < 0 ? strerror(err) : "-", hits > 0 ? "yes" : "no",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void interrupted_read(void)
{
    int p[2];
    char buf[16];
    if (pipe(p) != 0) {
        perror("pipe");
        exit(1);
    }
    hits = 0;
    set_timer(50000, 0);
    errno = 0;
    ssize_t n = read(p[0], buf, sizeof buf); /* nobody writes: blocks until SIGALRM */
    int err = errno;
    set_timer(0, 0);
    printf("phase2: read returned %zd errno %s (EINTR: %s), handler ran: %s\n", n,
           n < 0 ? strerror(err) : "-", err == EINTR ? "yes" : "no", hits > 0 ? "yes" : "no");
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    set_handler(SA_RESTART);
    for (int round = 1; round <= 3; round++)
        restarted_read(round);
    restarted_waitpid();
    set_handler(0);
    interrupted_read();
    return 0;
}
