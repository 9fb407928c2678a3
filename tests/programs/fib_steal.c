/* fib_steal: a thread that moves between kernel threads while it waits.
 *
 * Written for fiber mode with two carriers and work stealing (a ready fiber
 * whose carrier is busy runs on an idle carrier), and correct as an
 * ordinary threaded program.  The main thread keeps its CPU busy without a
 * system call while another thread's blocking read completes; under fibers
 * that read's completion is reaped by the main thread's carrier, and the
 * idle carrier takes the reader over.  Then the moved thread
 *
 *   - is interrupted in a blocking read by pthread_kill (tgkill) from the
 *     main thread: its handler runs in it and the read ends with EINTR;
 *   - is the only thread that takes SIGUSR2 when kill() sends it to the
 *     process: its handler runs in it, and its read ends with EINTR;
 *   - waits on a condition variable the main thread signals, and signals
 *     one the main thread waits on (futex wakes across carriers).
 *
 * stdout: one line per part, "name ok" or "name FAIL: what", the same
 * natively and under Ferry.  Lines "obs KEY yes|no" tell what was seen of
 * kernel threads (/proc/thread-self): whether the reader's read returned on
 * another kernel thread than the one it began on ("moved-mid-call"), and
 * whether the read pthread_kill interrupts began on another kernel thread
 * than the reader's first ("tgkill-after-move": between the two the reader
 * makes no call that parks it, so it is where the move put it).  Natively a
 * thread never changes kernel thread; under fibers on two carriers with
 * stealing the reader does.  Exit 0 when every
 * part held; alarm(60) ends a run that hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fib_common.h"

#define ATTEMPTS 200           /* readers started until one moves mid-call */
#define SPIN_LIMIT_NS 5000000000LL

static int failed;
static long main_kt;           /* the main thread's kernel thread */
static atomic_int reader_done;
static atomic_long handler_tid[NSIG];   /* by signal: the last handler's */

