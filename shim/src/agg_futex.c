/* Private futexes between the fibers of one carrier: a pthread mutex or
 * condition variable shared by two fibers must park the fiber that waits,
 * not block the carrier that would run the fiber holding it.
 *
 * FUTEX_WAIT(_BITSET) checks the word as the kernel does and parks the
 * fiber on the carrier's list; a timeout is an io_uring timeout in pool 0.
 * FUTEX_WAKE(_BITSET) wakes the carrier's waiters first, and passes
 * whatever is left of the count to the kernel, for threads that are not
 * fibers of this carrier.  Wakers outside the carrier cannot see our
 * waiters: when the carrier waits anyway it watches the waited-on words
 * (futex_waitv when it has nothing else to wait for, a periodic re-check
 * otherwise), and a fiber whose word changed is woken; FUTEX_WAIT may
 * return spuriously, and glibc's loops expect that.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

#define EINTR 4
#define EFAULT 14
#define ETIMEDOUT 110
#define ECANCELED 125
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

static void unlink_waiter(struct agg_carrier *c, struct agg_fiber *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        c->fwait = f->next;
    if (f->next)
        f->next->prev = f->prev;
    f->next = f->prev = 0;
    c->nfwait--;
}

/* Wake a parked waiter with `res` (0 woken, -ETIMEDOUT); cancels its timer. */
static void release(struct agg_carrier *c, struct agg_fiber *f, long res)
{
    unlink_waiter(c, f);
    f->futex_result = res;
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
    agg_wake(f);
}

void agg_futex_timer_done(struct agg_carrier *c, struct agg_timer *t, long res)
{
    (void)res;
    struct agg_fiber *f = t->fiber;
    if (f) {
        f->timer = 0;
        release(c, f, -ETIMEDOUT);
    }
    agg_free(t);
}

static long wait(struct agg_fiber *f, struct ferry_regs *r, int cmd)
{
    struct agg_carrier *c = f->carrier;
    uint32_t *uaddr = (uint32_t *)r->rdi;
    uint32_t mask = cmd == FUTEX_WAIT_BITSET ? (uint32_t)r->r9 : ~0u;
    if (!mask || ((unsigned long)uaddr & 3))
        return -AGG_EINVAL;
    struct __kernel_timespec ts;
    int timed = r->r10 != 0;
    if (timed) {
        if (ferry_safe_read(&ts, (void *)r->r10, sizeof(ts)) != sizeof(ts))
            return -EFAULT;
        if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)
            return -AGG_EINVAL;
    }
    uint32_t cur;
    if (ferry_safe_read(&cur, uaddr, 4) != 4)
        return -EFAULT;
    if (cur != (uint32_t)r->rdx)
        return -AGG_EAGAIN;
    if (timed && cmd == FUTEX_WAIT && ts.tv_sec == 0 && ts.tv_nsec == 0)
        return -ETIMEDOUT;
    struct agg_timer *t = 0;
    if (timed) {
        t = agg_calloc(1, sizeof(*t));
        if (!t)
            return -AGG_ENOMEM;
        t->fiber = f;
        t->ts = ts;
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
    f->futex_addr = uaddr;
    f->futex_val = (uint32_t)r->rdx;
    f->futex_mask = mask;
    f->timer = t;
    f->prev = 0;
    f->next = c->fwait;
    if (c->fwait)
        c->fwait->prev = f;
    c->fwait = f;
    c->nfwait++;
    agg_park(f);
    return f->futex_result;
}

static long wake(struct agg_fiber *f, struct ferry_regs *r, int cmd)
{
    struct agg_carrier *c = f->carrier;
    uint32_t *uaddr = (uint32_t *)r->rdi;
    uint32_t mask = cmd == FUTEX_WAKE_BITSET ? (uint32_t)r->r9 : ~0u;
    if (!mask)
        return -AGG_EINVAL;
    long n = (int)r->rdx;
    if (n < 0)
        n = 0x7fffffff;
    long woken = 0;
    for (struct agg_fiber *w = c->fwait, *next; w && woken < n; w = next) {
        next = w->next;
        if (w->futex_addr == uaddr && (w->futex_mask & mask)) {
            release(c, w, 0);
            woken++;
        }
    }
    if (woken >= n && n > 0)
        return woken;
    agg_stat(c->g, AGG_ST(native), 1);
    agg_stat(c->g, AGG_ST(crossings), 1);
    long k = ferry_pass6(SYS_futex, r->rdi, r->rsi, n - woken, r->r10, r->r8, r->r9);
    if (k < 0)
        return woken ? woken : k;
    return woken + k;
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
        f->carrier->worker_pending++;
        agg_worker_queue(g, &req);
        agg_park(f);
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
void agg_futex_wake_all(struct agg_carrier *c, void *addr)
{
    for (struct agg_fiber *w = c->fwait, *next; w; w = next) {
        next = w->next;
        if (w->futex_addr == addr)
            release(c, w, 0);
    }
}

/* A signal for a fiber parked on a futex: the wait ends with EINTR. */
int agg_futex_interrupt(struct agg_fiber *f)
{
    if (!f->futex_addr)
        return 0;
    release(f->carrier, f, -EINTR);
    return 1;
}

/* Wake the waiters whose word no longer holds the value they waited on. */
void agg_futex_recheck(struct agg_carrier *c)
{
    for (struct agg_fiber *w = c->fwait, *next; w; w = next) {
        next = w->next;
        /* a plain load: the word was readable when the fiber began to wait
         * on it, and a system call per waiter per recheck would cost the
         * carrier more than the wait saves (hundreds of idle pool threads) */
        if (__atomic_load_n(w->futex_addr, __ATOMIC_ACQUIRE) != w->futex_val)
            release(c, w, 0);
    }
}

/* Nothing in flight, no fiber ready: only a waker outside the carrier can
 * help; wait in the kernel on the words the fibers wait on. */
void agg_futex_idle(struct agg_carrier *c)
{
    struct {
        uint64_t val, uaddr;
        uint32_t flags, reserved;
    } wv[128];
    unsigned n = 0;
    for (struct agg_fiber *w = c->fwait; w && n < 128; w = w->next) {
        wv[n].val = w->futex_val;
        wv[n].uaddr = (uint64_t)(uintptr_t)w->futex_addr;
        wv[n].flags = FUTEX2_SIZE_U32 | FUTEX2_PRIVATE;
        wv[n].reserved = 0;
        n++;
    }
    if (!n) {
        /* every fiber waits for another (a deadlock of the program, as with
         * threads): sleep rather than spin */
        struct __kernel_timespec ts = {0, 10000000};
        ferry_raw2(SYS_nanosleep, &ts, 0);
        return;
    }
    long k = ferry_raw6(SYS_futex_waitv, (long)wv, n, 0, 0, 0, 0);
    if (k >= 0 && (unsigned long)k < n) {
        uint32_t *addr = (uint32_t *)(uintptr_t)wv[k].uaddr;
        for (struct agg_fiber *w = c->fwait, *next; w; w = next) {
            next = w->next;
            if (w->futex_addr == addr)
                release(c, w, 0);
        }
    }
    agg_futex_recheck(c);
}
