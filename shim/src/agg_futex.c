/* Private futexes between fibers: a pthread mutex or condition variable
 * shared by two fibers must park the fiber that waits, not block the
 * carrier that would run the fiber holding it.
 *
 * Waiters are kept in buckets by address, shared by every carrier of the
 * process, so that a fiber on one carrier wakes a fiber on another.  A
 * bucket's lock covers its list and the `queued` flag of the fibers in it;
 * whoever takes a fiber out of the list ends its wait, exactly once.  Only
 * the fiber's own carrier then touches its state (agg_futex_woken, directly
 * or through agg_post).
 *
 * FUTEX_WAIT(_BITSET) checks the word as the kernel does, under the bucket's
 * lock, and parks the fiber; a timeout is an io_uring timeout in pool 0 of
 * its carrier.  FUTEX_WAKE(_BITSET) wakes fibers first, and passes whatever
 * is left of the count to the kernel, for threads that are not fibers.
 * Wakers outside the fiber world cannot see our waiters: when there may be
 * any (agg_outside_wakers) a carrier that waits watches the words its
 * fibers wait on (futex_waitv when it has nothing else to wait for, a
 * periodic re-check otherwise), and a fiber whose word changed is woken;
 * FUTEX_WAIT may return spuriously, and glibc's loops expect that.  The
 * watch is not kept in the ring (IORING_OP_FUTEX_WAITV): it would be a
 * waiter the kernel counts, and take the wakes that the engine passes on
 * for threads (FUTEX_WAKE would say it woke one where natively none).
 */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "sandbox.h"
#include "store.h"
#include "util.h"

#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_PRIVATE_FLAG 128
#define FUTEX_CLOCK_REALTIME 256
#define FUTEX_CMD_MASK (~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME))
#define FUTEX2_SIZE_U32 2
#define FUTEX2_PRIVATE 128
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

#define BUCKETS 1024

static struct bucket {
    int lock;
    struct agg_fiber *head;
} buckets[BUCKETS];

static struct bucket *bucket_of(const void *addr)
{
    uint64_t h = (uint64_t)(uintptr_t)addr * 0x9e3779b97f4a7c15ULL;
    return &buckets[h >> 54];
}

static void unlink_waiter(struct bucket *b, struct agg_fiber *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        b->head = f->next;
    if (f->next)
        f->next->prev = f->prev;
    f->next = f->prev = 0;
    f->queued = 0;
    __atomic_sub_fetch(&f->carrier->nfwait, 1, __ATOMIC_RELAXED);
}

/* On f's own carrier, once its wait has ended: its timer goes. */
static void wait_over(struct agg_carrier *c, struct agg_fiber *f)
{
    f->futex_addr = 0;
    if (f->timer) {
        struct agg_timer *t = f->timer;
        f->timer = 0;
        t->fiber = 0;
        struct io_uring_sqe *sqe = agg_sqe(c, 0);
        io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)t | AGG_TAG_TIMER, 0);
        io_uring_sqe_set_data64(sqe, AGG_TAG_IGNORE);
        c->pools[0].misc++;
    }
}

/* ... and it runs. */
void agg_futex_woken(struct agg_carrier *c, struct agg_fiber *f)
{
    wait_over(c, f);
    agg_wake(f);
}

/* f, about to park in its wait, has a signal to take: 1 when the wait ended
 * here with EINTR (f goes on running), 0 when a waker ended it first (its
 * post brings f back). */
int agg_futex_abandon(struct agg_fiber *f)
{
    struct bucket *b = bucket_of(f->futex_addr);
    agg_lock(&b->lock);
    int mine = f->queued;
    if (mine) {
        unlink_waiter(b, f);
        f->futex_result = -EINTR;
    }
    agg_unlock(&b->lock);
    if (mine)
        wait_over(f->carrier, f);
    return mine;
}

/* Carriers to wake once a bucket's lock is released. */
struct kicks {
    struct agg_carrier *c[8];
    unsigned n;
};

/* End the wait of f, taken out of bucket b (whose lock is held), with
 * `res` (0 woken, -ETIMEDOUT, -EINTR).  Its carrier finishes the job: this
 * one at once, another once told (k: after the lock; none: now). */
