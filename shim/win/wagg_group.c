/* Groups on Windows: their pools' threads and rings, their end, their figures. */
#include <windows.h>

#include "wagg.h"
#include "wagg_stats.h"

#define REQ_RING_DEFAULT 256

static unsigned pow2_at_least(unsigned n)
{
    unsigned p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static int start(struct ferry_group *g)
{
    int worker_routes = 0;
    for (int nr = 0; nr < FERRY_NR_MAX; nr++)
        worker_routes |= g->cfg.route[nr] == FERRY_ROUTE_WORKER;
    for (unsigned i = 0; i < WAGG_NPOOLS; i++) {
        int worker_pool = i == WAGG_WORKER_POOL;
        if (worker_pool ? !worker_routes : i >= g->cfg.npools)
            continue;
        struct wagg_pool *p = &g->pools[i];
        if (!worker_pool)
            p->cfg = g->cfg.pools[i];
        else
            p->cfg = (struct ferry_pool_config){.entries = 1024, .sqpoll_cpu = -1};
        /* the workers' ring holds a pool's every call: no fewer cells than workers */
        unsigned nworkers = worker_pool ? (g->cfg.workers ? g->cfg.workers : 4)
                          : (p->cfg.concurrency ? p->cfg.concurrency : 4);
        unsigned cells = p->cfg.entries ? p->cfg.entries : REQ_RING_DEFAULT;
        int r = wagg_ring_init(&p->req, pow2_at_least(cells > nworkers ? cells : nworkers));
        if (!r)
            r = wagg_pool_start(g, i, nworkers);
        if (r)
            return r;
    }
    return 0;
}

__declspec(dllexport) int ferry_group_create(struct ferry_group **out, const struct ferry_group_config *cfg)
{
    if (!out || !cfg)
        return -EINVAL_;
    const struct ferry_stub *first = ferry_stub_at(0);
    if (!first || !first->original)
        return -ENOSYS_;    /* ferry.dll is not running the program's calls (FERRY_MODE=off) */
    int r = wagg_config_validate(cfg);
    if (r)
        return r;
    uint64_t was = ferry_own_begin();
    struct ferry_group *g = VirtualAlloc(0, sizeof(*g), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    ferry_own_end(was);
    if (!g)
        return -ENOMEM_;
    ferry_copy(&g->cfg, cfg, sizeof(*cfg));
    r = start(g);
    if (r) {
        wagg_pools_stop(g);
        VirtualFree(g, 0, MEM_RELEASE);
        return r;
    }
    wagg_stats_group(g);
    *out = g;
    return 0;
}

/* -EBUSY while a carrier runs in it, or while a thread has calls out (a
 * worker may be writing into the memory they name) */
__declspec(dllexport) int ferry_group_destroy(struct ferry_group *g)
{
    if (!g)
        return -EINVAL_;
    if (__atomic_load_n(&g->carriers, __ATOMIC_ACQUIRE))
        return -EBUSY_;
    int r = wagg_clients_idle(g);
    if (r)
        return r;
    wagg_pools_stop(g);
    wagg_stats_forget(g);
    uint64_t was = ferry_own_begin();
    wagg_clients_free(g);
    VirtualFree(g, 0, MEM_RELEASE);
    ferry_own_end(was);
    return 0;
}

__declspec(dllexport) int ferry_group_stats(struct ferry_group *g, struct ferry_group_stats *out)
{
    if (!g || !out)
        return -EINVAL_;
    ferry_zero(out, sizeof(*out));
    out->aggregated = __atomic_load_n(&g->st.aggregated, __ATOMIC_RELAXED);
    out->native = __atomic_load_n(&g->st.native, __ATOMIC_RELAXED);
    out->worker = __atomic_load_n(&g->st.worker, __ATOMIC_RELAXED);
    out->crossings = __atomic_load_n(&g->st.crossings, __ATOMIC_RELAXED);
    out->fibers = __atomic_load_n(&g->st.fibers, __ATOMIC_RELAXED);
    out->switches = __atomic_load_n(&g->st.switches, __ATOMIC_RELAXED);
    out->npools = g->cfg.npools;
    for (unsigned i = 0; i < g->cfg.npools; i++) {
        const struct ferry_pool_stats *s = &g->pools[i].st;
        struct ferry_pool_stats *o = &out->pools[i];
        o->submitted = __atomic_load_n(&s->submitted, __ATOMIC_RELAXED);
        o->completed = __atomic_load_n(&s->completed, __ATOMIC_RELAXED);
        o->enters = __atomic_load_n(&s->enters, __ATOMIC_RELAXED);
        o->max_depth = __atomic_load_n(&s->max_depth, __ATOMIC_RELAXED);
        o->wait_ns = __atomic_load_n(&s->wait_ns, __ATOMIC_RELAXED);
        for (unsigned b = 0; b < FERRY_BATCH_BUCKETS; b++)
            o->batches[b] = __atomic_load_n(&s->batches[b], __ATOMIC_RELAXED);
    }
    return 0;
}
