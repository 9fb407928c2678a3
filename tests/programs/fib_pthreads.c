/* fib_pthreads: a plain threaded program for issue 6 (threads run as fibers).
 *
 * Exercises what glibc's pthreads build on top of clone3, futex, gettid,
 * tgkill, rt_sigprocmask and sched_yield: mutexes of every kind, condition
 * variables (with a CLOCK_MONOTONIC timed wait that times out), rwlocks,
 * barriers, __thread, pthread_once, key destructors, join values, cancellation
 * of threads blocked in cancellation points, thread-directed and
 * process-directed signals, thread ids, sched_yield hand-offs, 200 threads in
 * blocking pipe ping-pong and a producer/consumer queue.
 *
 * Only the main thread prints, and only counts and verdicts: the output is the
 * same on every run, so a run under `ferry run` must print exactly what the
 * native run prints.  Exit 0 when every check held, 1 otherwise.  An alarm
 * bounds the whole run (30 s; natively it takes well under one), so a lost
 * wake-up ends it (SIGALRM) instead of hanging.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fib_common.h"

static int failures;

static void check(const char *what, int ok)
{
    printf("%-50s %s\n", what, ok ? "ok" : "FAIL");
    /* Each line out at once: a run that hangs shows how far it got. */
    fflush(stdout);
    if (!ok)
        failures++;
}

static void checkf(int ok, const char *fmt, long a, long b)
{
    char buf[128];
    snprintf(buf, sizeof buf, fmt, a, b);
    check(buf, ok);
}

static __thread long my_index = -1;

/* ------------------------------------------------------------ mutexes */

static pthread_mutex_t plain = PTHREAD_MUTEX_INITIALIZER;
static long plain_counter;

static void *plain_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_lock(&plain);
        plain_counter++;
        /* Hand the lock over now and then, so that waiters really block. */
        if (i % 1000 == 0)
            sched_yield();
        pthread_mutex_unlock(&plain);
    }
    return NULL;
}

static pthread_mutex_t recursive, errorcheck;

static void *other_owner(void *arg)
{
    (void)arg;
    long r = 0;
    /* Held by main: another thread must see it busy and may not unlock it. */
    r |= pthread_mutex_trylock(&recursive) == EBUSY ? 0 : 1;
    r |= pthread_mutex_unlock(&errorcheck) == EPERM ? 0 : 2;
    r |= pthread_mutex_trylock(&errorcheck) == EBUSY ? 0 : 4;
    return (void *)r;
}

static void test_mutexes(void)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = spawn(plain_worker, NULL);
    for (int i = 0; i < 8; i++)
        join(t[i]);
    checkf(plain_counter == 160000, "mutex: 8 x 20000 increments = %ld", plain_counter, 0);

    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    MUST(pthread_mutex_init(&recursive, &a));
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    MUST(pthread_mutex_init(&errorcheck, &a));
    pthread_mutexattr_destroy(&a);

    int depth_ok = 1;
    for (int i = 0; i < 5; i++)
        depth_ok &= pthread_mutex_lock(&recursive) == 0;
    check("mutex recursive: locked 5 times", depth_ok);
    check("mutex errorcheck: lock", pthread_mutex_lock(&errorcheck) == 0);
    check("mutex errorcheck: relock is EDEADLK", pthread_mutex_lock(&errorcheck) == EDEADLK);
    long r = (long)join(spawn(other_owner, NULL));
    check("mutex recursive: busy for another thread", !(r & 1));
    check("mutex errorcheck: unlock by non-owner EPERM", !(r & 2));
    check("mutex errorcheck: busy for another thread", !(r & 4));
    for (int i = 0; i < 5; i++)
        depth_ok &= pthread_mutex_unlock(&recursive) == 0;
    check("mutex recursive: unlocked 5 times", depth_ok);
    check("mutex recursive: 6th unlock is EPERM", pthread_mutex_unlock(&recursive) == EPERM);
    check("mutex errorcheck: unlock", pthread_mutex_unlock(&errorcheck) == 0);
    check("mutex errorcheck: unlock unlocked is EPERM", pthread_mutex_unlock(&errorcheck) == EPERM);
    /* Free again: another thread can now take both. */
    r = (long)join(spawn(other_owner, NULL));
    check("mutex: free after unlock (trylock from thread)", (r & 1) && (r & 4));
}

