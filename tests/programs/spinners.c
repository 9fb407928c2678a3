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
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
