/* Run queues, and carriers that help each other (work stealing).
 *
 * Each carrier has its own run queue; nothing on the path of a fiber that
 * parks or wakes takes a lock shared with other carriers.  The queue is a
 * ring of AGG_RQ_SLOTS fibers written by its carrier only (at rq_t) and
 * taken from its head (rq_h) by a compare-and-swap, by its carrier and by
 * thieves alike (the run queue of Go's scheduler): a carrier with nothing to
 * run takes half of another's ring, from a victim picked at random, so that
 * with 8-64 carriers thieves spread over victims instead of all hitting one.
 * Fibers beyond a full ring wait in a list of the carrier's own and enter
 * the ring as it empties (first come, first run).  One fiber may be set to
 * run next (rq_next, Go's runnext): its urgent call completed and it has
 * more of the same to do; thieves leave it.
 *
 * Only a fiber that is ready, parked on nothing, moves: its call has
 * completed on its old carrier's ring (a call submitted on a carrier's ring
 * completes there, and only that carrier reaps it), its futex wait has ended
 * and its timer was removed on that carrier, and any signal for it is kept
 * in the fiber (sigpending) or follows it (agg_inbox_drain forwards a post
 * that reached its old carrier).  A parked fiber's state belongs to the
 * ring, worker or futex bucket holding its call, all tied to its carrier;
 * moving it then would split that state between two threads.
 *
 * Fibers that stay where they are: fiber 0, whose thread block is carrier
 * 0's own (the scheduler of carrier 0 runs on it, and the kernel knows it as
 * the first thread's: rseq, robust list), and fibers made through the API
 * (their joins and stacks are their carrier's).  They wait in a list of
 * their own, each after the ring position it was queued behind.
 *
 * A carrier about to sleep with nothing to run says so in `idle_mask`;
 * a carrier whose ring holds more than it can run at once wakes one idle
 * carrier (through its kick word, as a post does), which then steals.
 */
#include <sys/syscall.h>

#include "agg.h"
#include "catchall.h"
#include "raw.h"
#include "util.h"

#define SLOTS AGG_RQ_SLOTS
#define MAX_MEMBERS 64
#define GRAB_MAX (SLOTS / 2)
#define OFFER_NS 100000ULL   /* a carrier wakes an idle one at most this often */
#define GRACE_NS 5000ULL     /* a victim's time to run its next fiber itself */

static struct agg_carrier *members[MAX_MEMBERS];
static unsigned nmembers;
static uint64_t idle_mask;           /* members about to sleep with nothing to run */

static void list_add(struct agg_fiber **head, struct agg_fiber **tail, struct agg_fiber *f)
{
    f->next = 0;
    if (*tail)
        (*tail)->next = f;
    else
        *head = f;
    *tail = f;
}

static struct agg_fiber *list_take(struct agg_fiber **head, struct agg_fiber **tail)
{
    struct agg_fiber *f = *head;
    if (f) {
        *head = f->next;
        if (!*head)
            *tail = 0;
        f->next = 0;
    }
    return f;
}

/* ---- the carrier's own side ------------------------------------------------- */

static uint32_t head_of(struct agg_carrier *c) { return __atomic_load_n(&c->rq_h, __ATOMIC_ACQUIRE); }

static void ring_put(struct agg_carrier *c, uint32_t t, struct agg_fiber *f)
{
    __atomic_store_n(&c->rq_ring[t % SLOTS], f, __ATOMIC_RELAXED);
}

/* Fibers past a full ring move in as it empties. */
static void refill(struct agg_carrier *c)
{
    uint32_t t = c->rq_t, h = head_of(c);
    while (c->over_head && t - h < SLOTS) {
        ring_put(c, t++, list_take(&c->over_head, &c->over_tail));
        c->rq_over--;
    }
    __atomic_store_n(&c->rq_t, t, __ATOMIC_RELEASE);
}

static void offer(struct agg_carrier *c);

void agg_rq_push(struct agg_carrier *c, struct agg_fiber *f)
{
    if (!f->movable) {
        /* after every movable fiber queued so far */
        f->rq_at = c->rq_t + c->rq_over;
        list_add(&c->pin_head, &c->pin_tail, f);
        __atomic_store_n(&c->npin, c->npin + 1, __ATOMIC_RELAXED);  /* thieves look at it */
        /* a pinned fiber made ready after a movable one (fiber 0 preempted
         * by its tick after the round reaped a completion) makes two ready
         * as much as the other order: without an offer here, the idle
         * carrier slept on and this one ran the other fiber a tick later */
        offer(c);
        return;
    }
    if (!c->over_head && c->rq_t - head_of(c) < SLOTS) {
        ring_put(c, c->rq_t, f);
        __atomic_store_n(&c->rq_t, c->rq_t + 1, __ATOMIC_RELEASE);
    } else {
        list_add(&c->over_head, &c->over_tail, f);
        c->rq_over++;
    }
    offer(c);
}

/* The next fiber's lines that its turn reads first (its context, its
 * queue link and position): with a thousand fibers each is a cache miss
 * that the pick and the switch would otherwise wait for.  Asked for, not
 * read: a load here waits as long. */