/* ------------------------------------------------------------ condition variables */

static pthread_mutex_t cv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int generation, waiting, tokens, woken_by_broadcast, woken_by_signal;

static void *cv_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cv_lock);
    waiting++;
    pthread_cond_broadcast(&cv);
    int gen = generation;
    while (generation == gen && tokens == 0)
        pthread_cond_wait(&cv, &cv_lock);
    if (generation != gen)
        woken_by_broadcast++;
    else {
        tokens--;
        woken_by_signal++;
    }
    waiting--;
    pthread_mutex_unlock(&cv_lock);
    return NULL;
}

static void wait_waiting(int n)
{
    pthread_mutex_lock(&cv_lock);
    while (waiting < n)
        pthread_cond_wait(&cv, &cv_lock);
    pthread_mutex_unlock(&cv_lock);
}

static void test_condvars(void)
{
    enum { N = 10 };
    pthread_t t[N];
    /* Signal: one token per signal, each taken by exactly one waiter. */
    for (int i = 0; i < N; i++)
        t[i] = spawn(cv_waiter, NULL);
    wait_waiting(N);
    for (int i = 0; i < N; i++) {
        pthread_mutex_lock(&cv_lock);
        tokens++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&cv_lock);
    }
    for (int i = 0; i < N; i++)
        join(t[i]);
    checkf(woken_by_signal == N && tokens == 0, "cond signal: %ld waiters took a token each",
           woken_by_signal, 0);

    /* Broadcast: one call wakes every waiter. */
    for (int i = 0; i < N; i++)
        t[i] = spawn(cv_waiter, NULL);
    wait_waiting(N);
    pthread_mutex_lock(&cv_lock);
    generation++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&cv_lock);
    for (int i = 0; i < N; i++)
        join(t[i]);
    checkf(woken_by_broadcast == N, "cond broadcast: %ld waiters woken", woken_by_broadcast, 0);

    /* A timed wait on CLOCK_MONOTONIC that nobody signals times out. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    MUST(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    pthread_cond_t mono;
    MUST(pthread_cond_init(&mono, &ca));
    struct timespec start, deadline, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    deadline = start;
    deadline.tv_nsec += 50 * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&cv_lock);
    int rc;
    do
        rc = pthread_cond_timedwait(&mono, &cv_lock, &deadline);
    while (rc == 0);
    pthread_mutex_unlock(&cv_lock);
    clock_gettime(CLOCK_MONOTONIC, &end);
    check("cond timedwait (monotonic): ETIMEDOUT", rc == ETIMEDOUT);
    check("cond timedwait: not before the deadline",
          end.tv_sec > deadline.tv_sec || (end.tv_sec == deadline.tv_sec && end.tv_nsec >= deadline.tv_nsec));
    pthread_cond_destroy(&mono);
    pthread_condattr_destroy(&ca);
}

/* ------------------------------------------------------------ rwlocks */

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t readers_in;
static long rw_value;
static atomic_int writer_saw_busy;

static void *reader(void *arg)
{
    (void)arg;
    pthread_rwlock_rdlock(&rw);
    /* Every reader holds the lock at this barrier: readers share it. */
    pthread_barrier_wait(&readers_in);
    long v = rw_value;
    pthread_barrier_wait(&readers_in);
    pthread_rwlock_unlock(&rw);
    return (void *)v;
}

static void *writer(void *arg)
{
    for (int i = 0; i < 5000; i++) {
        pthread_rwlock_wrlock(&rw);
        long v = rw_value;
        if (i % 500 == 0)
            sched_yield();
        rw_value = v + (long)arg;
        pthread_rwlock_unlock(&rw);
    }
    return NULL;
}

