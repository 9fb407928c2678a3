/* A small static program (tests/test_static_programs.py builds it with
 * gcc -static, gcc -static-pie and musl-gcc): threads, fork + exec, a signal
 * handler, a crash; its output is the same at every run.
 *   static_mix threads N   N threads, each writing its line after the previous
 *   static_mix fork        a child that execs `/bin/echo child`, waited for
 *   static_mix run PATH    a child that execs `PATH threads 2`, waited for
 *   static_mix signal      a SIGUSR1 handler run by raise(), SA_RESTART
 *   static_mix crash       SIGSEGV (natively: killed by the signal)
 *   static_mix loop N      N getppid() calls (bench/overhead.py)
 *   static_mix smallstack  a thread on the smallest stack execs /bin/echo */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static int turn;

static void *worker(void *arg)
{
    long id = (long)arg;
    pthread_mutex_lock(&lock);
    while (turn != id)
        pthread_cond_wait(&turn_cv, &lock);
    char line[64];
    int n = snprintf(line, sizeof(line), "thread %ld pid-same %d\n", id, getpid() > 0);
    if (write(1, line, n) != n)
        abort();
    turn++;
    pthread_cond_broadcast(&turn_cv);
    pthread_mutex_unlock(&lock);
    return (void *)(id * 10);
}

static int threads(int n)
{
    pthread_t t[64];
    for (long i = 0; i < n && i < 64; i++)
        if (pthread_create(&t[i], 0, worker, (void *)i))
            return 1;
    long sum = 0;
    for (int i = 0; i < n && i < 64; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    printf("joined %d sum %ld\n", n, sum);
    return 0;
}

static int forkexec(const char *path)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (path)
            execl(path, path, "threads", "2", (char *)0);
        else
            execl("/bin/echo", "echo", "child", (char *)0);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("child status %d\n", WEXITSTATUS(status));
    return 0;
}

static volatile sig_atomic_t got;
static void on_usr1(int sig) { got = sig; }

static int signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    raise(SIGUSR1);
    printf("handled %d\n", got == SIGUSR1);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sigprocmask(SIG_BLOCK, &set, 0);
    kill(getpid(), SIGUSR2);
    int sig = 0;
    sigwait(&set, &sig);
    printf("waited %d\n", sig == SIGUSR2);
    return 0;
}

static void *exec_on_small_stack(void *arg)
{
    (void)arg;
    execl("/bin/echo", "echo", "exec from a small stack", (char *)0);
    return 0;
}

/* The shim's C path (the exec hook's above all) must not run on it. */
static int smallstack(void)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
    if (pthread_create(&t, &attr, exec_on_small_stack, 0))
        return 1;
    pthread_join(t, 0);
    return 3;  /* not reached: the exec replaced the process */
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "threads";
    long n = argc > 2 ? atol(argv[2]) : 4;
    if (!strcmp(what, "threads"))
        return threads((int)n);
    if (!strcmp(what, "fork"))
        return forkexec(0);
    if (!strcmp(what, "run") && argc > 2)
        return forkexec(argv[2]);
    if (!strcmp(what, "signal"))
        return signals();
    if (!strcmp(what, "smallstack"))
        return smallstack();
    if (!strcmp(what, "crash")) {
        printf("before crash\n");
        fflush(stdout);
        *(volatile int *)(long)argc = 1;
        return 0;
    }
    if (!strcmp(what, "loop")) {
        for (long i = 0; i < n; i++)
            getppid();
        return 0;
    }
    fprintf(stderr, "static_mix: unknown %s\n", what);
    return 2;
}