/* The kernel thread running the caller (under fibers: its carrier). */
static long kthread(void)
{
    char buf[64];
    ssize_t n = readlink("/proc/thread-self", buf, sizeof buf - 1);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    return slash ? atol(slash + 1) : -1;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* the vDSO: no system call */
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void part(const char *name, const char *why)
{
    if (why) {
        printf("%s FAIL: %s\n", name, why);
        failed++;
    } else {
        printf("%s ok\n", name);
    }
    fflush(stdout);
}

static void on_signal(int sig)
{
    atomic_store(&handler_tid[sig], syscall(SYS_gettid));
}

/* ---- the idle thread: parked for the whole run ----------------------------- */

static int idle_pipe[2];

static void *idler(void *arg)
{
    (void)arg;
    char c;
    while (read(idle_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

/* ---- the reader ------------------------------------------------------------ */

struct reader {
    int data[2];                /* its first read */
    int quiet[2];               /* its interrupted reads: nothing is ever written */
    long kt_before, kt_after;   /* kernel threads around the first read */
    long tid;
    char got[16];
    ssize_t n;
    int moved;
    int go_on;                  /* the parts follow even if it did not move */
    pthread_mutex_t lock;
    pthread_cond_t to_reader, to_main;
    int step;                   /* handshakes, under lock */
    ssize_t intr[2];            /* the interrupted reads' results */
    int intr_errno[2];
    long kt_intr[2];            /* kernel threads as they began */
    atomic_int rstep;           /* the interrupted reads' progress (no futex: it must not park) */
};

static void wait_step(struct reader *r, pthread_cond_t *cv, int step)
{
    MUST(pthread_mutex_lock(&r->lock));
    while (r->step < step)
        MUST(pthread_cond_wait(cv, &r->lock));
    MUST(pthread_mutex_unlock(&r->lock));
}

static void set_step(struct reader *r, pthread_cond_t *cv, int step)
{
    MUST(pthread_mutex_lock(&r->lock));
    r->step = step;
    MUST(pthread_cond_signal(cv));
    MUST(pthread_mutex_unlock(&r->lock));
}

static void *reader(void *arg)
{
    struct reader *r = arg;
    r->tid = syscall(SYS_gettid);
    r->kt_before = kthread();
    set_step(r, &r->to_main, 1);                    /* about to read */
    r->n = read(r->data[0], r->got, sizeof r->got);
    r->kt_after = kthread();
    r->moved = r->kt_before == main_kt && r->kt_after != r->kt_before;
    atomic_store(&reader_done, 1);
    if (!r->moved && !r->go_on)
        return NULL;                                /* not a move mid-call: another try */
    /* interrupted reads: by pthread_kill, then by kill() to the process */
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    MUST(pthread_sigmask(SIG_UNBLOCK, &usr2, NULL));
    for (int i = 0; i < 2; i++) {
        char c;
        r->kt_intr[i] = kthread();
        atomic_store(&r->rstep, 1 + 2 * i);
        r->intr[i] = read(r->quiet[0], &c, 1);
        r->intr_errno[i] = errno;
        atomic_store(&r->rstep, 2 + 2 * i);
    }
    /* futexes both ways with the main thread, from wherever it runs now */
    wait_step(r, &r->to_reader, 2);
    set_step(r, &r->to_main, 3);
    return NULL;
}

/* A reader started on its first read (it told the main thread so), which
 * the main thread then feeds. */
static struct reader *start_reader(pthread_t *t, int go_on)
{
    struct reader *r = calloc(1, sizeof *r);
    if (!r || pipe(r->data) || pipe(r->quiet))
        die("setup", errno ? errno : ENOMEM);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->to_reader, NULL);
    pthread_cond_init(&r->to_main, NULL);
    r->go_on = go_on;
    atomic_store(&reader_done, 0);
    *t = spawn(reader, r);
    wait_step(r, &r->to_main, 1);
    return r;
}

static void spin_until_done(void)
{
    long long end = now_ns() + SPIN_LIMIT_NS;
    while (!atomic_load(&reader_done) && now_ns() < end)
        ;
}

/* Signals `sig` (to the reader, or to the process) until its read ends. */
static void interrupt(struct reader *r, pthread_t t, int sig, int i)
{
    while (atomic_load(&r->rstep) < 1 + 2 * i)
        sleep_ms(1);
    while (atomic_load(&r->rstep) < 2 + 2 * i) {
        if (sig == SIGUSR1)
            MUST(pthread_kill(t, sig));
        else
            kill(getpid(), sig);
        sleep_ms(5);
    }
}

int main(void)
{
    alarm(60);
    main_kt = kthread();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;  /* no SA_RESTART: reads end with EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    MUST(pthread_sigmask(SIG_BLOCK, &usr2, NULL));  /* every thread but the moved reader */
    if (pipe(idle_pipe))
        die("pipe", errno);
    pthread_t idle = spawn(idler, NULL);

    struct reader *r = NULL;
    pthread_t t = 0;
    int moved = 0, reads_ok = 1, elsewhere = 0, stayed = 0, tries = 0;
    for (int attempt = 0; attempt < ATTEMPTS && !moved; attempt++) {
        tries++;
        r = start_reader(&t, 0);
        sleep_ms(1);                        /* let it park in its read */
        if (write(r->data[1], "hello", 5) != 5)
            die("write", errno);
        spin_until_done();                  /* busy, no system call */
        moved = r->moved;
        if (moved)
            break;
        if (r->kt_before != main_kt)
            elsewhere++;
        else
            stayed++;
        join(t);
        reads_ok &= r->n == 5 && memcmp(r->got, "hello", 5) == 0;
        close(r->data[0]);
        close(r->data[1]);
        close(r->quiet[0]);
        close(r->quiet[1]);
        free(r);
        r = NULL;
    }
    if (!moved) {
        /* natively, and in fiber mode without stealing: a reader that runs
         * where it began, then the same parts with it */
        r = start_reader(&t, 1);
        if (write(r->data[1], "hello", 5) != 5)
            die("write", errno);
    }
    interrupt(r, t, SIGUSR1, 0);
    part("tgkill-interrupts-read",
         r->intr[0] == -1 && r->intr_errno[0] == EINTR ? NULL : "read did not end with EINTR");
    part("tgkill-handler-in-thread",
         atomic_load(&handler_tid[SIGUSR1]) == r->tid ? NULL : "handler elsewhere");
    interrupt(r, t, SIGUSR2, 1);
    part("kill-interrupts-read",
         r->intr[1] == -1 && r->intr_errno[1] == EINTR ? NULL : "read did not end with EINTR");
    part("kill-handler-in-thread",
         atomic_load(&handler_tid[SIGUSR2]) == r->tid ? NULL : "handler elsewhere");
    /* the futexes, with the reader wherever it is now */
    set_step(r, &r->to_reader, 2);
    wait_step(r, &r->to_main, 3);
    part("read-completes", reads_ok && r->n == 5 && memcmp(r->got, "hello", 5) == 0 ? NULL
                                                                                      : "wrong data");
    part("futex-both-ways", NULL);
    join(t);
    if (write(idle_pipe[1], "x", 1) != 1)
        die("write", errno);
    join(idle);
    /* why the tries that did not move did not, for a run that never moved */
    fprintf(stderr, "tries %d: %d began on another kernel thread, %d stayed on the first\n", tries, elsewhere,
            stayed);
    printf("obs moved-mid-call %s\n", moved ? "yes" : "no");
    printf("obs tgkill-after-move %s\n", r->kt_intr[0] != r->kt_before ? "yes" : "no");
    return failed ? 1 : 0;
}