static void test_rwlocks(void)
{
    enum { R = 6 };
    pthread_t t[R];
    MUST(pthread_barrier_init(&readers_in, NULL, R + 1));
    rw_value = 7;
    for (int i = 0; i < R; i++)
        t[i] = spawn(reader, NULL);
    pthread_barrier_wait(&readers_in);
    /* All readers hold it now. */
    if (pthread_rwlock_trywrlock(&rw) == EBUSY)
        writer_saw_busy = 1;
    int rd_ok = pthread_rwlock_tryrdlock(&rw) == 0;
    if (rd_ok)
        pthread_rwlock_unlock(&rw);
    pthread_barrier_wait(&readers_in);
    long sum = 0;
    for (int i = 0; i < R; i++)
        sum += (long)join(t[i]);
    pthread_barrier_destroy(&readers_in);
    checkf(sum == 7 * R, "rwlock: %ld readers held it at once", R, 0);
    check("rwlock: trywrlock busy while read-held", writer_saw_busy);
    check("rwlock: tryrdlock shares a read-held lock", rd_ok);

    rw_value = 0;
    pthread_t w[4];
    for (long i = 0; i < 4; i++)
        w[i] = spawn(writer, (void *)(i + 1));
    for (int i = 0; i < 4; i++)
        join(w[i]);
    checkf(rw_value == 5000 * (1 + 2 + 3 + 4), "rwlock: writers excluded each other (%ld)", rw_value, 0);
}

/* ------------------------------------------------------------ barriers */

static pthread_barrier_t bar;
static atomic_int serial_count, arrived;
static atomic_int rounds_bad;

static void *barrier_worker(void *arg)
{
    long n = (long)arg;
    for (int round = 0; round < 50; round++) {
        atomic_fetch_add(&arrived, 1);
        int rc = pthread_barrier_wait(&bar);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&serial_count, 1);
        else if (rc != 0)
            rounds_bad = 1;
        /* After the barrier every thread of this round has arrived. */
        if (atomic_load(&arrived) < (round + 1) * n)
            rounds_bad = 1;
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static void test_barriers(void)
{
    enum { N = 8 };
    MUST(pthread_barrier_init(&bar, NULL, N));
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = spawn(barrier_worker, (void *)(long)N);
    for (int i = 0; i < N; i++)
        join(t[i]);
    pthread_barrier_destroy(&bar);
    checkf(serial_count == 50, "barrier: one serial thread in each of %ld rounds", serial_count, 0);
    check("barrier: nobody passed early", !rounds_bad);
}

/* ------------------------------------------------------------ TLS, once, keys, join values */

static __thread long tls_acc;
static __thread char tls_tag[32];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int once_runs;
static pthread_key_t key_a, key_b;
static atomic_long destructed_a, destructed_b;

static void once_init(void)
{
    /* Make the other callers wait inside pthread_once. */
    sleep_ms(20);
    atomic_fetch_add(&once_runs, 1);
}

static void destroy_a(void *v)
{
    atomic_fetch_add(&destructed_a, (long)(intptr_t)v);
}

static void destroy_b(void *v)
{
    atomic_fetch_add(&destructed_b, (long)(intptr_t)v);
}

static void *tls_worker(void *arg)
{
    long i = (long)arg;
    my_index = i;
    snprintf(tls_tag, sizeof tls_tag, "thread-%ld", i);
    pthread_once(&once, once_init);
    pthread_setspecific(key_a, (void *)(intptr_t)(i + 1));
    /* Threads with an odd index clear key_b: its destructor must not run for them. */
    pthread_setspecific(key_b, (void *)(intptr_t)(100 + i));
    if (i % 2)
        pthread_setspecific(key_b, NULL);
    for (int k = 0; k < 1000; k++) {
        tls_acc += i;
        if (k % 100 == 0)
            sched_yield();
    }
    char want[32];
    snprintf(want, sizeof want, "thread-%ld", i);
    int ok = tls_acc == 1000 * i && strcmp(tls_tag, want) == 0 && my_index == i &&
             (long)(intptr_t)pthread_getspecific(key_a) == i + 1;
    if (!ok)
        return (void *)-1L;
    if (i == 3)
        pthread_exit((void *)(i * i));
    return (void *)(i * i);
}

static void test_tls_once_keys(void)
{
    enum { N = 16 };
    MUST(pthread_key_create(&key_a, destroy_a));
    MUST(pthread_key_create(&key_b, destroy_b));
    pthread_t t[N];
    for (long i = 0; i < N; i++)
        t[i] = spawn(tls_worker, (void *)i);
    long sum = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        long v = (long)join(t[i]);
        if (v < 0)
            bad++;
        else
            sum += v;
    }
    checkf(bad == 0, "tls: __thread and specifics private, %ld bad", bad, 0);
    check("tls: main's __thread untouched", tls_acc == 0 && tls_tag[0] == 0 && my_index == -1);
    checkf(sum == 1240, "join: return values (and pthread_exit) sum %ld", sum, 0);
    checkf(once_runs == 1, "pthread_once: init ran %ld time(s)", once_runs, 0);
    checkf(destructed_a == N * (N + 1) / 2, "key destructors: sum of values %ld", destructed_a, 0);
    long want_b = 0;
    for (int i = 0; i < N; i += 2)
        want_b += 100 + i;
    checkf(destructed_b == want_b, "key destructors: NULL values skipped (%ld)", destructed_b, 0);
    pthread_key_delete(key_a);
    pthread_key_delete(key_b);
}