static void release(struct bucket *b, struct agg_fiber *f, long res, struct kicks *k)
{
    unlink_waiter(b, f);
    f->futex_result = res;
    struct agg_carrier *c = f->carrier, *here = agg_carrier;
    if (c == here) {
        agg_futex_woken(c, f);
        return;
    }
    /* Woken by a thread of a carrier with nothing else ready: it runs there,
     * once the waker parks, rather than waking its own carrier (a listener
     * handing a connection to a worker at low load stays on one carrier,
     * with no crossing to wake another).  Only a wait with no timer in its
     * carrier's ring; under load the waker's queue is not empty and the
     * waiter stays.  Not before its own carrier has switched away from it:
     * from the bucket's unlock to that switch the waiter still runs on its
     * stack, and its carrier's scheduler reads the post only after. */
    if (k && !res && f->movable && !f->timer && here && here->steal_slot >= 0 && agg_rq_empty(here) &&
        __atomic_load_n(&f->ctx.saved, __ATOMIC_ACQUIRE) && agg_steal_on()) {
        wait_over(here, f);
        agg_adopt(here, f);
        return;
    }
    if (!agg_post_quiet(f, AGG_POST_FUTEX))
        return;
    for (unsigned i = 0; k && i < k->n; i++)
        if (k->c[i] == c)
            return;
    if (k && k->n < 8)
        k->c[k->n++] = c;
    else
        agg_kick(c);
}

static void kick_all(struct kicks *k)
{
    for (unsigned i = 0; i < k->n; i++)
        agg_kick(k->c[i]);
}

/* On the timer's carrier: the wait ends with ETIMEDOUT unless it already
 * ended another way (then that wake is on its way to this carrier). */
void agg_futex_timer_done(struct agg_timer *t)
{
    struct agg_fiber *f = t->fiber;
    if (f) {
        struct bucket *b = bucket_of(t->addr);
        agg_lock(&b->lock);
        f->timer = 0;
        if (f->queued)
            release(b, f, -ETIMEDOUT, 0);
        agg_unlock(&b->lock);
    }
    agg_free(t);
}

static long wait(struct agg_fiber *f, struct ferry_regs *r, int cmd)
{
    struct agg_carrier *c = f->carrier;
    uint32_t *uaddr = (uint32_t *)r->rdi;
    uint32_t mask = cmd == FUTEX_WAIT_BITSET ? (uint32_t)r->r9 : ~0u;
    if (!mask || ((unsigned long)uaddr & 3))
        return -EINVAL;
    struct __kernel_timespec ts;
    int timed = r->r10 != 0;
    if (timed) {
        if (ferry_read_arg(r, &ts, (void *)r->r10, sizeof(ts)) != sizeof(ts))
            return -EFAULT;
        if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)
            return -EINVAL;
    }
    uint32_t cur;
    if (agg_safe_read(&cur, uaddr, 4) != 4)
        return -EFAULT;
    if (cur != (uint32_t)r->rdx)
        return -EAGAIN;
    if (timed && cmd == FUTEX_WAIT && ts.tv_sec == 0 && ts.tv_nsec == 0)
        return -ETIMEDOUT;
    struct agg_timer *t = 0;
    if (timed) {
        t = agg_calloc(1, sizeof(*t));
        if (!t)
            return -ENOMEM;
        t->ts = ts;
        t->addr = uaddr;
    }
    struct bucket *b = bucket_of(uaddr);
    agg_lock(&b->lock);
    /* checked again under the lock: a waker that changed it since is seen
     * here or finds this fiber in the list */
    if (__atomic_load_n(uaddr, __ATOMIC_SEQ_CST) != (uint32_t)r->rdx) {
        agg_unlock(&b->lock);
        agg_free(t);
        return -EAGAIN;
    }
    f->futex_addr = uaddr;
    f->futex_val = (uint32_t)r->rdx;
    f->futex_mask = mask;
    f->futex_result = 0;
    f->timer = t;
    f->queued = 1;
    f->prev = 0;
    f->next = b->head;
    if (b->head)
        b->head->prev = f;
    b->head = f;
    __atomic_add_fetch(&c->nfwait, 1, __ATOMIC_RELAXED);
    if (t) {
        /* under the lock: its completion (on this carrier) finds it set */
        t->fiber = f;
        unsigned flags = 0;
        if (cmd == FUTEX_WAIT_BITSET) {
            flags = IORING_TIMEOUT_ABS;
            if (r->rsi & FUTEX_CLOCK_REALTIME)
                flags |= IORING_TIMEOUT_REALTIME;
        }
        struct io_uring_sqe *sqe = agg_sqe(c, 0);
        io_uring_prep_timeout(sqe, &t->ts, 0, flags);
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)t | AGG_TAG_TIMER);
        c->pools[0].misc++;
    }
    agg_unlock(&b->lock);
    /* a waker on another carrier may end the wait from here on: its post
     * is read by this carrier's scheduler, after this fiber has parked */
    agg_park(f);
    return f->futex_result;
}

