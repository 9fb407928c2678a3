/* A C program for the static-program tests, built three ways (musl-gcc
 * -static, gcc -static, gcc -static-pie): threads, fork and exec, a signal
 * handler, and a crash.  `static_c` runs threads, fork/exec and signals in a
 * fixed order with output that does not depend on timing or pids;
 * `static_c crash` writes a line and dies of SIGSEGV; `static_c child ARGS`
 * is what the exec part starts (its own file, then /bin/sh). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NTHREADS 8

static void *work(void *arg)
{
    long i = (long)arg, sum = 0;
    for (long k = 0; k <= i * 100000; k++)
        sum += k % 13;
    getppid();          /* a system call on every thread */
    return (void *)sum;
}

static void threads(void)
{
    pthread_t t[NTHREADS];
    long total = 0;
    for (long i = 0; i < NTHREADS; i++)
        if (pthread_create(&t[i], NULL, work, (void *)i)) {
            puts("threads: pthread_create failed");
            return;
        }
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("threads: %d joined, total %ld\n", NTHREADS, total);
}

static int run(char *const argv[])
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void forkexec(const char *self)
{
    char *me[] = {(char *)self, "child", "a b", "c", NULL};
    char *sh[] = {"/bin/sh", "-c", "echo from sh; exit 3", NULL};
    int a = run(me);
    int b = run(sh);
    printf("forkexec: self exited %d, sh exited %d\n", a, b);
}

static volatile sig_atomic_t got;

static void on_signal(int sig)
{
    got = sig;
}

static void signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    int first = got;
    /* blocked, then delivered by sigsuspend */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    got = 0;
    kill(getpid(), SIGUSR1);
    int pending = got;
    sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("signals: handler saw %s, %d while blocked, %s after sigsuspend\n",
           first == SIGUSR1 ? "SIGUSR1" : "nothing", pending, got == SIGUSR1 ? "SIGUSR1" : "nothing");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child")) {
        printf("child:");
        for (int i = 2; i < argc; i++)
            printf(" [%s]", argv[i]);
        printf("\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "crash")) {
        printf("about to crash\n");
        fflush(stdout);
        *(volatile int *)(unsigned long)argc = 1;     /* an address nothing maps */
        return 1;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: static_c [child ARGS...|crash]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    threads();
    forkexec(argv[0]);
    signals();
    puts("done");
    return 0;
}
