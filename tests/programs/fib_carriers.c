/* fib_carriers: a pthread stress program for fibers on several carriers.
 *
 * Under a profile with `threads = "fibers"` and `carriers = N` the threads
 * below are fibers spread over N kernel threads, so everything here crosses
 * carriers: futex waits and wakes (mutex, condition variable, barrier,
 * semaphore, rwlock), pthread_join, thread-directed signals (pthread_kill to
 * a thread blocked in sigwait or in a read on a pipe, with and without
 * SA_RESTART), timed waits, and atomics polled with sched_yield.
 *
 * Only the main thread prints: one line "name ok <checksum>" per part, where
 * the checksum depends only on the work done, never on timing, so a run under
 * `ferry run` prints exactly what the native run prints.  A part that fails
 * prints "name FAIL: what" and the program exits 1 after the remaining parts;
 * exit 0 when every part held.  alarm(60) ends a run that hangs (natively the
 * whole program takes well under a second).
 *
 * Fibers are not preempted: every loop that waits for another thread makes a
 * system call in each round (sched_yield, a futex wait, a sleep), or a fiber
 * spinning on one carrier would keep the thread it waits for from running.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fib_common.h"

static int failed_parts;
static char why[256];           /* the first failure of the running part */

static void fail(const char *fmt, ...)
{
    if (why[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
}

static void report(const char *name, unsigned long long checksum)
{
    if (why[0]) {
        printf("%s FAIL: %s\n", name, why);
        failed_parts++;
        why[0] = 0;
    } else {
        printf("%s ok %llu\n", name, checksum);
    }
    /* Each line out at once: a run that hangs shows how far it got. */
    fflush(stdout);
}

#define MUST0(call)                                                                                \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            die(#call, errno);                                                                     \
    } while (0)

static struct timespec after_ms(clockid_t clock, long ms)
{
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static int reached(clockid_t clock, const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(clock, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

/* ------------------------------------------------------------ (a) mutex */

enum { MTX_THREADS = 8, MTX_EACH = 25000 };
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long mtx_counter, mtx_sum;

static void *mutex_worker(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < MTX_EACH; i++) {
        pthread_mutex_lock(&mtx);
        mtx_counter++;
        mtx_sum += (unsigned long long)id * MTX_EACH + i;
        pthread_mutex_unlock(&mtx);
        /* Let the others in now and then, so that the lock is contended. */
        if (i % 500 == 0)
            sched_yield();
    }
    return NULL;
}

static void part_mutex(void)
{
    pthread_t t[MTX_THREADS];
    for (long i = 0; i < MTX_THREADS; i++)
        t[i] = spawn(mutex_worker, (void *)i);
    for (int i = 0; i < MTX_THREADS; i++)
        join(t[i]);
    unsigned long long n = (unsigned long long)MTX_THREADS * MTX_EACH;
    if (mtx_counter != n)
        fail("counter %llu, want %llu", mtx_counter, n);
    if (mtx_sum != n * (n - 1) / 2)
        fail("sum %llu, want %llu", mtx_sum, n * (n - 1) / 2);
    report("mutex", mtx_counter);
}

/* ------------------------------------------------------------ (b) condvar ping-pong */

enum { PAIRS = 4, ROUND_TRIPS = 2000 };

struct pair {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int turn;                   /* 0: ping's move, 1: pong's */
    long ball;                  /* incremented by each move */
    int bad;
};

static struct pair pairs[PAIRS];

struct side {
    struct pair *p;
    int me;
};

static void *pingpong(void *arg)
{
    struct side *s = arg;
    struct pair *p = s->p;
    for (int i = 0; i < ROUND_TRIPS; i++) {
        pthread_mutex_lock(&p->lock);
        while (p->turn != s->me)
            pthread_cond_wait(&p->cv, &p->lock);
        /* Moves alternate: ping sees even balls, pong odd ones. */
        if ((p->ball & 1) != s->me)
            p->bad = 1;
        p->ball++;
        p->turn = !s->me;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

static void part_condvar(void)
{
    pthread_t t[PAIRS][2];
    struct side sides[PAIRS][2];
    for (int i = 0; i < PAIRS; i++) {
        MUST(pthread_mutex_init(&pairs[i].lock, NULL));
        MUST(pthread_cond_init(&pairs[i].cv, NULL));
        for (int j = 0; j < 2; j++) {
            sides[i][j] = (struct side){&pairs[i], j};
            t[i][j] = spawn(pingpong, &sides[i][j]);
        }
    }
    unsigned long long total = 0;
    for (int i = 0; i < PAIRS; i++) {
        join(t[i][0]);
        join(t[i][1]);
        if (pairs[i].bad)
            fail("pair %d: a move out of turn", i);
        if (pairs[i].ball != 2 * ROUND_TRIPS)
            fail("pair %d: %ld moves, want %d", i, pairs[i].ball, 2 * ROUND_TRIPS);
        total += (unsigned long long)pairs[i].ball;
    }
    report("condvar", total / 2);
}

/* ------------------------------------------------------------ (c) barrier */

enum { BAR_THREADS = 6, BAR_ROUNDS = 500 };
static pthread_barrier_t bar;
static long bar_slot[BAR_THREADS];
static atomic_int bar_serial;
static unsigned long long bar_sums[BAR_THREADS];
static int bar_bad[BAR_THREADS];

static void *barrier_worker(void *arg)
{
    long id = (long)arg;
    for (long r = 0; r < BAR_ROUNDS; r++) {
        bar_slot[id] = r * (id + 1);
        /* After the first barrier every slot holds this round's value. */
        if (pthread_barrier_wait(&bar) == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&bar_serial, 1);
        long sum = 0;
        for (int i = 0; i < BAR_THREADS; i++)
            sum += bar_slot[i];
        if (sum != r * BAR_THREADS * (BAR_THREADS + 1) / 2)
            bar_bad[id] = 1;
        bar_sums[id] += (unsigned long long)sum;
        /* Nobody writes the next round's value before all have read. */
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static void part_barrier(void)
{
    MUST(pthread_barrier_init(&bar, NULL, BAR_THREADS));
    pthread_t t[BAR_THREADS];
    for (long i = 0; i < BAR_THREADS; i++)
        t[i] = spawn(barrier_worker, (void *)i);
    unsigned long long sum = 0;
    for (int i = 0; i < BAR_THREADS; i++) {
        join(t[i]);
        if (bar_bad[i])
            fail("thread %d saw a slot of another round", i);
        if (i && bar_sums[i] != bar_sums[0])
            fail("thread %d summed %llu, thread 0 %llu", i, bar_sums[i], bar_sums[0]);
        sum += bar_sums[i];
    }
    if (atomic_load(&bar_serial) != BAR_ROUNDS)
        fail("%d serial threads, want one per round (%d)", atomic_load(&bar_serial), BAR_ROUNDS);
    pthread_barrier_destroy(&bar);
    report("barrier", sum);
}

/* ------------------------------------------------------------ (d) semaphores */

enum { PRODUCERS = 4, CONSUMERS = 4, ITEMS_EACH = 10000, SLOTS = 16 };
static sem_t sem_free, sem_full;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static long ring[SLOTS];
static unsigned ring_head, ring_tail;
static unsigned long long consumed_sum[CONSUMERS];
static long consumed_count[CONSUMERS];

static void *producer(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < ITEMS_EACH; i++) {
        while (sem_wait(&sem_free) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&ring_lock);
        ring[ring_head++ % SLOTS] = id * ITEMS_EACH + i + 1;
        pthread_mutex_unlock(&ring_lock);
        sem_post(&sem_full);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    long id = (long)arg;
    /* Every consumer takes the same number of items, whichever they are. */
    for (long i = 0; i < PRODUCERS * ITEMS_EACH / CONSUMERS; i++) {
        while (sem_wait(&sem_full) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&ring_lock);
        long v = ring[ring_tail++ % SLOTS];
        pthread_mutex_unlock(&ring_lock);
        sem_post(&sem_free);
        consumed_sum[id] += (unsigned long long)v;
        consumed_count[id]++;
    }
    return NULL;
}

static void part_semaphore(void)
{
    MUST0(sem_init(&sem_free, 0, SLOTS));
    MUST0(sem_init(&sem_full, 0, 0));
    pthread_t p[PRODUCERS], c[CONSUMERS];
    for (long i = 0; i < CONSUMERS; i++)
        c[i] = spawn(consumer, (void *)i);
    for (long i = 0; i < PRODUCERS; i++)
        p[i] = spawn(producer, (void *)i);
    for (int i = 0; i < PRODUCERS; i++)
        join(p[i]);
    unsigned long long sum = 0;
    long count = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        join(c[i]);
        sum += consumed_sum[i];
        count += consumed_count[i];
    }
    unsigned long long n = (unsigned long long)PRODUCERS * ITEMS_EACH;
    if (count != (long)n)
        fail("%ld items consumed, want %llu", count, n);
    if (sum != n * (n + 1) / 2)
        fail("checksum %llu, want %llu (items lost or duplicated)", sum, n * (n + 1) / 2);
    int v1 = -1, v2 = -1;
    sem_getvalue(&sem_free, &v1);
    sem_getvalue(&sem_full, &v2);
    if (v1 != SLOTS || v2 != 0)
        fail("semaphores end at %d free, %d full; want %d, 0", v1, v2, SLOTS);
    sem_destroy(&sem_free);
    sem_destroy(&sem_full);
    report("semaphore", sum);
}

/* ------------------------------------------------------------ (e) rwlock */

enum { READERS = 4, WRITERS = 2, READS_EACH = 20000, WRITES_EACH = 5000 };
static pthread_rwlock_t rwl = PTHREAD_RWLOCK_INITIALIZER;
/* Writers keep left + right == 0 and count their updates in `version`. */
static long rw_left, rw_right, rw_version;
static atomic_long rw_bad_reads, rw_good_reads;

static void *rw_reader(void *arg)
{
    (void)arg;
    for (long i = 0; i < READS_EACH; i++) {
        pthread_rwlock_rdlock(&rwl);
        long l = rw_left, v = rw_version;
        if (i % 64 == 0)
            sched_yield();      /* hold the lock across a switch now and then */
        long r = rw_right;
        if (l + r != 0 || rw_version != v)
            atomic_fetch_add(&rw_bad_reads, 1);
        else
            atomic_fetch_add(&rw_good_reads, 1);
        pthread_rwlock_unlock(&rwl);
        if (i % 256 == 0)
            sched_yield();
    }
    return NULL;
}

static void *rw_writer(void *arg)
{
    long id = (long)arg;
    for (long i = 0; i < WRITES_EACH; i++) {
        pthread_rwlock_wrlock(&rwl);
        rw_left += id + 1;
        if (i % 64 == 0)
            sched_yield();      /* readers must not get in while it is half done */
        rw_right -= id + 1;
        rw_version++;
        pthread_rwlock_unlock(&rwl);
        if (i % 32 == 0)
            sched_yield();
    }
    return NULL;
}

static void part_rwlock(void)
{
    pthread_t r[READERS], w[WRITERS];
    for (long i = 0; i < READERS; i++)
        r[i] = spawn(rw_reader, NULL);
    for (long i = 0; i < WRITERS; i++)
        w[i] = spawn(rw_writer, (void *)i);
    for (int i = 0; i < READERS; i++)
        join(r[i]);
    for (int i = 0; i < WRITERS; i++)
        join(w[i]);
    long want_left = 0;
    for (long i = 0; i < WRITERS; i++)
        want_left += (i + 1) * WRITES_EACH;
    if (atomic_load(&rw_bad_reads))
        fail("%ld reads saw a half-done write", atomic_load(&rw_bad_reads));
    if (atomic_load(&rw_good_reads) != (long)READERS * READS_EACH)
        fail("%ld good reads, want %d", atomic_load(&rw_good_reads), READERS * READS_EACH);
    if (rw_version != (long)WRITERS * WRITES_EACH || rw_left != want_left || rw_right != -want_left)
        fail("after the writers: version %ld left %ld right %ld", rw_version, rw_left, rw_right);
    /* Now free: both a write lock and a read lock are granted at once. */
    if (pthread_rwlock_trywrlock(&rwl) != 0)
        fail("trywrlock on a free rwlock failed");
    else
        pthread_rwlock_unlock(&rwl);
    report("rwlock", (unsigned long long)rw_version * 1000000ULL + (unsigned long long)rw_left);
}

/* ------------------------------------------------------------ (f) join in waves */

enum { WAVES = 8, PER_WAVE = 8 };
static atomic_int live_threads;

static void *short_thread(void *arg)
{
    long v = (long)arg;
    atomic_fetch_add(&live_threads, 1);
    /* Some end at once, some after a switch or a sleep. */
    if (v % 3 == 1)
        sched_yield();
    else if (v % 3 == 2)
        sleep_ms(1);
    long r = v * v + 1;
    atomic_fetch_sub(&live_threads, 1);
    return (void *)r;
}

static void part_join(void)
{
    unsigned long long sum = 0;
    int bad = 0;
    for (long w = 0; w < WAVES; w++) {
        pthread_t t[PER_WAVE];
        for (long i = 0; i < PER_WAVE; i++)
            t[i] = spawn(short_thread, (void *)(w * PER_WAVE + i));
        /* Odd waves are joined in reverse order. */
        for (long k = 0; k < PER_WAVE; k++) {
            long i = w % 2 ? PER_WAVE - 1 - k : k;
            long v = w * PER_WAVE + i;
            long r = (long)join(t[i]);
            if (r != v * v + 1)
                bad++;
            sum += (unsigned long long)r;
        }
        if (atomic_load(&live_threads) != 0)
            fail("wave %ld: %d threads still running after their joins", w, atomic_load(&live_threads));
    }
    if (bad)
        fail("%d threads returned a wrong value", bad);
    report("join", sum);
}

/* ------------------------------------------------------------ (g) signals */

enum { SIGWAITS = 200, RESTART_SIGNALS = 5 };
static __thread int is_target;          /* set by the thread the signals are meant for */
static atomic_int handled_on_target, handled_elsewhere;
static atomic_int target_ready, target_done;
static int pipe_fd[2];
static sem_t acked;

static void on_usr2(int sig)
{
    (void)sig;
    int saved = errno;
    if (is_target)
        atomic_fetch_add(&handled_on_target, 1);
    else
        atomic_fetch_add(&handled_elsewhere, 1);
    errno = saved;
}

/* sigwait: SIGUSR1 blocked everywhere; the target takes them one by one. */
static void *sigwait_target(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    long got = 0;
    for (int i = 0; i < SIGWAITS; i++) {
        int sig = 0;
        int rc = sigwait(&set, &sig);
        if (rc != 0 || sig != SIGUSR1)
            return (void *)-1L;
        got++;
        sem_post(&acked);
    }
    return (void *)got;
}

struct sender_arg {
    pthread_t target;
    int mode;                   /* 0: sigwait, 1: EINTR, 2: SA_RESTART */
    long result;
};

static void *sender(void *arg)
{
    struct sender_arg *a = arg;
    if (a->mode == 0) {
        /* Signals of one kind do not queue: the next one goes after the ack. */
        for (int i = 0; i < SIGWAITS; i++) {
            int rc = pthread_kill(a->target, SIGUSR1);
            if (rc)
                return (void *)(long)rc;
            while (sem_wait(&acked) < 0 && errno == EINTR)
                ;
        }
        return NULL;
    }
    while (!atomic_load(&target_ready))
        sched_yield();
    if (a->mode == 1) {
        /* A signal that comes before the read only runs the handler: keep
         * sending until the read has ended (with EINTR). */
        while (!atomic_load(&target_done)) {
            pthread_kill(a->target, SIGUSR2);
            sleep_ms(2);
        }
        return NULL;
    }
    /* SA_RESTART: several signals, each handled, then the data. */
    for (int i = 0; i < RESTART_SIGNALS; i++) {
        int before = atomic_load(&handled_on_target);
        pthread_kill(a->target, SIGUSR2);
        while (atomic_load(&handled_on_target) == before)
            sleep_ms(1);
        sleep_ms(2);
    }
    if (write(pipe_fd[1], "data", 4) != 4)
        return (void *)1L;
    return NULL;
}

/* A read on an empty pipe, SIGUSR2 unblocked with a handler: the result. */
static void *read_target(void *arg)
{
    (void)arg;
    is_target = 1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    char buf[8] = {0};
    atomic_store(&target_ready, 1);
    ssize_t n = read(pipe_fd[0], buf, sizeof buf);
    int err = errno;
    atomic_store(&target_done, 1);
    /* Blocked again before the thread ends: no late signal runs on it. */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (n < 0)
        return (void *)(long)-err;
    return (void *)(n == 4 && memcmp(buf, "data", 4) == 0 ? 4L : 1000L + n);
}

static void install_usr2(int flags)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_usr2;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    MUST0(sigaction(SIGUSR2, &sa, NULL));
}

static long signalled_read(int flags, int mode)
{
    install_usr2(flags);
    atomic_store(&target_ready, 0);
    atomic_store(&target_done, 0);
    atomic_store(&handled_on_target, 0);
    pthread_t t = spawn(read_target, NULL);
    struct sender_arg a = {t, mode, 0};
    pthread_t s = spawn(sender, &a);
    long r = (long)join(t);
    if (join(s) != NULL)
        fail("mode %d: the sender failed", mode);
    return r;
}

static void part_signals(void)
{
    unsigned long long sum = 0;
    /* Main and every thread it creates have SIGUSR1 and SIGUSR2 blocked; only
     * the target of the read unblocks SIGUSR2. */
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &both, NULL);
    MUST0(pipe(pipe_fd));
    MUST0(sem_init(&acked, 0, 0));

    /* 1. pthread_kill to a thread in sigwait, 200 times. */
    pthread_t t = spawn(sigwait_target, NULL);
    struct sender_arg a = {t, 0, 0};
    pthread_t s = spawn(sender, &a);
    long got = (long)join(t);
    long rc = (long)join(s);
    if (rc)
        fail("pthread_kill: %s", strerror((int)rc));
    if (got != SIGWAITS)
        fail("sigwait: %ld signals taken, want %d", got, SIGWAITS);
    sum += (unsigned long long)got;

    /* 2. Without SA_RESTART the read ends with EINTR. */
    long r = signalled_read(0, 1);
    if (r != -EINTR)
        fail("read without SA_RESTART: %s, want EINTR",
             r < 0 ? strerror((int)-r) : r == 4 ? "read the data" : "odd data");
    if (atomic_load(&handled_on_target) < 1)
        fail("without SA_RESTART: the handler did not run on the target");
    sum += 1000;

    /* 3. With SA_RESTART the read goes on and returns the data. */
    r = signalled_read(SA_RESTART, 2);
    if (r != 4)
        fail("read under SA_RESTART: %s, want the 4 bytes written after the signals",
             r < 0 ? strerror((int)-r) : "odd data");
    if (atomic_load(&handled_on_target) != RESTART_SIGNALS)
        fail("under SA_RESTART: the handler ran %d times on the target, want %d",
             atomic_load(&handled_on_target), RESTART_SIGNALS);
    sum += 100000ULL * (unsigned long long)r;

    if (atomic_load(&handled_elsewhere))
        fail("the handler ran %d times on a thread the signal was not meant for",
             atomic_load(&handled_elsewhere));
    /* Nothing of either signal is left pending for the process. */
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGUSR1) || sigismember(&pending, SIGUSR2))
        fail("a signal is still pending");
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    sem_destroy(&acked);
    report("signals", sum);
}

/* ------------------------------------------------------------ (h) timed waits */

static pthread_mutex_t tw_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tw_cv;            /* on CLOCK_MONOTONIC */
static pthread_cond_t tw_cv_rt = PTHREAD_COND_INITIALIZER;     /* CLOCK_REALTIME */
static int tw_flag;

/* A wait nobody signals: ETIMEDOUT, not before the deadline. */
static void *timeout_waiter(void *arg)
{
    long ms = (long)arg;
    struct timespec deadline = after_ms(CLOCK_REALTIME, ms);
    pthread_mutex_lock(&tw_lock);
    int rc;
    do
        rc = pthread_cond_timedwait(&tw_cv_rt, &tw_lock, &deadline);
    while (rc == 0);
    pthread_mutex_unlock(&tw_lock);
    if (rc != ETIMEDOUT)
        return (void *)1L;
    if (!reached(CLOCK_REALTIME, &deadline))
        return (void *)2L;
    return (void *)0L;
}

/* A wait signalled long before its deadline: 0, with the flag set. */
static void *signalled_waiter(void *arg)
{
    (void)arg;
    struct timespec deadline = after_ms(CLOCK_MONOTONIC, 20000);
    int rc = 0;
    pthread_mutex_lock(&tw_lock);
    while (!tw_flag && rc == 0)
        rc = pthread_cond_timedwait(&tw_cv, &tw_lock, &deadline);
    int flag = tw_flag;
    pthread_mutex_unlock(&tw_lock);
    if (rc != 0)
        return (void *)(long)(10 + rc);
    if (!flag)
        return (void *)3L;
    if (reached(CLOCK_MONOTONIC, &deadline))
        return (void *)4L;
    return (void *)0L;
}

static void *tw_signaller(void *arg)
{
    (void)arg;
    sleep_ms(30);
    pthread_mutex_lock(&tw_lock);
    tw_flag = 1;
    pthread_cond_signal(&tw_cv);
    pthread_mutex_unlock(&tw_lock);
    return NULL;
}

static void part_timedwait(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    MUST(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    MUST(pthread_cond_init(&tw_cv, &ca));
    pthread_condattr_destroy(&ca);

    pthread_t a = spawn(timeout_waiter, (void *)50L);
    pthread_t b = spawn(signalled_waiter, NULL);
    pthread_t c = spawn(tw_signaller, NULL);
    long ra = (long)join(a), rb = (long)join(b);
    join(c);
    static const char *const what[] = {"ok", "not ETIMEDOUT", "returned before the deadline",
                                       "returned without the flag", "returned after the deadline"};
    if (ra)
        fail("timed wait that nobody signals: %s", what[ra]);
    if (rb >= 10)
        fail("signalled timed wait: %s", strerror((int)rb - 10));
    else if (rb)
        fail("signalled timed wait: %s", what[rb]);
    /* And one on the main thread itself. */
    long rm = (long)timeout_waiter((void *)20L);
    if (rm)
        fail("timed wait on the main thread: %s", what[rm]);
    pthread_cond_destroy(&tw_cv);
    report("timedwait", 3);
}

/* ------------------------------------------------------------ (i) atomics */

enum { RING = 4, PASSES = 500, SPINNERS = 6, RELEASES = 50 };
static atomic_long turn;
static atomic_long go_round, arrived;
static unsigned long long ring_sum[RING];

/* A token ring: each waits, yielding, for its turn, then passes it on. */
static void *ring_member(void *arg)
{
    long me = (long)arg;
    for (long i = 0; i < PASSES; i++) {
        long t;
        while ((t = atomic_load(&turn)) % RING != me)
            sched_yield();
        ring_sum[me] += (unsigned long long)t;
        atomic_store(&turn, t + 1);
    }
    return NULL;
}

/* Spinners wait for the go flag of each round, set by main. */
static void *spinner(void *arg)
{
    (void)arg;
    for (long r = 1; r <= RELEASES; r++) {
        while (atomic_load(&go_round) < r)
            sched_yield();
        atomic_fetch_add(&arrived, 1);
    }
    return NULL;
}

static void part_atomics(void)
{
    pthread_t t[RING];
    for (long i = 0; i < RING; i++)
        t[i] = spawn(ring_member, (void *)i);
    for (int i = 0; i < RING; i++)
        join(t[i]);
    unsigned long long sum = 0;
    for (int i = 0; i < RING; i++)
        sum += ring_sum[i];
    unsigned long long n = (unsigned long long)RING * PASSES;
    if (atomic_load(&turn) != (long)n || sum != n * (n - 1) / 2)
        fail("token ring: turn %ld sum %llu, want %llu and %llu", atomic_load(&turn), sum, n,
             n * (n - 1) / 2);

    pthread_t s[SPINNERS];
    for (long i = 0; i < SPINNERS; i++)
        s[i] = spawn(spinner, NULL);
    for (long r = 1; r <= RELEASES; r++) {
        /* Every spinner passed the previous round before the next starts. */
        while (atomic_load(&arrived) < (r - 1) * SPINNERS)
            sched_yield();
        atomic_store(&go_round, r);
    }
    for (int i = 0; i < SPINNERS; i++)
        join(s[i]);
    if (atomic_load(&arrived) != (long)SPINNERS * RELEASES)
        fail("flag: %ld arrivals, want %d", atomic_load(&arrived), SPINNERS * RELEASES);
    report("atomics", sum + (unsigned long long)atomic_load(&arrived));
}

/* ------------------------------------------------------------ (j) socket */

/* One blocking write far larger than the socket's buffer: it returns only
 * once all of it went, however the reader paces itself; then a write to a
 * socket whose peer is gone fails with EPIPE (SIGPIPE ignored). */
#define SOCK_BYTES (4 << 20)

static void *slow_reader(void *arg)
{
    int fd = *(int *)arg;
    static char buf[7000];
    unsigned long long sum = 0, got = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            sum = sum * 31 + (unsigned char)buf[i];
        got += (unsigned long long)n;
        if (got % (512 * 1024) < sizeof buf)
            sched_yield();
    }
    static unsigned long long out[2];
    out[0] = got;
    out[1] = sum;
    return out;
}

static void part_socket(void)
{
    int sv[2];
    MUST0(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    char *data = malloc(SOCK_BYTES);
    if (!data)
        die("malloc", ENOMEM);
    unsigned long long want = 0;
    for (int i = 0; i < SOCK_BYTES; i++) {
        data[i] = (char)(i * 7 + (i >> 11));
        want = want * 31 + (unsigned char)data[i];
    }
    pthread_t t = spawn(slow_reader, &sv[1]);
    ssize_t n = write(sv[0], data, SOCK_BYTES);
    if (n != SOCK_BYTES)
        fail("one write of %d bytes returned %zd (%s)", SOCK_BYTES, n, n < 0 ? strerror(errno) : "short");
    close(sv[0]);
    unsigned long long *got = join(t);
    if (got[0] != SOCK_BYTES || got[1] != want)
        fail("reader got %llu bytes, checksum %s", got[0], got[1] == want ? "right" : "wrong");
    close(sv[1]);
    MUST0(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    close(sv[1]);
    signal(SIGPIPE, SIG_IGN);
    n = write(sv[0], data, 100);
    if (n != -1 || errno != EPIPE)
        fail("write to a closed peer: %zd (%s), want EPIPE", n, n < 0 ? strerror(errno) : "no error");
    signal(SIGPIPE, SIG_DFL);
    close(sv[0]);
    free(data);
    report("socket", got[0]);
}

/* ------------------------------------------------------------ main */

static const struct {
    const char *name;
    void (*run)(void);
} parts[] = {
    {"mutex", part_mutex},         {"condvar", part_condvar},     {"barrier", part_barrier},
    {"semaphore", part_semaphore}, {"rwlock", part_rwlock},       {"join", part_join},
    {"signals", part_signals},     {"timedwait", part_timedwait}, {"atomics", part_atomics},
    {"socket", part_socket},
};

int main(int argc, char **argv)
{
    alarm(60);
    size_t n = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < n; i++) {
        /* fib_carriers [PART...]: only those parts (for debugging). */
        int want = argc < 2;
        for (int a = 1; a < argc; a++)
            want |= strcmp(argv[a], parts[i].name) == 0;
        if (want)
            parts[i].run();
    }
    printf("%s\n", failed_parts ? "FAILED" : "all parts ok");
    return failed_parts ? 1 : 0;
}