/* Wake up to n fibers waiting on addr whose mask meets `mask`. */
static long wake_fibers(uint32_t *addr, uint32_t mask, long n)
{
    struct bucket *b = bucket_of(addr);
    long woken = 0;
    struct kicks k = {.n = 0};
    /* always under the lock, never "nobody waits" from an unlocked look:
     * a waiter that read the old word may not be in the list yet */
    agg_lock(&b->lock);
    for (struct agg_fiber *w = b->head, *next; w && woken < n; w = next) {
        next = w->next;
        if (w->futex_addr == addr && (w->futex_mask & mask)) {
            release(b, w, 0, &k);
            woken++;
        }
    }
    agg_unlock(&b->lock);
    kick_all(&k);
    return woken;
}

static long wake(struct agg_fiber *f, struct ferry_regs *r, int cmd)
{
    struct agg_carrier *c = f->carrier;
    uint32_t *uaddr = (uint32_t *)r->rdi;
    uint32_t mask = cmd == FUTEX_WAKE_BITSET ? (uint32_t)r->r9 : ~0u;
    if (!mask)
        return -EINVAL;
    long n = (int)r->rdx;
    if (n < 0)
        n = 0x7fffffff;
    long woken = wake_fibers(uaddr, mask, n), res = woken;
    if (woken < n || n <= 0) {
        agg_stat(c->g, AGG_ST(native), 1);
        agg_stat(c->g, AGG_ST(crossings), 1);
        long k = ferry_pass6(SYS_futex, r->rdi, r->rsi, n - woken, r->r10, r->r8, r->r9);
        res = k < 0 ? (woken ? woken : k) : woken + k;
    }
    if (woken && f->thread && c->runs == c->tick_runs) {
        /* The waker has had its carrier since the last tick at least: the
         * kernel would let the thread it woke run now (a sleeper preempts
         * the thread that woke it), else a thread that takes a lock back
         * right after releasing it starves the one waiting for it (CPython's
         * buffered writer, its GIL).  The waker goes behind the others,
         * once every waiter it wakes is woken. */
        c->round_left = 0;
        agg_yield(f);
    }
    return res;
}

/* 1: handled (result in r->rax); 0: run it natively. */
int agg_futex(struct agg_fiber *f, struct ferry_regs *r)
{
    struct ferry_group *g = f->carrier->g;
    int cmd = (int)r->rsi & FUTEX_CMD_MASK;
    int priv = (int)r->rsi & FUTEX_PRIVATE_FLAG;
    if (cmd != FUTEX_WAIT && cmd != FUTEX_WAKE && cmd != FUTEX_WAIT_BITSET &&
        cmd != FUTEX_WAKE_BITSET) {
        agg_stat(g, AGG_ST(native), 1);
        agg_stat(g, AGG_ST(crossings), 1);
        return 0;
    }
    if (!priv) {
        /* shared futexes: other processes wake them through the kernel */
        if (cmd == FUTEX_WAKE || cmd == FUTEX_WAKE_BITSET) {
            agg_stat(g, AGG_ST(native), 1);
            agg_stat(g, AGG_ST(crossings), 1);
            return 0;
        }
        struct agg_req req;
        req.nr = SYS_futex;
        req.args[0] = r->rdi, req.args[1] = r->rsi, req.args[2] = r->rdx;
        req.args[3] = r->r10, req.args[4] = r->r8, req.args[5] = r->r9;
        req.fiber = f;
        req.carrier = f->carrier;
        req.done = 0;
        req.cancel = 0;
        req.worker_tid = 0;
        f->carrier->worker_pending++;
        agg_worker_queue(g, &req);
        /* a signal for the fiber cuts the wait short, as the kernel's would */
        f->req = &req;
        f->req_pool = -1;
        f->interrupted = 0;
        agg_park(f);
        f->req = 0;
        r->rax = req.result;
        return 1;
    }
    if (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET)
        r->rax = wait(f, r, cmd);
    else
        r->rax = wake(f, r, cmd);
    return 1;
}

/* A thread's exit clears its tid word: every fiber waiting on it goes. */
void agg_futex_wake_all(void *addr)
{
    wake_fibers(addr, ~0u, 0x7fffffff);
}

/* On f's carrier: a signal for a fiber parked on a futex; the wait ends
 * with EINTR unless it has just ended another way. */
int agg_futex_interrupt(struct agg_fiber *f)
{
    if (!f->futex_addr)
        return 0;
    struct bucket *b = bucket_of(f->futex_addr);
    agg_lock(&b->lock);
    if (f->queued)
        release(b, f, -EINTR, 0);
    agg_unlock(&b->lock);
    return 1;
}

