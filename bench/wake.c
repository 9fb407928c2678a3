/* bench/wake: how soon a thread that waits runs again while another thread
 * of the process computes.  Natively the woken thread has a CPU of its own
 * (or preempts the computing one); under `-p fibers` both are fibers of one
 * carrier, and the computing one must be preempted for the other to run.
 *
 *   wake sleep N    a thread spins; the main thread sleeps 2 ms N times:
 *                   prints the median overshoot of a sleep in us
 *   wake echo N     a thread spins; the main thread sends a byte to an echo
 *                   thread over a socketpair and reads the reply, N times:
 *                   prints the median round trip in us
 *   wake compute    a thread computes a fixed amount while another waits in
 *                   a read that never completes: prints the time it took in
 *                   us (what preempting the computing thread costs it)
 *   wake pipeline N a producer computes N items and hands each to a
 *                   consumer that computes on it (a queue of 64 under a
 *                   mutex, two condition variables): prints the time in us.
 *                   Natively the two run on two CPUs at once; fibers do so
 *                   only with two carriers, when the consumer the producer
 *                   wakes is taken by the idle carrier while the producer
 *                   goes on computing.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *spin(void *arg)
{
    (void)arg;
    while (!stop)
        ;
    return 0;
}

static int echo_fd;

static void *echo(void *arg)
{
    (void)arg;
    char c;
    while (read(echo_fd, &c, 1) == 1)
        if (write(echo_fd, &c, 1) != 1)
            break;
    return 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), by_value);
    return v[n / 2];
}

static int blocker_fd[2];

static void *blocked(void *arg)
{
    (void)arg;
    char c;
    return (void *)(long)read(blocker_fd[0], &c, 1);
}

/* ~3 us of computing per item, the same natively and under Ferry */
static long item_work(long x)
{
    for (volatile int s = 0; s < 5000; s++)
        x = x * 31 + s;
    return x;
}

#define PIPE_Q 64
static pthread_mutex_t pipe_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pipe_nonempty = PTHREAD_COND_INITIALIZER, pipe_nonfull = PTHREAD_COND_INITIALIZER;
static long pipe_q[PIPE_Q];
static int pipe_head, pipe_len, pipe_items;

static void *consumer(void *arg)
{
    long sum = 0;
    for (int i = 0; i < pipe_items; i++) {
        pthread_mutex_lock(&pipe_lock);
        while (!pipe_len)
            pthread_cond_wait(&pipe_nonempty, &pipe_lock);
        long v = pipe_q[pipe_head];
        pipe_head = (pipe_head + 1) % PIPE_Q;
        pipe_len--;
        pthread_cond_signal(&pipe_nonfull);
        pthread_mutex_unlock(&pipe_lock);
        sum += item_work(v);
    }
    *(long *)arg = sum;
    return 0;
}

static int pipeline(int n)
{
    long sum = 0;
    pthread_t c;
    pipe_items = n;
    double a = now_us();
    if (pthread_create(&c, 0, consumer, &sum))
        return 1;
    for (int i = 0; i < n; i++) {
        long v = item_work(i);
        pthread_mutex_lock(&pipe_lock);
        while (pipe_len == PIPE_Q)
            pthread_cond_wait(&pipe_nonfull, &pipe_lock);
        pipe_q[(pipe_head + pipe_len) % PIPE_Q] = v;
        pipe_len++;
        pthread_cond_signal(&pipe_nonempty);
        pthread_mutex_unlock(&pipe_lock);
    }
    pthread_join(c, 0);
    printf("%.0f\n", now_us() - a);
    return sum == 0;  /* keeps the work from being optimised away */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: wake sleep|echo|pipeline N | wake compute\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 50;
    if (n < 1 || n > 100000)
        n = 50;
    if (!strcmp(argv[1], "pipeline"))
        return pipeline(n);
    double *v = calloc((size_t)n, sizeof(*v));
    pthread_t t, e;

    if (!strcmp(argv[1], "compute")) {
        if (pipe(blocker_fd) || pthread_create(&t, 0, blocked, 0))
            return 1;
        usleep(1000);
        volatile unsigned long x = 0;
        double a = now_us();
        for (unsigned long i = 0; i < 400000000UL; i++)
            x += i;
        printf("%.0f\n", now_us() - a);
        close(blocker_fd[1]);
        pthread_join(t, 0);
        return 0;
    }

    if (pthread_create(&t, 0, spin, 0))
        return 1;
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, 0);  /* the spinner has the CPU, or its carrier, by now */
    if (!strcmp(argv[1], "sleep")) {
        for (int i = 0; i < n; i++) {
            double a = now_us();
            nanosleep(&pause, 0);
            v[i] = now_us() - a - 2000;
        }
    } else if (!strcmp(argv[1], "echo")) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
            return 1;
        echo_fd = sv[1];
        if (pthread_create(&e, 0, echo, 0))
            return 1;
        for (int i = 0; i < n; i++) {
            char c = 'x';
            double a = now_us();
            if (write(sv[0], &c, 1) != 1 || read(sv[0], &c, 1) != 1)
                return 1;
            v[i] = now_us() - a;
        }
        close(sv[0]);
        pthread_join(e, 0);
    } else {
        fprintf(stderr, "wake: unknown mode %s\n", argv[1]);
        return 2;
    }
    stop = 1;
    pthread_join(t, 0);
    printf("%.0f\n", median(v, n));
    return 0;
}
