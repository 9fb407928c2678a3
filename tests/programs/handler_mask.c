/* A thread's signal mask is its own again once its handler returns, even
 * when the handler waited and other threads ran meanwhile.
 *
 * The SIGUSR1 handler blocks SIGUSR2 too (sa_mask).  Four threads each
 * raise SIGUSR1 on themselves; the handler checks that both are blocked
 * while it runs, then sleeps, so that the other threads run (and their
 * handlers begin and end) meanwhile.  Once it has returned, each thread
 * sleeps again, then checks that neither signal is blocked any more, and
 * that a SIGUSR2 it raises is handled at once.  The kernel sets a handler's
 * mask as the handler begins and puts the thread's back at rt_sigreturn.
 *
 * Prints one line per thread (1: as it should be) and "ok" at the end. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

#define THREADS 4

struct seen {
    int blocked_inside;  /* SIGUSR1 and SIGUSR2 blocked in the handler */
    int free_after;      /* neither blocked after it returned and the thread slept */
    int usr2_at_once;    /* a raised SIGUSR2 ran its handler before raise returned */
};

static __thread struct seen *mine;
static __thread volatile sig_atomic_t usr2_count;
static pthread_barrier_t all_ready;

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static int blocked(int sig)
{
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    return sigismember(&now, sig);
}

static void on_usr1(int sig)
{
    (void)sig;
    mine->blocked_inside = blocked(SIGUSR1) && blocked(SIGUSR2);
    sleep_ms(20);
}

static void on_usr2(int sig)
{
    (void)sig;
    usr2_count++;
}

static void *thread_main(void *arg)
{
    mine = arg;
    pthread_barrier_wait(&all_ready);
    pthread_kill(pthread_self(), SIGUSR1);
    sleep_ms(20);
    mine->free_after = !blocked(SIGUSR1) && !blocked(SIGUSR2);
    raise(SIGUSR2);
    mine->usr2_at_once = usr2_count == 1;
    return NULL;
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGUSR1, &sa, NULL);
    struct sigaction sa2 = {.sa_handler = on_usr2};
    sigemptyset(&sa2.sa_mask);
    sigaction(SIGUSR2, &sa2, NULL);
    pthread_barrier_init(&all_ready, NULL, THREADS);
    struct seen seen[THREADS] = {0};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, thread_main, &seen[i]);
    int ok = 1;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        printf("thread %d: blocked inside %d, free after %d, SIGUSR2 at once %d\n", i, seen[i].blocked_inside,
               seen[i].free_after, seen[i].usr2_at_once);
        ok &= seen[i].blocked_inside && seen[i].free_after && seen[i].usr2_at_once;
    }
    puts(ok ? "ok" : "FAIL");
    return !ok;
}