/* Visit c's waiters, bucket by bucket under each lock; `fn` may release. */
static void each_waiter(struct agg_carrier *c, void (*fn)(struct bucket *, struct agg_fiber *, void *),
                        void *arg)
{
    for (unsigned i = 0; i < BUCKETS && __atomic_load_n(&c->nfwait, __ATOMIC_RELAXED); i++) {
        struct bucket *b = &buckets[i];
        if (!__atomic_load_n(&b->head, __ATOMIC_RELAXED))
            continue;
        agg_lock(&b->lock);
        for (struct agg_fiber *w = b->head, *next; w; w = next) {
            next = w->next;
            if (w->carrier == c)
                fn(b, w, arg);
        }
        agg_unlock(&b->lock);
    }
}

static void release_if_changed(struct bucket *b, struct agg_fiber *w, void *arg)
{
    (void)arg;
    /* a plain load: the word was readable when the fiber began to wait on
     * it, and a system call per waiter per recheck would cost the carrier
     * more than the wait saves (hundreds of idle pool threads) */
    if (__atomic_load_n(w->futex_addr, __ATOMIC_ACQUIRE) != w->futex_val)
        release(b, w, 0, 0);
}

/* Wake the waiters whose word no longer holds the value they waited on. */
void agg_futex_recheck(struct agg_carrier *c)
{
    each_waiter(c, release_if_changed, 0);
}

struct waitv {
    uint64_t val, uaddr;
    uint32_t flags, reserved;
};

struct watch {
    struct waitv wv[128];
    unsigned n;
};

static void watch_word(struct bucket *b, struct agg_fiber *w, void *arg)
{
    (void)b;
    struct watch *ws = arg;
    if (ws->n >= 128)
        return;
    ws->wv[ws->n].val = w->futex_val;
    ws->wv[ws->n].uaddr = (uint64_t)(uintptr_t)w->futex_addr;
    ws->wv[ws->n].flags = FUTEX2_SIZE_U32 | FUTEX2_PRIVATE;
    ws->wv[ws->n].reserved = 0;
    ws->n++;
}

/* Nothing in flight, no fiber ready: only a waker outside the carrier can
 * help; wait in the kernel on its own kick word, which another carrier's
 * post changes, and on the words its fibers wait on when threads outside
 * the engine may wake them. */
void agg_futex_idle(struct agg_carrier *c, uint64_t limit_ns)
{
    struct watch ws;
    ws.n = 1;
    ws.wv[0].val = __atomic_load_n(&c->kick, __ATOMIC_SEQ_CST);
    ws.wv[0].uaddr = (uint64_t)(uintptr_t)&c->kick;
    ws.wv[0].flags = FUTEX2_SIZE_U32 | FUTEX2_PRIVATE;
    ws.wv[0].reserved = 0;
    __atomic_store_n(&c->sleeping, AGG_SLEEP_FUTEX, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->inbox, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&c->sleeping, 0, __ATOMIC_RELAXED);
        return;
    }
    if (agg_outside_wakers(c))
        each_waiter(c, watch_word, &ws);
    if (ws.n == 1 && !c->threads) {
        /* every fiber waits for another (a deadlock of the program, as with
         * threads): sleep rather than spin */
        struct __kernel_timespec ts = {0, 10000000};
        ferry_raw2(SYS_nanosleep, &ts, 0);
    } else {
        struct __kernel_timespec until, *t = 0;
        if (limit_ns) {
            uint64_t at = ferry_mono_ns() + limit_ns;
            until.tv_sec = (long long)(at / 1000000000ULL);
            until.tv_nsec = (long long)(at % 1000000000ULL);
            t = &until;
        }
        long r = ferry_raw6(SYS_futex_waitv, (long)ws.wv, ws.n, 0, (long)t, 1 /* CLOCK_MONOTONIC */, 0);
        /* refused by the program's filter (an allow-list older than
         * futex_waitv, sandbox.h): the kick word alone, a millisecond at
         * most (the other words are looked at after it), else a nap */
        if (r == -EPERM && ferry_sandbox_on) {
            struct __kernel_timespec ms = {0, 1000000};
            if (ferry_raw4(SYS_futex, &c->kick, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, ws.wv[0].val, &ms) == -EPERM)
                ferry_raw2(SYS_nanosleep, &ms, 0);
        }
    }
    __atomic_store_n(&c->sleeping, 0, __ATOMIC_RELAXED);
}

/* A fork child: the other threads' waits and locks are not its.  Only
 * fibers wait here: without them the table was never written, and clearing
 * it anyway made each of its 5 pages a fault in every fork child. */
void agg_futex_forget(void)
{
    if (agg_threads_on)
        ferry_memset(buckets, 0, sizeof(buckets));
}
