/* The raw batch (ferry_submit / ferry_reap): n calls leave in one
 * io_uring_enter on a pool's own ring, translated as a fiber's calls would
 * be.  For benchmarks, and for programs that batch by hand. */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "store.h"
#include "util.h"

/* this batch's calls, to count their completions as they are reaped */
struct batch {
    struct ferry_call *lo, *hi;
    unsigned done;
};

static void raw_complete(struct ferry_group *g, unsigned pool, struct io_uring_cqe *cqe, struct batch *b)
{
    uint64_t ud = cqe->user_data;
    if ((ud & AGG_TAG_MASK) != AGG_TAG_RAW)
        return;
    struct ferry_call *call = (struct ferry_call *)(uintptr_t)(ud & ~AGG_TAG_MASK);
    if (b && call >= b->lo && call < b->hi)
        b->done++;
    call->result = call->nr == FERRY_NR_NOP ? cqe->res : agg_fixup(call->nr, call->args, 0, cqe->res);
    __atomic_store_n(&call->done, 1, __ATOMIC_RELEASE);
    g->pools[pool].inflight--;
}

static unsigned raw_reap(struct ferry_group *g, unsigned pool, struct batch *b)
{
    struct io_uring *ring = &g->pools[pool].ring;
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(ring, head, cqe)
    {
        raw_complete(g, pool, cqe, b);
        n++;
    }
    if (n) {
        io_uring_cq_advance(ring, n);
        agg_stat_pool(g, pool, AGG_PST(completed), n);
        agg_stat(g, AGG_ST(aggregated), n);
    }
    return n;
}

static void raw_enter(struct ferry_group *g, unsigned pool, unsigned min, uint64_t timeout_ns)
{
    struct agg_pool *p = &g->pools[pool];
    unsigned n = io_uring_sq_ready(&p->ring);
    uint64_t t0 = min ? ferry_rdtsc() : 0;
    struct io_uring_cqe *cqe;
    if (!min)
        io_uring_submit(&p->ring);
    else if (timeout_ns && g->ext_arg) {
        struct __kernel_timespec ts = {(long long)(timeout_ns / 1000000000ULL),
                                       (long long)(timeout_ns % 1000000000ULL)};
        io_uring_submit_and_wait_timeout(&p->ring, &cqe, min, &ts, 0);
    } else
        io_uring_submit_and_wait(&p->ring, min);
    agg_stat_pool(g, pool, AGG_PST(enters), 1);
    agg_stat(g, AGG_ST(crossings), 1);
    if (n) {
        agg_stat_pool(g, pool, AGG_PST(submitted), n);
        agg_stat_batch(g, pool, n);
    }
    agg_stat_pool(g, pool, AGG_PST(depth_sum), p->inflight);
    agg_stat_max_depth(g, pool, p->inflight);
    if (min) {
        struct ferry_proc_header *h = ferry_hdr;
        uint64_t dt = ferry_rdtsc() - t0;
        if (h && h->cal_tsc)
            agg_stat_pool(g, pool, AGG_PST(wait_ns), (uint64_t)((unsigned __int128)dt * h->cal_ns / h->cal_tsc));
    }
}

__attribute__((visibility("default"))) int ferry_submit(struct ferry_group *g, unsigned pool,
                                                        struct ferry_call *calls, unsigned n,
                                                        enum ferry_wait wait, unsigned limit,
                                                        uint64_t timeout_ns)
{
    if (!g || pool >= g->cfg.npools || (n && !calls) || (unsigned)wait > FERRY_WAIT_ADAPTIVE)
        return -EINVAL;
    if (wait == FERRY_WAIT_SOME && (!limit || !timeout_ns))
        return -EINVAL;
    struct agg_pool *p = &g->pools[pool];
    agg_lock(&p->lock);
    unsigned queued = 0;
    struct batch b = {calls, calls + n, 0};
    for (unsigned i = 0; i < n; i++) {
        struct ferry_call *c = &calls[i];
        c->done = 0;
        c->result = 0;
        enum agg_tr tr;
        if (c->nr == FERRY_NR_NOP)
            tr = AGG_TR_RING;
        else if ((unsigned long)c->nr >= FERRY_NR_MAX || agg_must_native(c->nr))
            tr = AGG_TR_NATIVE;
        else
            tr = agg_translate(g, pool, c->nr, c->args, 0, 0);
        if (tr != AGG_TR_RING) {
            /* nothing in io_uring runs it as the call would: at once */
            c->result = ferry_pass6(c->nr, c->args[0], c->args[1], c->args[2], c->args[3],
                                    c->args[4], c->args[5]);
            c->done = 1;
            b.done++;
            agg_stat(g, AGG_ST(native), 1);
            agg_stat(g, AGG_ST(crossings), 1);
            continue;
        }
        struct io_uring_sqe *sqe;
        while (!(sqe = io_uring_get_sqe(&p->ring))) {
            raw_enter(g, pool, 0, 0);
            raw_reap(g, pool, &b);
        }
        if (c->nr == FERRY_NR_NOP)
            io_uring_prep_nop(sqe);
        else
            agg_translate(g, pool, c->nr, c->args, 0, sqe);
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | AGG_TAG_RAW);
        p->inflight++;
        queued++;
    }
    switch (wait) {
    case FERRY_WAIT_NONE:
        raw_enter(g, pool, 0, 0);
        raw_reap(g, pool, &b);
        break;
    case FERRY_WAIT_ALL:
        for (;;) {
            raw_reap(g, pool, &b);
            if (b.done == n)
                break;
            raw_enter(g, pool, n - b.done, 0);
        }
        break;
    case FERRY_WAIT_SOME: {
        raw_reap(g, pool, &b);
        unsigned want = limit < n ? limit : n;
        if (b.done < want || io_uring_sq_ready(&p->ring)) {
            raw_enter(g, pool, want > b.done ? want - b.done : 0, timeout_ns);
            raw_reap(g, pool, &b);
        }
        break;
    }
    default: /* any; adaptive has no other work to weigh here: any */
        raw_reap(g, pool, &b);
        if (b.done == 0 || io_uring_sq_ready(&p->ring)) {
            raw_enter(g, pool, b.done ? 0 : 1, 0);
            raw_reap(g, pool, &b);
        }
        break;
    }
    (void)queued;
    agg_unlock(&p->lock);
    return (int)b.done;
}

__attribute__((visibility("default"))) int ferry_reap(struct ferry_group *g, unsigned pool,
                                                      unsigned min_complete)
{
    if (!g || pool >= g->cfg.npools)
        return -EINVAL;
    struct agg_pool *p = &g->pools[pool];
    agg_lock(&p->lock);
    unsigned got = raw_reap(g, pool, 0);
    while (got < min_complete && p->inflight) {
        raw_enter(g, pool, min_complete - got < p->inflight ? min_complete - got : p->inflight, 0);
        got += raw_reap(g, pool, 0);
    }
    agg_unlock(&p->lock);
    return (int)got;
}