/* ------------------------------------------------------------ cancellation */

static atomic_int cleanups;
static int cancel_pipe[2];
static pthread_mutex_t cancel_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cancel_cv = PTHREAD_COND_INITIALIZER;
static atomic_int about_to_block;

static void cleanup_count(void *arg)
{
    atomic_fetch_add(&cleanups, (int)(intptr_t)arg);
}

static void cleanup_unlock(void *arg)
{
    /* pthread_cond_wait re-acquires the mutex before unwinding. */
    atomic_fetch_add(&cleanups, 100);
    pthread_mutex_unlock(arg);
}

static void *block_in_read(void *arg)
{
    (void)arg;
    char c;
    pthread_cleanup_push(cleanup_count, (void *)1);
    atomic_fetch_add(&about_to_block, 1);
    ssize_t r = read(cancel_pipe[0], &c, 1);
    (void)r;
    pthread_cleanup_pop(0);
    return (void *)1L;
}

static void *block_in_nanosleep(void *arg)
{
    (void)arg;
    pthread_cleanup_push(cleanup_count, (void *)10);
    atomic_fetch_add(&about_to_block, 1);
    struct timespec ts = {120, 0};
    nanosleep(&ts, NULL);
    pthread_cleanup_pop(0);
    return (void *)1L;
}

static void *block_in_cond_wait(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cancel_lock);
    pthread_cleanup_push(cleanup_unlock, &cancel_lock);
    atomic_fetch_add(&about_to_block, 1);
    for (;;)
        pthread_cond_wait(&cancel_cv, &cancel_lock);
    pthread_cleanup_pop(0);
    return (void *)1L;
}

static void test_cancel(void)
{
    if (pipe(cancel_pipe) < 0)
        die("pipe", errno);
    void *(*fns[3])(void *) = {block_in_read, block_in_nanosleep, block_in_cond_wait};
    const char *names[3] = {"read on a pipe", "nanosleep", "pthread_cond_wait"};
    int want[3] = {1, 10, 100};
    for (int i = 0; i < 3; i++) {
        atomic_store(&about_to_block, 0);
        atomic_store(&cleanups, 0);
        pthread_t t = spawn(fns[i], NULL);
        while (!atomic_load(&about_to_block))
            sched_yield();
        /* Most likely blocked by now; if not, deferred cancellation still
         * acts at the call, so the outcome is the same either way. */
        sleep_ms(20);
        MUST(pthread_cancel(t));
        void *v = join(t);
        char what[96];
        snprintf(what, sizeof what, "cancel in %s: PTHREAD_CANCELED, cleanup", names[i]);
        check(what, v == PTHREAD_CANCELED && atomic_load(&cleanups) == want[i]);
    }
    /* The condition variable's mutex came back unlocked through the cleanup. */
    check("cancel: cond mutex released by cleanup", pthread_mutex_trylock(&cancel_lock) == 0);
    pthread_mutex_unlock(&cancel_lock);
    close(cancel_pipe[0]);
    close(cancel_pipe[1]);
}