static void ahead(struct agg_fiber *n)
{
    if (!n)
        return;
    __builtin_prefetch(&n->ctx, 0);
    __builtin_prefetch(&n->next, 1);
    __builtin_prefetch(&n->rq_at, 0);
}

static struct agg_fiber *take_pinned(struct agg_carrier *c)
{
    struct agg_fiber *f = list_take(&c->pin_head, &c->pin_tail);
    if (f) {
        __atomic_store_n(&c->npin, c->npin - 1, __ATOMIC_RELAXED);
        ahead(c->pin_head);
    }
    return f;
}

void agg_rq_push_first(struct agg_carrier *c, struct agg_fiber *f)
{
    struct agg_fiber *was = c->rq_next;
    c->rq_next = f;
    if (was)
        agg_rq_push(c, was);
}

struct agg_fiber *agg_rq_pick(struct agg_carrier *c)
{
    struct agg_fiber *next = c->rq_next;
    if (next) {
        c->rq_next = 0;
        return next;
    }
    if (c->over_head)
        refill(c);
    uint32_t h = head_of(c);
    for (;;) {
        if (c->pin_head && ((int32_t)(h - c->pin_head->rq_at) >= 0 || h == c->rq_t))
            return take_pinned(c);
        if (h == c->rq_t)
            return 0;
        struct agg_fiber *f = __atomic_load_n(&c->rq_ring[h % SLOTS], __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&c->rq_h, &h, h + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return f;
        /* a thief took it: h is the new head */
    }
}

unsigned agg_rq_len(struct agg_carrier *c)
{
    return (c->rq_t - head_of(c)) + c->rq_over + c->npin + !!c->rq_next;
}

/* ---- the carriers that steal ------------------------------------------------- */

void agg_steal_join(struct agg_carrier *c)
{
    unsigned n = __atomic_load_n(&nmembers, __ATOMIC_ACQUIRE);
    if (n >= MAX_MEMBERS) {
        c->steal_slot = -1;
        return;
    }
    c->steal_slot = (int)n;
    c->steal_seed = 0x9e3779b97f4a7c15ULL * (n + 1);
    __atomic_store_n(&members[n], c, __ATOMIC_RELEASE);
    __atomic_store_n(&nmembers, n + 1, __ATOMIC_RELEASE);
}

int agg_steal_on(void) { return __atomic_load_n(&nmembers, __ATOMIC_ACQUIRE) > 1; }

/* A fork child: its parent's carriers are not its own. */
void agg_steal_forget(void)
{
    for (unsigned i = 0; i < MAX_MEMBERS; i++)
        members[i] = 0;
    nmembers = 0;
    idle_mask = 0;
}

void agg_idle(struct agg_carrier *c, int idle)
{
    if (c->steal_slot < 0 || !agg_steal_on())
        return;
    uint64_t bit = 1ULL << c->steal_slot;
    if (idle)
        __atomic_or_fetch(&idle_mask, bit, __ATOMIC_SEQ_CST);
    else if (__atomic_load_n(&idle_mask, __ATOMIC_RELAXED) & bit)
        __atomic_and_fetch(&idle_mask, ~bit, __ATOMIC_SEQ_CST);
}

/* c has a fiber in its ring that it cannot run at once: more ready than it
 * runs next (two fibers), or one made ready by the fiber that runs (a wake,
 * a new thread), which keeps the carrier until it parks.  One idle carrier
 * is woken to take some.  For the lone one, the thief first gives the
 * runner a few microseconds to park (grab's grace): a fiber that hands
 * work to another, as a listener does, parks within them and the other
 * stays, its cache warm; one that goes on computing (a producer) no longer
 * keeps it waiting for its tick, 1-2 ms, while a CPU idles.  A fiber made
 * ready with none running (the scheduler's reap) runs at once here.  The
 * look at idle_mask is a plain load: a carrier that goes idle just after
 * it is not woken, and the fiber runs here, as it would without stealing. */
static void offer(struct agg_carrier *c)
{
    if (c->steal_slot < 0)
        return;
    uint64_t idle = __atomic_load_n(&idle_mask, __ATOMIC_RELAXED) & ~(1ULL << c->steal_slot);
    if (!idle)
        return;
    uint32_t len = c->rq_t - head_of(c);
    if (!len || (len + c->npin < 2 && !c->current))
        return;
    /* a backlog that lasts, not each moment two are ready: every wake costs
     * both carriers a crossing, and the woken one's batches get smaller */
    uint64_t now = agg_now_ns();
    if (now - c->offered_ns < OFFER_NS)
        return;
    c->offered_ns = now;
    /* the first idle one after c, so that busy carriers wake different ones */
    unsigned s = (unsigned)c->steal_slot + 1;
    uint64_t rot = s >= 64 ? idle : (idle >> s) | (s ? idle << (64 - s) : 0);
    unsigned i = (__builtin_ctzll(rot) + s) % 64;
    uint64_t bit = 1ULL << i;
    if (__atomic_fetch_and(&idle_mask, ~bit, __ATOMIC_SEQ_CST) & bit) {
        struct agg_carrier *t = __atomic_load_n(&members[i], __ATOMIC_ACQUIRE);
        if (t)
            agg_rouse(t);
    }
}

/* Up to half of v's ring (at least one) when v has more ready than it runs
 * next, into out.  The slots are read
 * before the head moves past them: once the CAS succeeds, v's carrier has
 * not reused them (it writes a slot only while it lies outside the ring). */
static unsigned grab(struct agg_carrier *v, struct agg_fiber **out)
{
    int waited = 0;
    for (;;) {
        uint32_t h = head_of(v);
        uint32_t t = __atomic_load_n(&v->rq_t, __ATOMIC_ACQUIRE);
        uint32_t n = t - h;
        if ((int32_t)n <= 0)
            return 0;
        if (n > SLOTS)
            continue;  /* head and tail read at different moments */
        if (n < 2 && !__atomic_load_n(&v->npin, __ATOMIC_RELAXED)) {
            /* its next: v runs it once the fiber it runs parks, which one
             * that hands work to another does within microseconds; taking
             * it would only move it.  But a fiber that keeps v (computing,
             * between ticks) would leave it waiting while this carrier
             * idles: as Go's thieves do with runnext, give v a few
             * microseconds, and take it if it is still there. */
            if (waited || !__atomic_load_n(&v->current, __ATOMIC_RELAXED))
                return 0;
            waited = 1;
            /* yielding, not spinning: when v's thread shares this CPU (a
             * loaded machine, or one CPU for both), only a yield lets it run
             * and park its fiber; a spin would wait the grace out and take
             * the fiber every time, a move that buys no parallelism */
            uint64_t until = agg_now_ns() + GRACE_NS;
            while (agg_now_ns() < until && head_of(v) == h)
                ferry_raw0(SYS_sched_yield);
            if (head_of(v) != h || !__atomic_load_n(&v->current, __ATOMIC_RELAXED))
                return 0;
        }
        n -= n / 2;
        if (n > GRAB_MAX)
            n = GRAB_MAX;
        for (uint32_t i = 0; i < n; i++)
            out[i] = __atomic_load_n(&v->rq_ring[(h + i) % SLOTS], __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&v->rq_h, &h, h + n, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return n;
    }
}

/* f, ready or parked on nothing of its carrier's, becomes c's and ready:
 * what finds its carrier through the fiber (its struct, its thread block's
 * copy of the shim's state, the catch-all's selector byte, which is per
 * kernel thread) says c from now. */
void agg_adopt(struct agg_carrier *c, struct agg_fiber *f)
{
    struct agg_carrier *v = f->carrier;
    __atomic_store_n(&f->carrier, c, __ATOMIC_RELEASE);
    unsigned long tp = (unsigned long)f->tcb;
    *FERRY_TLS_IN(tp, agg_carrier) = c;
    ferry_catchall_adopt(tp, c->tp);
    __atomic_sub_fetch(&v->alive, 1, __ATOMIC_ACQ_REL);
    agg_count_fiber(c);
    if (f->thread) {
        __atomic_sub_fetch(&v->placed, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->placed, 1, __ATOMIC_RELAXED);
        agg_tick_update(v);
        agg_tick_update(c);
    }
    agg_wake(f);
}

static struct agg_carrier *victim(struct agg_carrier *c, unsigned n, unsigned i)
{
    struct agg_carrier *v = __atomic_load_n(&members[i % n], __ATOMIC_ACQUIRE);
    return v == c ? 0 : v;
}

unsigned agg_steal(struct agg_carrier *c)
{
    unsigned n = __atomic_load_n(&nmembers, __ATOMIC_ACQUIRE);
    if (c->steal_slot < 0 || n < 2)
        return 0;
    c->steal_seed ^= c->steal_seed << 13;
    c->steal_seed ^= c->steal_seed >> 7;
    c->steal_seed ^= c->steal_seed << 17;
    unsigned start = (unsigned)(c->steal_seed % n);
    struct agg_fiber *got[GRAB_MAX];
    for (unsigned k = 0; k < n; k++) {
        struct agg_carrier *v = victim(c, n, start + k);
        if (!v)
            continue;
        unsigned m = grab(v, got);
        for (unsigned i = 0; i < m; i++)
            agg_adopt(c, got[i]);
        if (m)
            return m;
    }
    return 0;
}

int agg_steal_ready(struct agg_carrier *c)
{
    unsigned n = __atomic_load_n(&nmembers, __ATOMIC_ACQUIRE);
    if (c->steal_slot < 0 || n < 2)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        struct agg_carrier *v = victim(c, n, i);
        if (!v)
            continue;
        uint32_t len = __atomic_load_n(&v->rq_t, __ATOMIC_ACQUIRE) - head_of(v);
        if (len && len <= SLOTS && (len >= 2 || __atomic_load_n(&v->npin, __ATOMIC_RELAXED)))
            return 1;
    }
    return 0;
}
