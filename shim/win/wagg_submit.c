/* The raw batch on Windows (ferry_submit / ferry_reap): n calls handed to a
 * pool's workers with at most one crossing (the wake of a sleeping worker),
 * then waited for as the wait policy says, on the caller's completion ring. */
#include <windows.h>

#include "wagg.h"

/* this batch's calls, to count their completions as they are reaped */
struct batch {
    struct ferry_call *lo, *hi;
    unsigned done;
};

static void reap(struct wagg_client *cl, struct batch *b)
{
    struct ferry_call *c;
    unsigned pool;
    while (wagg_client_pop(cl, &c, &pool) == 0)
        if (c >= b->lo && c < b->hi)
            b->done++;
}

/* reap until `want` of the batch completed or the deadline passed */
static void reap_until(struct ferry_group *g, struct wagg_client *cl, unsigned pool, struct batch *b,
                       unsigned want, uint64_t deadline)
{
    for (;;) {
        reap(cl, b);
        if (b->done >= want || !cl->inflight || wagg_client_wait(g, cl, pool, deadline))
            break;
    }
    reap(cl, b);
}

/* Calls that belong to the calling thread run on it, at once. */
static void run_here(struct ferry_group *g, struct ferry_call *c, struct batch *b)
{
    c->result = wagg_run(c);
    c->done = 1;
    b->done++;
    wagg_add(g->st.native, 1);
    wagg_add(g->st.crossings, 1);
}

__declspec(dllexport) int ferry_submit(struct ferry_group *g, unsigned pool, struct ferry_call *calls,
                                       unsigned n, enum ferry_wait wait, unsigned limit, uint64_t timeout_ns)
{
    if (!g || pool >= g->cfg.npools || (n && !calls) || (unsigned)wait > FERRY_WAIT_ADAPTIVE)
        return -EINVAL;
    if (wait == FERRY_WAIT_SOME && (!limit || !timeout_ns))
        return -EINVAL;
    struct wagg_client *cl = wagg_client(g);
    if (!cl)
        return -ENOMEM;
    struct batch b = {calls, calls + n, 0};
    unsigned queued = 0;
    for (unsigned i = 0; i < n; i++) {
        struct ferry_call *c = &calls[i];
        c->done = 0;
        c->result = 0;
        if (wagg_must_native(c->nr, c->args)) {
            run_here(g, c, &b);
            continue;
        }
        while (wagg_push(g, pool, c) == -EAGAIN) {
            /* no room: what is queued leaves, and room is made by reaping */
            if (queued) {
                wagg_batch(g, pool, queued);
                wagg_kick(g, pool);
                queued = 0;
            }
            if (cl->inflight)
                reap_until(g, cl, pool, &b, b.done + 1, UINT64_MAX);
            else {
                uint64_t was = ferry_own_begin();
                SwitchToThread();   /* other threads' calls fill the ring */
                ferry_own_end(was);
            }
        }
        queued++;
    }
    if (queued) {
        wagg_batch(g, pool, queued);
        wagg_kick(g, pool);
    }
    unsigned want = 0;
    uint64_t deadline = UINT64_MAX;
    switch (wait) {
    case FERRY_WAIT_NONE:
        break;
    case FERRY_WAIT_ALL:
        want = n;
        break;
    case FERRY_WAIT_SOME:
        want = limit < n ? limit : n;
        deadline = wagg_deadline(timeout_ns);
        break;
    default:    /* any; adaptive has no other work to weigh here: any */
        want = n ? 1 : 0;
        break;
    }
    reap_until(g, cl, pool, &b, want, deadline);
    return (int)b.done;
}

__declspec(dllexport) int ferry_reap(struct ferry_group *g, unsigned pool, unsigned min_complete)
{
    if (!g || pool >= g->cfg.npools)
        return -EINVAL;
    struct wagg_client *cl = wagg_client(g);
    if (!cl)
        return -ENOMEM;
    unsigned got = 0, from;
    struct ferry_call *c;
    for (;;) {
        while (wagg_client_pop(cl, &c, &from) == 0)
            got += from == pool;
        if (got >= min_complete || !cl->pool_inflight[pool] || wagg_client_wait(g, cl, pool, UINT64_MAX))
            return (int)got;
    }
}