/* ------------------------------------------------------------ signals and thread ids */

enum { SIG_THREADS = 6 };
static atomic_long got_usr1[SIG_THREADS];
static atomic_long got_usr2_by = -2;
static atomic_int usr2_count;
static pid_t tids[SIG_THREADS];
static pid_t tid_via_glibc[SIG_THREADS];
static pthread_barrier_t sig_bar;
static long usr2_target = 4;

static void on_usr1(int sig)
{
    (void)sig;
    if (my_index >= 0 && my_index < SIG_THREADS)
        atomic_fetch_add(&got_usr1[my_index], 1);
}

static void on_usr2(int sig)
{
    (void)sig;
    atomic_store(&got_usr2_by, my_index);
    atomic_fetch_add(&usr2_count, 1);
}

/* Waits with `sig` blocked except inside sigsuspend, so a signal sent early
 * stays pending instead of being lost. */
static void suspend_until(atomic_long *counter, long n, int sig)
{
    sigset_t during;
    pthread_sigmask(SIG_SETMASK, NULL, &during);
    sigdelset(&during, sig);
    while (atomic_load(counter) < n)
        sigsuspend(&during);
}

static void *sig_thread(void *arg)
{
    long i = (long)arg;
    my_index = i;
    tids[i] = (pid_t)syscall(SYS_gettid);
    tid_via_glibc[i] = gettid();
    /* The mask set by main (both signals blocked) was inherited. */
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    int inherited = sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGUSR2);
    pthread_barrier_wait(&sig_bar);

    /* Phase 1: pthread_kill from main. */
    suspend_until(&got_usr1[i], 1, SIGUSR1);
    pthread_barrier_wait(&sig_bar);
    /* Phase 2: tgkill with the tid this thread reported. */
    suspend_until(&got_usr1[i], 2, SIGUSR1);
    pthread_barrier_wait(&sig_bar);

    /* Phase 3: only usr2_target leaves SIGUSR2 unblocked, so kill() of the
     * process can only be delivered to it. */
    if (i == usr2_target) {
        sigset_t during;
        pthread_sigmask(SIG_SETMASK, NULL, &during);
        sigdelset(&during, SIGUSR2);
        pthread_barrier_wait(&sig_bar);
        while (atomic_load(&usr2_count) < 1)
            sigsuspend(&during);
    } else {
        pthread_barrier_wait(&sig_bar);
    }
    pthread_barrier_wait(&sig_bar);
    return (void *)(long)inherited;
}

