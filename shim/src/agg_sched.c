/* Carriers: a thread that runs fibers.  The scheduler runs ready fibers in
 * rounds; a fiber that makes a routed call writes it to a ring (or a
 * worker's queue) and parks.  Only when no fiber is ready do the stored
 * calls leave, all in one io_uring_enter, and the carrier waits as the
 * pool's wait policy says.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "sandbox.h"
#include "store.h"
#include "util.h"

#define ADAPT_WINDOW_NS 20000ULL    /* adaptive: the longest a completion may be held back */
#define FUTEX_RECHECK_NS 1000000ULL /* fibers on futexes, threads outside: look at the words this often */
#define FUTEX_SAFETY_NS 10000000ULL /* ... no threads outside: at most this often */
#define NONE_SPIN 4000              /* wait=none: polls of the CQ before waiting for one */
#define URGENT_MIN 64               /* urgent calls a round allows at least (else: its fibers) */
#define PASS_OVER_NS 4000000ULL     /* how long after its tick a computing fiber may be passed
                                       over for fibers whose calls completed (the kernel's tick
                                       at 250 Hz, which is how long its turn may then be) */

void agg_stacks_release(struct agg_carrier *c);

/* ---- the replaceable part: which ready fiber runs next ------------------ */

/* First come, first run: the run queue of agg_runq.c, which other carriers
 * may take ready fibers from. */
static void rr_push(struct agg_carrier *c, struct agg_fiber *f) { agg_rq_push(c, f); }

static struct agg_fiber *rr_pick(struct agg_carrier *c) { return agg_rq_pick(c); }

static void rr_push_first(struct agg_carrier *c, struct agg_fiber *f) { agg_rq_push_first(c, f); }

const struct agg_sched_ops agg_sched_round_robin = {"round-robin", rr_push, rr_pick, rr_push_first};

/* ---- time ---------------------------------------------------------------- */

uint64_t agg_now_ns(void)
{
    /* ns = tsc * mult >> 32, mult from the store's calibration: no division */
    static uint64_t mult;
    struct ferry_proc_header *h = ferry_hdr;
    if (!mult && h && h->cal_tsc && h->cal_ns)
        mult = (uint64_t)(((unsigned __int128)h->cal_ns << 32) / h->cal_tsc);
    if (mult)
        return (uint64_t)(((unsigned __int128)ferry_rdtsc() * mult) >> 32);
    return ferry_mono_ns();
}

/* ---- parking ------------------------------------------------------------- */

/* Once queued, f may run on another carrier at once: nothing here touches
 * f (or what lives on its stack) after this. */
void agg_wake(struct agg_fiber *f)
{
    f->state = AGG_READY;
    f->carrier->ops->push(f->carrier, f);
}

/* Straight to the next fiber of this round when there is one (one switch
 * instead of two through the scheduler); the scheduler runs when the round
 * is over, to submit what the round wrote and to wait. */
static void submit_all(struct agg_carrier *c);

/* A completion, a post from another carrier, a worker's result. */
static int came_in(struct agg_carrier *c)
{
    if (__atomic_load_n(&c->inbox, __ATOMIC_RELAXED) || __atomic_load_n(&c->done_list, __ATOMIC_RELAXED))
        return 1;
    for (unsigned i = 0; i < c->g->cfg.npools; i++)
        if (io_uring_cq_ready(&c->pools[i].ring))
            return 1;
    return 0;
}

/* Natively a thread whose call completes runs at once on a CPU of its own,
 * or preempts one that computes.  Here a fiber that computes keeps its
 * carrier until its tick (4 ms at 250 Hz) once it runs: so when the calls
 * this round just submitted have completed (a reply on a socket pair, a
 * wake), their fibers run first, the scheduler reaping them before `n`
 * goes behind them (as after its tick: run()).  Only for a while after its
 * tick, so that fibers handing work back and forth cannot starve it. */
static int pass_over(struct agg_carrier *c, struct agg_fiber *n)
{
    if (!came_in(c) || agg_now_ns() - n->computed_at >= PASS_OVER_NS)
        return 0;
    c->requeue = n;
    c->preempted = 1;
    c->round_left = 0;
    return 1;
}

void agg_park(struct agg_fiber *f)
{
    struct agg_carrier *c = f->carrier;
    struct agg_fiber *n;
    if (f->movable) {
        /* the carrier f was on may be reading `state` for a signal it sent:
         * one of the two sees the other (agg_threads_signalled) */
        __atomic_store_n(&f->state, AGG_PARKED, __ATOMIC_SEQ_CST);
    } else {
        f->state = AGG_PARKED;
    }
    /* a signal that came while it ran or was ready ends the call at once,
     * as it would end a thread's before the thread slept (never queued
     * from here: f is still on its stack) */
    if (f->thread && !f->suspended &&
        (__atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~(f->sigmask & ~f->waitset))) {
        if (!f->futex_addr) {
            agg_interrupt(f);
        } else if (!f->interrupted && agg_futex_abandon(f)) {
            f->interrupted = 1;
            f->state = AGG_RUNNING;
            return;
        }
    }
    if (f->thread)
        agg_thread_leaving(f);
    /* an urgent call goes through the scheduler, which submits and reaps it */
    f->computes = 0;
    if (c->round_left && !c->urgent && (n = c->ops->pick(c))) {
        c->round_left--;
        if (n->computes) {
            submit_all(c);  /* it may keep the carrier until its tick: so would these */
            if (pass_over(c, n)) {
                c->current = 0;
                agg_cpu_turn(c, f);
                ferry_agg_switch(&f->ctx, &c->sched);
                if (f->thread)
                    agg_thread_resumed(f);
                return;
            }
        }
        agg_cpu_turn(c, f);  /* before n is the current one: a read of n's clock adds from the mark */
        c->current = n;
        n->state = AGG_RUNNING;
        c->acc_switches++;
        c->runs++;
        ferry_agg_switch(&f->ctx, &n->ctx);
    } else {
        c->current = 0;
        agg_cpu_turn(c, f);
        ferry_agg_switch(&f->ctx, &c->sched);
    }
    if (f->thread)
        agg_thread_resumed(f);
}

