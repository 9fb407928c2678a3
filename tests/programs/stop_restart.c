/* stop_restart: calls the kernel restarts without running a handler.
 *
 * The main thread sleeps (nanosleep, 600 ms) while a forked child stops and
 * continues it (SIGSTOP, SIGCONT): the sleep comes back with
 * ERESTART_RESTARTBLOCK and the kernel runs the same `syscall` instruction
 * again as restart_syscall.  Meanwhile a second thread waits on a futex
 * that a SIGUSR1 taken by a third thread interrupts (ERESTARTSYS: run
 * again as itself).  Each is one call of the program's.  Output: one
 * line, the same at every run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* linux/futex.h (musl-gcc has no kernel headers) */
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129

static int word;
static volatile sig_atomic_t usr1;

static void on_usr1(int sig) { (void)sig; usr1 = 1; }

static void *waiter(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, 0);  /* the signal is the taker's */
    while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0)
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    return 0;
}

static void *taker(void *arg)
{
    (void)arg;
    while (!usr1)
        pause();
    return 0;
}

static void ms(long n)
{
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    nanosleep(&ts, 0);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    pthread_t w, t;
    pthread_create(&w, 0, waiter, 0);
    pthread_create(&t, 0, taker, 0);
    pid_t parent = getpid(), child = fork();
    if (child == 0) {
        ms(150);
        kill(parent, SIGSTOP);
        ms(150);
        kill(parent, SIGCONT);
        _exit(0);
    }
    /* main blocks SIGUSR1 only now: the child had it unblocked */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, 0);
    ms(600);
    kill(parent, SIGUSR1);  /* the taker's: the waiter and main block it */
    pthread_join(t, 0);
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    pthread_join(w, 0);
    int status;
    waitpid(child, &status, 0);
    printf("slept, stopped and continued; usr1 %d; child %d\n", (int)usr1, WEXITSTATUS(status));
    return 0;
}