static void test_signals_and_tids(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);

    sigset_t both, old;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &both, &old);

    MUST(pthread_barrier_init(&sig_bar, NULL, SIG_THREADS + 1));
    pthread_t t[SIG_THREADS];
    for (long i = 0; i < SIG_THREADS; i++)
        t[i] = spawn(sig_thread, (void *)i);
    pthread_barrier_wait(&sig_bar);

    pid_t me = (pid_t)syscall(SYS_gettid);
    int distinct = 1, consistent = 1;
    for (int i = 0; i < SIG_THREADS; i++) {
        consistent &= tids[i] == tid_via_glibc[i] && tids[i] > 0;
        distinct &= tids[i] != me && tids[i] != getpid();
        for (int j = 0; j < i; j++)
            distinct &= tids[i] != tids[j];
    }
    check("gettid: distinct per thread, not the main's", distinct);
    check("gettid: syscall and glibc's gettid() agree", consistent);
    check("gettid: main thread's tid is the pid", me == getpid());

    /* Phase 1: each thread receives its own pthread_kill, in reverse order. */
    for (int i = SIG_THREADS - 1; i >= 0; i--)
        MUST(pthread_kill(t[i], SIGUSR1));
    pthread_barrier_wait(&sig_bar);
    int each_once = 1;
    for (int i = 0; i < SIG_THREADS; i++)
        each_once &= atomic_load(&got_usr1[i]) == 1;
    check("pthread_kill: each thread's handler ran in it", each_once);

    /* Phase 2: the reported tids reach the same threads through tgkill. */
    for (int i = 0; i < SIG_THREADS; i++)
        if (syscall(SYS_tgkill, getpid(), tids[i], SIGUSR1) < 0)
            die("tgkill", errno);
    pthread_barrier_wait(&sig_bar);
    each_once = 1;
    for (int i = 0; i < SIG_THREADS; i++)
        each_once &= atomic_load(&got_usr1[i]) == 2;
    check("tgkill(reported tid): reached that thread", each_once);

    /* Phase 3: a process-directed signal goes to the one thread that does not block it. */
    pthread_barrier_wait(&sig_bar);
    kill(getpid(), SIGUSR2);
    pthread_barrier_wait(&sig_bar);
    long inherited = 0;
    for (int i = 0; i < SIG_THREADS; i++)
        inherited += (long)join(t[i]);
    checkf(atomic_load(&got_usr2_by) == usr2_target && usr2_count == 1,
           "kill(): delivered once, to thread %ld", atomic_load(&got_usr2_by), 0);
    checkf(inherited == SIG_THREADS, "sigmask: inherited by %ld threads", inherited, 0);
    pthread_barrier_destroy(&sig_bar);

    /* The main thread's own mask is per thread too: still blocked here. */
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    sigset_t pend;
    sigpending(&pend);
    check("sigmask: main still blocks both, nothing pending",
          sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGUSR2) && !sigismember(&pend, SIGUSR1) &&
              !sigismember(&pend, SIGUSR2));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ------------------------------------------------------------ sched_yield */

static atomic_int turn;
static atomic_long turns_taken;

static void *yielder(void *arg)
{
    int me = (int)(long)arg;
    /* Strict alternation with sched_yield as the only way to wait: the
     * other thread must get to run while this one spins. */
    for (int k = 0; k < 2000; k++) {
        while (atomic_load(&turn) != me)
            sched_yield();
        atomic_fetch_add(&turns_taken, 1);
        atomic_store(&turn, 1 - me);
    }
    return NULL;
}

static void test_sched_yield(void)
{
    pthread_t a = spawn(yielder, (void *)0L), b = spawn(yielder, (void *)1L);
    join(a);
    join(b);
    checkf(turns_taken == 4000, "sched_yield: %ld alternating turns", turns_taken, 0);
    check("sched_yield: returns 0", sched_yield() == 0);
}

/* ------------------------------------------------------------ 200 threads, pipe ping-pong */

enum { PAIRS = 100, PINGS = 200 };

struct pair {
    int ab[2], ba[2];
    long sum_a, sum_b;
};

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *ping(void *arg)
{
    struct pair *p = arg;
    for (long v = 1; v <= PINGS; v++) {
        long back;
        if (write_full(p->ab[1], &v, sizeof v) || read_full(p->ba[0], &back, sizeof back))
            return (void *)-1L;
        p->sum_a += back;
    }
    close(p->ab[1]);
    return NULL;
}

static void *pong(void *arg)
{
    struct pair *p = arg;
    long v;
    while (read_full(p->ab[0], &v, sizeof v) == 0) {
        p->sum_b += v;
        v *= 2;
        if (write_full(p->ba[1], &v, sizeof v))
            return (void *)-1L;
    }
    return NULL;
}