/* A fiber that may move must be off its stack before it is queued (a thief
 * would run it from a context not yet saved): the scheduler queues it. */
static void requeue_me(struct agg_fiber *f)
{
    struct agg_carrier *c = f->carrier;
    f->state = AGG_PARKED;
    c->requeue = f;
    c->current = 0;
    agg_cpu_turn(c, f);
    ferry_agg_switch(&f->ctx, &c->sched);
    if (f->thread)
        agg_thread_resumed(f);
}

void agg_yield(struct agg_fiber *f)
{
    if (!f->movable) {
        agg_wake(f);
        agg_park(f);
        return;
    }
    if (f->thread)
        agg_thread_leaving(f);
    requeue_me(f);
}

/* From the tick (agg_signal.c): f computes and keeps others waiting.  It
 * goes behind them through the scheduler, which reaps first (run()), so
 * that what the reap wakes runs before it; fiber 0 too. */
void agg_preempt(struct agg_fiber *f)
{
    struct agg_carrier *c = f->carrier;
    c->round_left = 0;
    c->preempted = 1;
    f->computes = 1;
    f->computed_at = agg_now_ns();
    requeue_me(f);
}

/* ---- posts from other carriers ------------------------------------------ */

/* Wake a carrier that may be sleeping: it set `sleeping` before it last
 * looked at its inbox, and the post came after that look. */
/* The kick word is a futex: a waiter in futex_waitv has it among its words,
 * and one in io_uring_enter has an IORING_OP_FUTEX_WAIT on it in its ring
 * (no descriptor to lose).  Kernels without that operation get an eventfd. */
static int kick_by_futex(const struct agg_carrier *c) { return c->g->op_ok[AGG_OP_FUTEX_WAIT]; }

void agg_rouse(struct agg_carrier *c)
{
    if (!kick_by_futex(c) && c->efd >= 0) {
        uint64_t one = 1;
        ferry_raw3(SYS_write, c->efd, &one, sizeof(one));
        return;
    }
    __atomic_add_fetch(&c->kick, 1, __ATOMIC_SEQ_CST);
    ferry_raw6(SYS_futex, (long)&c->kick, 129 /* FUTEX_WAKE_PRIVATE */, 0x7fffffff, 0, 0, 0);
}

/* Wake a carrier that may be sleeping: it set `sleeping` before it last
 * looked at its inbox, and the post came after that look. */
void agg_kick(struct agg_carrier *c)
{
    switch (__atomic_load_n(&c->sleeping, __ATOMIC_SEQ_CST)) {
    case AGG_SLEEP_RING:
        agg_rouse(c);
        break;
    case AGG_SLEEP_FUTEX:
        __atomic_add_fetch(&c->kick, 1, __ATOMIC_SEQ_CST);
        ferry_raw6(SYS_futex, (long)&c->kick, 129 /* FUTEX_WAKE_PRIVATE */, 0x7fffffff, 0, 0, 0);
        break;
    }
}

/* f's carrier once f is linked in its inbox, 0 when it already was (the
 * carrier reads every bit).  Read after the bit is set: f cannot move on
 * unnoticed from then (a carrier it left sends its posts on). */
