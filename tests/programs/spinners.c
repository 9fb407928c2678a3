/* Threads that make no system call while they wait (issue 16, item 4e).
 * Natively the kernel gives each runnable thread its turn and delivers a
 * signal to a running thread at once; under fibers the engine must too.
 *
 *   spinners flag     the main thread spins on a flag a second thread sets
 *                     after 100 ms
 *   spinners signal   the main thread spins until its SIGUSR1 handler runs;
 *                     a second thread sends it with pthread_kill after 100 ms
 *   spinners many     4 threads spin on one counter, each adding its turn,
 *                     until it reaches 40: all must run
 *   spinners handoff  a second thread holds a mutex for ~1 ms at a time and
 *                     takes it back at once; the main thread, waiting for
 *                     it, must get it (natively the thread a release wakes
 *                     runs before its waker takes the mutex back)
 *   spinners worker   the main thread spins on a flag a second thread sets
 *                     after calls an engine's worker thread runs (select on
 *                     two pipes with a timeout, wait4 of a child): their
 *                     completions must reach it while the main thread spins
 *   spinners waiters  the main thread spins while other threads sleep,
 *                     exchange bytes over a socketpair and take a mutex in
 *                     turns, 30 rounds each: every round must complete, its
 *                     bytes intact (under fibers each completion preempts
 *                     the spinner at the carrier's next tick)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int flag;
static volatile int counter;
static pthread_t main_thread;

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, 0);
}

static void *set_flag(void *arg)
{
    (void)arg;
    nap_ms(100);
    flag = 1;
    return 0;
}

static void on_usr1(int sig)
{
    (void)sig;
    flag = 1;
}

static void *send_signal(void *arg)
{
    (void)arg;
    nap_ms(100);
    pthread_kill(main_thread, SIGUSR1);
    return 0;
}

static void *wait_then_set_flag(void *arg)
{
    (void)arg;
    int a[2], b[2];
    if (pipe(a) || pipe(b))
        return 0;
    for (int i = 0; i < 3; i++) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(a[0], &rd);
        FD_SET(b[0], &rd);
        struct timeval tv = {0, 30000};
        printf("select %d\n", select(b[0] + 1, &rd, 0, 0, &tv));
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int status = 0;
    int reaped = waitpid(pid, &status, 0) == pid;
    printf("child reaped %d, exit %d\n", reaped, WEXITSTATUS(status));
    flag = 1;
    return 0;
}

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;

static void *hold_and_retake(void *arg)
{
    (void)arg;
    while (!flag) {
        pthread_mutex_lock(&held);
        for (volatile long i = 0; i < 1000000 && !flag; i++)
            ;
        pthread_mutex_unlock(&held);
    }
    return 0;
}

static int pair[2];
static int rounds_done[3];
static pthread_mutex_t turns = PTHREAD_MUTEX_INITIALIZER;

static void *sleeper(void *arg)
{
    (void)arg;
    for (int i = 0; i < 30; i++) {
        nap_ms(1);
        pthread_mutex_lock(&turns);
        rounds_done[0]++;
        pthread_mutex_unlock(&turns);
    }
    return 0;
}

static void *echoer(void *arg)
{
    (void)arg;
    unsigned char c;
    while (read(pair[1], &c, 1) == 1) {
        c = (unsigned char)(c + 1);
        if (write(pair[1], &c, 1) != 1)
            break;
    }
    return 0;
}

static void *asker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 30; i++) {
        unsigned char c = (unsigned char)i;
        if (write(pair[0], &c, 1) != 1 || read(pair[0], &c, 1) != 1 || c != (unsigned char)(i + 1))
            break;
        pthread_mutex_lock(&turns);
        rounds_done[1]++;
        pthread_mutex_unlock(&turns);
    }
    return 0;
}

/* Thread i adds 1 when counter % 4 == i: the threads take turns. */
static void *take_turns(void *arg)
{
    int i = (int)(long)arg;
    for (int seen; (seen = counter) < 40;)
        if (seen % 4 == i)
            __atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "flag";
    pthread_t t[4];
    main_thread = pthread_self();
    if (!strcmp(what, "flag")) {
        pthread_create(&t[0], 0, set_flag, 0);
        while (!flag)
            ;
        pthread_join(t[0], 0);
        puts("flag seen");
    } else if (!strcmp(what, "signal")) {
        signal(SIGUSR1, on_usr1);
        pthread_create(&t[0], 0, send_signal, 0);
        while (!flag)
            ;
        pthread_join(t[0], 0);
        puts("handler ran while the thread spun");
    } else if (!strcmp(what, "handoff")) {
        pthread_create(&t[0], 0, hold_and_retake, 0);
        nap_ms(50);
        pthread_mutex_lock(&held);
        flag = 1;
        pthread_mutex_unlock(&held);
        pthread_join(t[0], 0);
        puts("the waiting thread got the mutex");
    } else if (!strcmp(what, "worker")) {
        pthread_create(&t[0], 0, wait_then_set_flag, 0);
        while (!flag)
            ;
        pthread_join(t[0], 0);
        puts("flag seen");
    } else if (!strcmp(what, "waiters")) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair))
            return 1;
        pthread_create(&t[0], 0, sleeper, 0);
        pthread_create(&t[1], 0, echoer, 0);
        pthread_create(&t[2], 0, asker, 0);
        for (;;) {
            pthread_mutex_lock(&turns);
            int done = rounds_done[0] == 30 && rounds_done[1] == 30;
            pthread_mutex_unlock(&turns);
            if (done)
                break;
            for (volatile long i = 0; i < 100000; i++)
                ;
        }
        pthread_join(t[0], 0);
        pthread_join(t[2], 0);
        close(pair[0]);
        pthread_join(t[1], 0);
        printf("slept %d, exchanged %d\n", rounds_done[0], rounds_done[1]);
    } else if (!strcmp(what, "many")) {
        for (long i = 0; i < 4; i++)
            pthread_create(&t[i], 0, take_turns, (void *)i);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], 0);
        printf("counter %d\n", counter);
    } else {
        fprintf(stderr, "spinners: unknown case %s\n", what);
        return 2;
    }
    return 0;
}