static void test_pipe_pingpong(void)
{
    static struct pair pairs[PAIRS];
    pthread_t t[2 * PAIRS];
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 128 * 1024);
    for (int i = 0; i < PAIRS; i++) {
        if (pipe2(pairs[i].ab, O_CLOEXEC) || pipe2(pairs[i].ba, O_CLOEXEC))
            die("pipe", errno);
        /* The pong side starts first: its read must block until ping writes. */
        MUST(pthread_create(&t[2 * i + 1], &small, pong, &pairs[i]));
        MUST(pthread_create(&t[2 * i], &small, ping, &pairs[i]));
    }
    long bad = 0, sum = 0;
    for (int i = 0; i < 2 * PAIRS; i++)
        bad += join(t[i]) != NULL;
    for (int i = 0; i < PAIRS; i++) {
        sum += pairs[i].sum_a + pairs[i].sum_b;
        close(pairs[i].ab[0]);
        close(pairs[i].ba[0]);
        close(pairs[i].ba[1]);
    }
    pthread_attr_destroy(&small);
    long per_pair = 3L * PINGS * (PINGS + 1) / 2;
    checkf(bad == 0 && sum == PAIRS * per_pair, "pipes: %ld threads ping-pong, sum %ld", 2 * PAIRS, sum);
}

/* ------------------------------------------------------------ producer / consumer */

enum { QCAP = 16, PRODUCERS = 4, CONSUMERS = 3, ITEMS = 5000 };
static long q[QCAP];
static int q_head, q_len, producers_left = PRODUCERS;
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_not_full = PTHREAD_COND_INITIALIZER, q_not_empty = PTHREAD_COND_INITIALIZER;

static void *producer(void *arg)
{
    long base = (long)arg * ITEMS;
    for (long i = 1; i <= ITEMS; i++) {
        pthread_mutex_lock(&q_lock);
        while (q_len == QCAP)
            pthread_cond_wait(&q_not_full, &q_lock);
        q[(q_head + q_len++) % QCAP] = base + i;
        pthread_cond_signal(&q_not_empty);
        pthread_mutex_unlock(&q_lock);
    }
    pthread_mutex_lock(&q_lock);
    if (--producers_left == 0)
        pthread_cond_broadcast(&q_not_empty);
    pthread_mutex_unlock(&q_lock);
    return NULL;
}

struct tally {
    long sum, n;
};

static void *consumer(void *arg)
{
    struct tally *t = arg;
    long sum = 0, n = 0;
    for (;;) {
        pthread_mutex_lock(&q_lock);
        while (q_len == 0 && producers_left > 0)
            pthread_cond_wait(&q_not_empty, &q_lock);
        if (q_len == 0) {
            pthread_mutex_unlock(&q_lock);
            break;
        }
        long v = q[q_head];
        q_head = (q_head + 1) % QCAP;
        q_len--;
        pthread_cond_signal(&q_not_full);
        pthread_mutex_unlock(&q_lock);
        sum += v;
        n++;
    }
    t->sum = sum;
    t->n = n;
    return NULL;
}

static void test_producer_consumer(void)
{
    pthread_t c[CONSUMERS], p[PRODUCERS];
    struct tally tallies[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++)
        c[i] = spawn(consumer, &tallies[i]);
    for (long i = 0; i < PRODUCERS; i++)
        p[i] = spawn(producer, (void *)i);
    for (int i = 0; i < PRODUCERS; i++)
        join(p[i]);
    long n = 0, sum = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        join(c[i]);
        n += tallies[i].n;
        sum += tallies[i].sum;
    }
    long total = (long)PRODUCERS * ITEMS;
    long want = total * (total + 1) / 2;
    checkf(n == total && sum == want, "queue: %ld items consumed, sum %ld", n, sum);
}

int main(void)
{
    /* A lost wake-up must end the run, not hang it. */
    alarm(30);
    test_mutexes();
    test_condvars();
    test_rwlocks();
    test_barriers();
    test_tls_once_keys();
    test_cancel();
    test_signals_and_tids();
    test_sched_yield();
    test_pipe_pingpong();
    test_producer_consumer();
    printf("%s: %d failed check(s)\n", failures ? "FAILED" : "all passed", failures);
    return failures ? 1 : 0;
}