static struct agg_carrier *link_post(struct agg_fiber *f, unsigned what)
{
    if (__atomic_fetch_or(&f->posted, what, __ATOMIC_SEQ_CST))
        return 0;
    struct agg_carrier *c = __atomic_load_n(&f->carrier, __ATOMIC_ACQUIRE);
    struct agg_fiber *old = __atomic_load_n(&c->inbox, __ATOMIC_RELAXED);
    do
        f->post_next = old;
    while (!__atomic_compare_exchange_n(&c->inbox, &old, f, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return c;
}

int agg_post_quiet(struct agg_fiber *f, unsigned what) { return link_post(f, what) != 0; }

void agg_post(struct agg_fiber *f, unsigned what)
{
    struct agg_carrier *c = link_post(f, what);  /* f may be gone once posted */
    if (c)
        agg_kick(c);
}

/* f, in this carrier's inbox, has moved to `to`: its posts follow it (its
 * bits stay set, so no one else links it meanwhile, and it is not freed). */
static void forward(struct agg_fiber *f, struct agg_carrier *to)
{
    struct agg_fiber *old = __atomic_load_n(&to->inbox, __ATOMIC_RELAXED);
    do
        f->post_next = old;
    while (!__atomic_compare_exchange_n(&to->inbox, &old, f, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    int running = __atomic_load_n(&to->current, __ATOMIC_ACQUIRE) == f;
    agg_kick(to);
    if (running && (__atomic_load_n(&f->posted, __ATOMIC_ACQUIRE) & AGG_POST_SIGNAL))
        agg_signal_kick(to);
}

/* A fiber joins c (on c). */
void agg_count_fiber(struct agg_carrier *c)
{
    unsigned alive = __atomic_add_fetch(&c->alive, 1, __ATOMIC_ACQ_REL);
    agg_stat_carrier(c, 1, 0, 0, 0);
    if (alive > c->peak) {
        c->peak = alive;
        agg_stat_carrier_peak(c);
    }
}

/* A fiber's posts are taken under AGG_POST_HELD: while the word is not 0
 * the fiber is neither linked again (a new post only adds its bit, seen
 * when the hold is let go) nor freed (a thread that ends meanwhile leaves
 * AGG_POST_DEAD, and its struct, to whoever holds it).  A fiber that moved
 * to another carrier has its bits sent on to that carrier's inbox. */
static void send_on(struct agg_fiber *f, unsigned bits)
{
    __atomic_or_fetch(&f->posted, bits, __ATOMIC_ACQ_REL);
    __atomic_and_fetch(&f->posted, ~AGG_POST_HELD, __ATOMIC_ACQ_REL);
    forward(f, __atomic_load_n(&f->carrier, __ATOMIC_ACQUIRE));
}

static void take_posts(struct agg_carrier *c, struct agg_fiber *f)
{
    for (;;) {
        unsigned what = __atomic_exchange_n(&f->posted, AGG_POST_HELD, __ATOMIC_ACQ_REL) & ~AGG_POST_HELD;
        if (what & AGG_POST_DEAD) {
            agg_thread_free(f);
            return;
        }
        if (__atomic_load_n(&f->carrier, __ATOMIC_ACQUIRE) != c) {
            send_on(f, what);
            return;
        }
        if (what & AGG_POST_NEW) {
            agg_count_fiber(c);
            agg_wake(f);
        }
        if (what & AGG_POST_FUTEX)
            agg_futex_woken(c, f);
        if ((what & AGG_POST_SIGNAL) && agg_threads_signalled(c, f)) {
            /* it moved after it was looked at, and parked on another carrier */
            send_on(f, AGG_POST_SIGNAL);
            return;
        }
        unsigned held = AGG_POST_HELD;
        if (__atomic_compare_exchange_n(&f->posted, &held, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;
        /* more came while it was held */
    }
}

void agg_inbox_drain(struct agg_carrier *c)
{
    struct agg_fiber *f = __atomic_exchange_n(&c->inbox, 0, __ATOMIC_SEQ_CST);
    while (f) {
        /* read before the bits are taken: a new post may link f again */
        struct agg_fiber *next = f->post_next;
        take_posts(c, f);
        f = next;
    }
}

void agg_fiber_finish(struct agg_fiber *f)
{
    struct agg_carrier *c = f->carrier;
    f->state = AGG_DONE;
    __atomic_sub_fetch(&c->alive, 1, __ATOMIC_ACQ_REL);
    if (f->joiner)
        agg_wake(f->joiner);
    c->finished = f;  /* the scheduler releases it, off its stack */
    c->current = 0;
    ferry_agg_switch(&f->ctx, &c->sched);
    __builtin_unreachable();
}

/* ---- rings ----------------------------------------------------------------- */

/* After the SQ was flushed (agg_ring_enter): `queued` counts calls only,
 * not the engine's own operations.  A crossing is counted only when the
 * kernel was entered; its batch is every call flushed since the last one
 * (with SQPOLL the thread takes most of them without an enter). */
static void note_enter(struct agg_carrier *c, unsigned pool, int entered)
{
    struct ferry_group *g = c->g;
    struct agg_pool_run *pr = &c->pools[pool];
    unsigned submitted = pr->queued;
    pr->queued = 0;
    if (submitted)
        agg_stat_pool(g, pool, AGG_PST(submitted), submitted);
    pr->unentered += submitted;
    if (!entered && !submitted)
        return;
    /* the last eight submissions weigh most: a load that grows shows in a few */
    c->batch_avg16 = c->batch_avg16 - c->batch_avg16 / 8 + submitted * 2;
    if (!entered)
        return;
    agg_stat_pool(g, pool, AGG_PST(enters), 1);
    agg_stat(g, AGG_ST(crossings), 1);
    c->acc_crossings++;
    if (pr->unentered)
        agg_stat_batch(g, pool, pr->unentered);
    pr->unentered = 0;
    agg_stat_pool(g, pool, AGG_PST(depth_sum), pr->inflight);
    agg_stat_max_depth(g, pool, pr->inflight);
}

static void submit_nowait(struct agg_carrier *c, unsigned pool)
{
    struct io_uring *ring = &c->pools[pool].ring;
    if (!io_uring_sq_ready(ring))
        return;
    note_enter(c, pool, agg_ring_enter(ring, 0, 0, 0));
}

void agg_sqe_room(struct agg_carrier *c, unsigned pool, unsigned n)
{
    if (io_uring_sq_space_left(&c->pools[pool].ring) < n)
        submit_nowait(c, pool);
}

struct io_uring_sqe *agg_sqe(struct agg_carrier *c, unsigned pool)
{
    struct io_uring_sqe *sqe;
    while (!(sqe = io_uring_get_sqe(&c->pools[pool].ring)))
        submit_nowait(c, pool);
    return sqe;
}

static void complete(struct agg_carrier *c, unsigned pool, struct io_uring_cqe *cqe)
{
    uint64_t ud = cqe->user_data;
    void *p = (void *)(uintptr_t)(ud & ~AGG_TAG_MASK);
    switch (ud & AGG_TAG_MASK) {
    case AGG_TAG_REQ: {
        struct agg_req *req = p;
        req->result = agg_fixup(req->nr, req->args, req, cqe->res);
        req->done_tsc = ferry_rdtsc();
        req->cflags = cqe->flags;
        req->done = 1;
        c->pools[pool].inflight--;
        c->acc_completed[pool]++;
        c->acc_aggregated++;
        if (req->urgent) {
            /* its fiber runs next, in this round: it has more of the same to do */
            struct agg_fiber *f = req->fiber;
            f->state = AGG_READY;
            c->ops->push_first(c, f);
            if (c->round_left)
                c->round_left++;
        } else {
            agg_wake(req->fiber);
        }
        break;
    }
    case AGG_TAG_WAKE:
    case AGG_TAG_EFD:
        c->pools[pool].misc--;
        if ((ud & AGG_TAG_MASK) == AGG_TAG_WAKE) {
            c->kick_armed = 0;
            /* before looking: a rouse from here on changes the word, and
             * the next wait armed with this value ends at once */
            c->kick_seen = __atomic_load_n(&c->kick, __ATOMIC_SEQ_CST);
        } else {
            c->efd_armed = 0;
            if (cqe->res < 0)
                c->has_efd = 0;  /* never re-armed to fail again at once */
        }
        agg_carrier_drain(c);
        agg_inbox_drain(c);
        break;
    case AGG_TAG_TIMER:
        c->pools[pool].misc--;
        agg_futex_timer_done(p);
        break;
    default:
        c->pools[pool].misc--;
        break;
    }
}

/* The request the completion at `i` names, or NULL for the engine's own
 * operations. */
static struct agg_req *req_at(struct io_uring *ring, unsigned i)
{
    uint64_t ud = ring->cq.cqes[io_uring_cqe_index(ring, i, ring->cq.ring_mask)].user_data;
    return (ud & AGG_TAG_MASK) == AGG_TAG_REQ ? (struct agg_req *)(uintptr_t)(ud & ~AGG_TAG_MASK) : 0;
}

/* Completions already in the CQ rings: no kernel crossing.  Each request
 * lies on its parked fiber's stack, and the fiber it wakes elsewhere: with
 * a thousand fibers both are cache misses (and TLB misses: a stack's page
 * each), which were most of the time a completion took.  They are asked
 * for ahead, the requests two completions on, the fiber of the next one
 * (its request asked for a completion ago). */
static unsigned reap(struct agg_carrier *c, unsigned pool)
{
    struct io_uring *ring = &c->pools[pool].ring;
    unsigned head = *ring->cq.khead, mask = ring->cq.ring_mask, n = 0;
    unsigned tail = io_uring_smp_load_acquire(ring->cq.ktail);
    for (; head != tail; head++) {
        struct agg_req *later = tail - head > 2 ? req_at(ring, head + 2) : 0;
        struct agg_req *next = tail - head > 1 ? req_at(ring, head + 1) : 0;
        if (later) {
            __builtin_prefetch(later, 1);
            __builtin_prefetch((char *)later + 64, 1);
        }
        if (next)
            __builtin_prefetch(next->fiber, 1);
        complete(c, pool, &ring->cq.cqes[io_uring_cqe_index(ring, head, mask)]);
        n++;
    }
    if (n) {
        io_uring_cq_advance(ring, n);
        c->pools[pool].done += n;
    }
    return n;
}

static void flush_stats(struct agg_carrier *c);

/* At a round's start.  A carrier whose fibers keep it busy never waits,
 * where its figures go to the area: what its rounds completed goes there
 * from here too, so that the figures read while it runs are current. */
static void reap_all(struct agg_carrier *c)
{
    for (unsigned i = 0; i < c->g->cfg.npools; i++)
        reap(c, i);
    if (c->acc_aggregated)
        flush_stats(c);
}

static void submit_all(struct agg_carrier *c)
{
    for (unsigned i = 0; i < c->g->cfg.npools; i++)
        submit_nowait(c, i);
}

/* What came from elsewhere, and what completed: posts of other carriers,
 * workers' results (the wake they rouse is only armed while the carrier
 * waits, and one that never waits, a fiber computing between ticks, must
 * still resume their fibers), the rings' completions. */
static void take_in(struct agg_carrier *c)
{
    if (__atomic_load_n(&c->inbox, __ATOMIC_RELAXED))
        agg_inbox_drain(c);
    if (__atomic_load_n(&c->done_list, __ATOMIC_RELAXED))
        agg_carrier_drain(c);
    reap_all(c);
}

/* From the tick, in the context of a fiber that computes (never inside the
 * shim): the calls its round wrote go to the kernel now, not when it
 * yields; then, whether anything else waits for the carrier: a ready fiber,
 * a completion, a post, a worker's result.  Completions are in the CQ by
 * then: the signal's delivery ran the task work that posts them. */
int agg_others_waiting(struct agg_carrier *c)
{
    submit_all(c);
    return !agg_rq_empty(c) || came_in(c);
}

static void arm_wake(struct agg_carrier *c)
{
    if (kick_by_futex(c) && !c->kick_armed) {
        struct io_uring_sqe *sqe = agg_sqe(c, 0);
        /* io_uring_prep_futex_wait (liburing 2.5): fd = FUTEX2 flags,
         * off = the value, addr3 = the mask */
        io_uring_prep_rw(AGG_OP_FUTEX_WAIT, sqe, 2 /* FUTEX2_SIZE_U32 */ | 128 /* FUTEX2_PRIVATE */,
                         &c->kick, 0, c->kick_seen);
        sqe->addr3 = 0xffffffffULL;  /* FUTEX_BITSET_MATCH_ANY */
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | AGG_TAG_WAKE);
        c->kick_armed = 1;
        c->pools[0].misc++;
    }
    if (c->has_efd && !c->efd_armed) {
        struct io_uring_sqe *sqe = agg_sqe(c, 0);
        io_uring_prep_read(sqe, 0, &c->efd_buf, sizeof(c->efd_buf), (uint64_t)-1);
        sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | AGG_TAG_EFD);
        c->efd_armed = 1;
        c->pools[0].misc++;
    }
}

/* How many completions to wait for on `pool`, and for how long at most
 * (0: no limit), as its policy says. */
static unsigned policy(struct agg_carrier *c, unsigned pool, uint64_t *timeout_ns)
{
    const struct ferry_pool_config *pc = &c->g->cfg.pools[pool];
    struct agg_pool_run *pr = &c->pools[pool];
    unsigned inflight = pr->inflight ? pr->inflight : 1;
    *timeout_ns = 0;
    switch (pc->wait) {
    case FERRY_WAIT_SOME: {
        unsigned want = pc->wait_limit < inflight ? pc->wait_limit : inflight;
        *timeout_ns = pc->wait_timeout_ns;
        return want;
    }
    case FERRY_WAIT_ALL:
        return inflight;
    case FERRY_WAIT_ADAPTIVE: {
        /* Hold completions back only when the measured rate says more of
         * them will come within a short window: at low load (one call in
         * flight, or a slow trickle) this is WaitAny, never a wait for a
         * batch that will not fill. */
        if (inflight <= 1)
            return 1;
        uint64_t expected = pr->rate * ADAPT_WINDOW_NS / 1000000ULL;
        if (expected < 2)
            return 1;
        *timeout_ns = ADAPT_WINDOW_NS;
        return expected < inflight ? (unsigned)expected : inflight;
    }
    default:
        return 1;
    }
}

/* The adaptive policy's rate: completions per ms of wall time, wherever
 * they were reaped, over spans of a window at least.  Completions per ms
 * spent waiting overstated it: a call that completed 2 us into its wait
 * read as 500 a ms, and at one connection the carrier then held a
 * completion back for a second one that never came (the listener's accept
 * is in flight all the time), a timed wait of ~50 us a request. */
static void sample_rate(struct agg_pool_run *pr, uint64_t now)
{
    uint64_t span = now - pr->rate_at;
    if (span < ADAPT_WINDOW_NS)
        return;
    if (pr->rate_at) {
        uint64_t sample = (uint64_t)pr->done * 1000000ULL / span;
        pr->rate = (pr->rate * 3 + sample) / 4;
    }
    pr->rate_at = now;
    pr->done = 0;
}

static void wait_ring(struct agg_carrier *c, unsigned pool, unsigned min, uint64_t timeout_ns)
{
    struct agg_pool_run *pr = &c->pools[pool];
    struct io_uring *ring = &pr->ring;
    uint64_t t0 = agg_now_ns();
    int entered = agg_ring_enter(ring, min, timeout_ns, c->g->ext_arg);
    uint64_t now = agg_now_ns();
    note_enter(c, pool, entered);
    agg_stat_pool(c->g, pool, AGG_PST(wait_ns), now - t0);
    reap(c, pool);
    sample_rate(pr, now);
}

static int anything_ready(struct agg_carrier *c) { return !agg_rq_empty(c); }

/* With no fiber ready the carrier is about to wait: when that wait is one
 * io_uring_enter that submits what the round stored and waits for one
 * completion, a submit of its own first would only add a crossing (at low
 * load, one per call).  That is so when one pool at most has work (a
 * profile's other pools may stay empty: net.toml's files and waits under a
 * Linux server) and its policy waits for one.  Under load (the policy waits
 * for more than one) the round's own submit stays: what completes at once
 * runs without a wait. */
static int wait_submits(struct agg_carrier *c)
{
    if (c->worker_pending)
        return 0;
    unsigned active = 0, which = 0;
    for (unsigned i = 0; i < c->g->cfg.npools; i++) {
        struct agg_pool_run *pr = &c->pools[i];
        if (pr->inflight || pr->misc || (pr->up && io_uring_sq_ready(&pr->ring)))
            active++, which = i;
    }
    uint64_t timeout;
    return active <= 1 && c->g->cfg.pools[which].wait != FERRY_WAIT_NONE &&
           policy(c, which, &timeout) == 1;
}

static void flush_stats(struct agg_carrier *c)
{
    struct ferry_group *g = c->g;
    uint64_t done = 0;
    for (unsigned i = 0; i < g->cfg.npools; i++)
        done += c->acc_completed[i];
    agg_stat_carrier(c, 0, c->acc_switches, c->acc_crossings, done);
    c->acc_crossings = 0;
    if (c->acc_switches)
        agg_stat(g, AGG_ST(switches), c->acc_switches);
    if (c->acc_aggregated)
        agg_stat(g, AGG_ST(aggregated), c->acc_aggregated);
    for (unsigned i = 0; i < g->cfg.npools; i++)
        if (c->acc_completed[i]) {
            agg_stat_pool(g, i, AGG_PST(completed), c->acc_completed[i]);
            c->acc_completed[i] = 0;
        }
    c->acc_switches = c->acc_aggregated = 0;
}

/* exit_group from a fiber: what its carrier counted since it last waited
 * (the last batch's completions) goes to the file before the process ends. */
FERRY_HOT_TEXT void agg_exit_flush(void)
{
    struct agg_fiber *f = agg_self;
    if (f && f->carrier)
        flush_stats(f->carrier);
}

/* After a wait: fibers whose futex word changed with no wake the engine
 * saw.  With threads outside the engine, after every wait.  Without, such a
 * wake can only come from a fiber's native section (ld.so's locks while it
 * makes thread blocks): looked for every FUTEX_SAFETY_NS, which the signal
 * look's wait limit already wakes a carrier of threads for. */
static void look_at_words(struct agg_carrier *c, int outside)
{
    if (!c->nfwait)
        return;
    if (!outside) {
        uint64_t now = agg_now_ns();
        if (now - c->words_seen_ns < FUTEX_SAFETY_NS)
            return;
        c->words_seen_ns = now;
    }
    agg_futex_recheck(c);
}

/* Whether a program's filters (sandbox.h) refuse the engine its rings:
 * what it asks for each call it would route, and before each wait. */
int agg_ring_refused(void)
{
    return ferry_sandbox_on && !ferry_sandbox_lets(SYS_io_uring_enter, 0, 1, 1, IORING_ENTER_GETEVENTS, 0, 0);
}

/* No fiber is ready: every stored call leaves now, and the carrier waits. */
#define SANDBOX_WAIT_NS 1000000ULL

static void wait_for_events(struct agg_carrier *c)
{
    flush_stats(c);
    agg_threads_idle(c);
    unsigned np = c->g->cfg.npools;
    /* other carriers post to this one (agg_post): its wait must end then */
    int posts = __atomic_load_n(&c->g->carriers, __ATOMIC_RELAXED) > 1;
    if (posts)
        arm_wake(c);
    int others = 0;
    for (unsigned i = 1; i < np; i++)
        others |= c->pools[i].inflight || c->pools[i].misc || io_uring_sq_ready(&c->pools[i].ring);
    if (c->worker_pending || others)
        arm_wake(c);
    int busy0 = c->pools[0].inflight || c->pools[0].misc || io_uring_sq_ready(&c->pools[0].ring);
    uint64_t limit = agg_threads_wait_limit(c);
    /* A program whose filters refuse the ring (sandbox.h) has put nothing
     * in it, and a wait there is refused at once: the carrier spun a CPU
     * for as long as a fiber waited on a worker (a process-shared futex).
     * It waits on its kick word instead, a millisecond at most, after
     * which it looks at what the workers finished. */
    if (agg_ring_refused()) {
        agg_futex_idle(c, limit && limit < SANDBOX_WAIT_NS ? limit : SANDBOX_WAIT_NS);
        look_at_words(c, agg_outside_wakers(c));
        agg_threads_take_signals(c);
        return;
    }
    if (!busy0 && !others && !c->worker_pending) {
        agg_futex_idle(c, limit);
        look_at_words(c, agg_outside_wakers(c));
        agg_threads_take_signals(c);
        return;
    }
    /* One pool at work: wait on it by its policy.  Several (or workers):
     * submit them all and wait on pool 0, where the wake read sits. */
    unsigned wp = 0;
    unsigned min = 1;
    int recheck = c->nfwait && agg_outside_wakers(c);
    uint64_t timeout = 0;
    int by_policy = 0;
    if (!others && !c->worker_pending) {
        min = policy(c, 0, &timeout);
        by_policy = 1;
    } else if (!busy0 && !c->worker_pending) {
        unsigned active = 0, which = 0;
        for (unsigned i = 1; i < np; i++)
            if (c->pools[i].inflight || c->pools[i].misc || io_uring_sq_ready(&c->pools[i].ring))
                active++, which = i;
        if (active == 1) {
            wp = which;
            min = policy(c, wp, &timeout);
            by_policy = 1;
        }
    }
    for (unsigned i = 0; i < np; i++)
        if (i != wp)
            submit_nowait(c, i);
    if (by_policy && c->g->cfg.pools[wp].wait == FERRY_WAIT_NONE) {
        /* NoWait: submit, then poll the CQ for a while before blocking. */
        submit_nowait(c, wp);
        for (int i = 0; i < NONE_SPIN; i++) {
            if (reap(c, wp))
                break;
            __asm__ volatile("pause");
        }
        if (anything_ready(c))
            goto done;
        min = 1;
    }
    if (recheck && (!timeout || timeout > FUTEX_RECHECK_NS))
        timeout = FUTEX_RECHECK_NS;
    if (limit && (!timeout || timeout > limit))
        timeout = limit;
    if (posts) {
        __atomic_store_n(&c->sleeping, AGG_SLEEP_RING, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&c->inbox, __ATOMIC_SEQ_CST) || agg_steal_ready(c))
            min = 0;  /* something came meanwhile: submit, reap, do not wait */
    }
    wait_ring(c, wp, min, timeout);
    __atomic_store_n(&c->sleeping, 0, __ATOMIC_RELAXED);
done:
    if (wp != 0)
        reap(c, 0);
    for (unsigned i = 1; i < np; i++)
        if (i != wp)
            reap(c, i);
    look_at_words(c, recheck);
    agg_threads_take_signals(c);
}

/* The scheduler runs on whatever thread pointer the last fiber left (one
 * wrfsbase per fiber switch instead of two; its own code touches no TLS).
 * The carrier's own block is restored before anything that may use TLS
 * (freeing a fiber's block, leaving). */
void agg_carrier_tls(struct agg_carrier *c)
{
    if (ferry_tp() == c->tp)
        return;
    if (ferry_agg_fsgsbase > 0)
        __asm__ volatile("wrfsbase %0" ::"r"(c->tp) : "memory");
    else
        ferry_raw2(SYS_arch_prctl, 0x1002 /* ARCH_SET_FS */, c->tp);
}

/* A fiber that left the carrier still ready (preempted by its tick, or
 * passed over: requeue_me, pass_over) goes back in the queue, behind what
 * its computing kept waiting. */
static void requeue_pending(struct agg_carrier *c)
{
    if (!c->requeue)
        return;
    struct agg_fiber *y = c->requeue;
    c->requeue = 0;
    if (c->preempted) {
        c->preempted = 0;
        take_in(c);
    }
    agg_wake(y);
}

/* The fiber that finished last, once the scheduler is off its stack. */
static void release_finished(struct agg_carrier *c)
{
    struct agg_fiber *f = c->finished;
    c->finished = 0;
    if (f) {
        if (f->thread) {
            /* off the thread's block first: once its tid word is cleared a
             * joiner on another carrier may reuse or unmap it */
            agg_carrier_tls(c);
            agg_thread_finished(c, f);
        } else if (f->joined < 0) {
            agg_carrier_tls(c);
            agg_fiber_free(c, f);
        } else {
            f->next = c->dead;
            f->prev = 0;
            if (c->dead)
                c->dead->prev = f;
            c->dead = f;
        }
    }
}

static void run(struct agg_carrier *c, struct agg_fiber *f)
{
    agg_cpu_turn(c, 0);
    c->current = f;
    f->state = AGG_RUNNING;
    c->acc_switches++;
    c->runs++;
    ferry_agg_switch(&c->sched, &f->ctx);
    /* back here from whichever fiber of the round parked last or finished.
     * Not on a thread block of a fiber that may move from here on: it may
     * run on another carrier with that block while this one goes on. */
    if (c->steal_slot >= 0 && agg_steal_on())
        agg_carrier_tls(c);
    requeue_pending(c);
    c->current = 0;
    release_finished(c);
}

void agg_carrier_loop(struct agg_carrier *c)
{
    for (;;) {
        /* The scheduler's first turn starts here, not after a switch in
         * run(): a fiber that left it through requeue_me (the program's
         * first thread, preempted while it spun on a flag another thread
         * was to set) waited there unqueued, and the next fiber requeued
         * took its place: the first thread never ran again (a hang).  So
         * did the first thread that ended with exit(2) before it ever
         * parked: it was never released, and counted alive for ever. */
        requeue_pending(c);
        release_finished(c);
        if (agg_exiting())
            agg_exit_stop(c);
        if (!c->round_left) {
            /* A new round: calls stored by fibers that keep running (they
             * yield) must not wait for the ready queue to run dry. */
            take_in(c);
            if (!agg_rq_empty(c) || !wait_submits(c)) {
                submit_all(c);
                reap_all(c);
            }
            c->round_left = agg_rq_len(c);
            /* the fibers that have urgent calls may take at most as many
             * turns more as the round has fibers: half the carrier at worst */
            c->urgent_left = c->round_left > URGENT_MIN ? c->round_left : URGENT_MIN;
        }
        struct agg_fiber *f = c->ops->pick(c);
        if (f) {
            if (c->round_left)
                c->round_left--;
            run(c, f);
            if (c->urgent) {
                /* a fiber parked in an urgent call: it leaves now, and if
                 * it completes at once its fiber runs before the others */
                c->urgent = 0;
                submit_all(c);
                reap_all(c);
            }
            continue;
        }
        c->round_left = 0;
        if (!__atomic_load_n(&c->alive, __ATOMIC_ACQUIRE) &&
            !(c->threads && __atomic_load_n(&agg_threads_alive, __ATOMIC_ACQUIRE)))
            break;
        /* nothing to run here: help a busy carrier, or sleep */
        if (agg_steal(c))
            continue;
        agg_idle(c, 1);
        wait_for_events(c);
        agg_idle(c, 0);
    }
}

static void teardown(struct agg_carrier *c)
{
    flush_stats(c);
    /* the wake operations and any timers still in the rings must come back first */
    if (c->kick_armed) {
        __atomic_add_fetch(&c->kick, 1, __ATOMIC_SEQ_CST);
        ferry_raw6(SYS_futex, (long)&c->kick, 129 /* FUTEX_WAKE_PRIVATE */, 0x7fffffff, 0, 0, 0);
    }
    if (c->efd_armed) {
        struct io_uring_sqe *sqe = agg_sqe(c, 0);
        io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)c | AGG_TAG_EFD, 0);
        io_uring_sqe_set_data64(sqe, AGG_TAG_IGNORE);
        c->pools[0].misc++;
    }
    for (unsigned i = 0; i < c->g->cfg.npools; i++)
        while (c->pools[i].misc || c->pools[i].inflight) {
            note_enter(c, i, agg_ring_enter(&c->pools[i].ring, 1, 0, 0));
            reap(c, i);
        }
    flush_stats(c);
    while (c->dead) {
        struct agg_fiber *f = c->dead;
        c->dead = f->next;
        agg_fiber_free(c, f);
    }
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (c->pools[i].up)
            agg_ring_exit(&c->pools[i].ring, 1);
    if (c->efd >= 0)
        ferry_raw1(SYS_close, c->efd);
    agg_tick_delete(c);
    agg_stacks_release(c);
}

__attribute__((visibility("default"))) int ferry_carrier_run(struct ferry_group *g,
                                                             void (*main)(void *), void *arg)
{
    if (!g || !main)
        return -EINVAL;
    if (agg_carrier || agg_self)
        return -EBUSY;
    struct agg_carrier *c;
    int r = agg_carrier_new(g, &c);
    if (r < 0)
        return r;
    agg_carrier = c;
    __atomic_add_fetch(&g->carriers, 1, __ATOMIC_ACQ_REL);
    agg_stat(g, AGG_ST(carriers), 1);
    struct agg_fiber *f;
    r = agg_fiber_new(c, &f, main, arg);
    if (r == 0) {
        f->joined = -1;
        agg_wake(f);
        agg_carrier_loop(c);
        agg_carrier_tls(c);
    }
    agg_carrier = 0;
    __atomic_sub_fetch(&g->carriers, 1, __ATOMIC_ACQ_REL);
    teardown(c);
    agg_free(c);
    return r < 0 ? r : 0;
}

/* A carrier for the calling thread: its rings (attached to the pools'
 * SQPOLL threads when they have one) and the eventfd others wake it with. */
int agg_carrier_new(struct ferry_group *g, struct agg_carrier **out)
{
    struct agg_carrier *c = agg_calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->g = g;
    c->ops = &agg_sched_round_robin;
    agg_fsgsbase_detect();
    c->tp = ferry_tp();
    c->tid = (int)ferry_raw0(SYS_gettid);
    c->sched.fsbase = 0;  /* switching to the scheduler leaves fs alone */
    c->efd = -1;
    c->tick_timer = -1;
    c->steal_slot = -1;
    c->slot = agg_stat_carrier_slot();
    int r = 0;
    for (unsigned i = 0; i < g->cfg.npools; i++) {
        int attach = g->cfg.pools[i].sqpoll_cpu >= 0 ? g->pools[i].ring.ring_fd : -1;
        r = agg_ring_init(g, i, &c->pools[i].ring, attach);
        if (r < 0)
            goto fail;
        c->pools[i].up = 1;
    }
    agg_group_probe(g, &c->pools[0].ring);  /* a group of the fiber world has no ring of its own */
    /* The other pools' completions wake pool 0's wait through an eventfd
     * that ring reads as its fixed file 0: the program may close every
     * descriptor it did not open (a fork child before exec, a daemon) and
     * the wait still ends.  Without IORING_OP_FUTEX_WAIT wakers write it too. */
    if (g->cfg.npools > 1 || !kick_by_futex(c)) {
        r = (int)ferry_raw2(SYS_eventfd2, 0, 02000000 /* EFD_CLOEXEC */);
        if (r < 0)
            goto fail;
        c->efd = r;
        r = io_uring_register_files(&c->pools[0].ring, &c->efd, 1);
        if (r < 0)
            goto fail;
        c->has_efd = 1;
        for (unsigned i = 1; i < g->cfg.npools; i++) {
            r = io_uring_register_eventfd(&c->pools[i].ring, c->efd);
            if (r < 0)
                goto fail;
        }
        if (kick_by_futex(c)) {
            ferry_raw1(SYS_close, c->efd);
            c->efd = -1;
        } else {
            c->efd = agg_fd_high(c->efd);
        }
    }
    for (unsigned i = 0; i < g->cfg.npools; i++)
        agg_ring_hide(&c->pools[i].ring);
    *out = c;
    return 0;
fail:
    teardown(c);
    agg_free(c);
    return r;
}

/* In a fork child: the rings are the parent's (shared memory); let go of
 * them without touching what is in flight there. */
void agg_carrier_forget(struct agg_carrier *c)
{
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (c->pools[i].up)
            agg_ring_exit(&c->pools[i].ring, 0);
    if (c->efd >= 0)
        ferry_raw1(SYS_close, c->efd);
}

/* ---- fibers' side ---------------------------------------------------------- */

__attribute__((visibility("default"))) int ferry_fiber_spawn(struct ferry_fiber **out,
                                                             void (*fn)(void *), void *arg)
{
    struct agg_fiber *self = agg_self;
    if (!self || !fn)
        return -EINVAL;
    int busy = self->busy;
    self->busy = 1;  /* ld.so's allocator may lock and map: natively */
    struct agg_fiber *f;
    int r = agg_fiber_new(self->carrier, &f, fn, arg);
    self->busy = busy;
    if (r)
        return r;
    f->joined = out ? 0 : -1;
    if (out)
        *out = (struct ferry_fiber *)f;
    agg_wake(f);
    return 0;
}

__attribute__((visibility("default"))) int ferry_fiber_yield(void)
{
    struct agg_fiber *self = agg_self;
    if (!self)
        return -EINVAL;
    agg_yield(self);
    self->state = AGG_RUNNING;
    return 0;
}

__attribute__((visibility("default"))) int ferry_fiber_join(struct ferry_fiber *ff)
{
    struct agg_fiber *self = agg_self, *f = (struct agg_fiber *)ff;
    if (!self || !f || f->carrier != self->carrier)
        return -EINVAL;
    if (f == self)
        return -EDEADLK;
    if (f->joined)
        return -EINVAL;
    f->joined = 1;
    if (f->state != AGG_DONE) {
        f->joiner = self;
        agg_park(self);
    }
    struct agg_carrier *c = self->carrier;
    if (f->prev)
        f->prev->next = f->next;
    else
        c->dead = f->next;
    if (f->next)
        f->next->prev = f->prev;
    int busy = self->busy;
    self->busy = 1;
    agg_fiber_free(c, f);
    self->busy = busy;
    return 0;
}

__attribute__((visibility("default"))) struct ferry_fiber *ferry_fiber_self(void)
{
    return (struct ferry_fiber *)agg_self;
}
