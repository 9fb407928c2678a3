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
        return -EINVAL;
    const struct ferry_stub *first = ferry_stub_at(0);
    if (!first || !first->original)
        return -ENOSYS;    /* ferry.dll is not running the program's calls (FERRY_MODE=off) */
    int r = wagg_config_validate(cfg);
    if (r)
        return r;
    uint64_t was = ferry_own_begin();
    struct ferry_group *g = VirtualAlloc(0, sizeof(*g), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    ferry_own_end(was);
    if (!g)
        return -ENOMEM;
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
        return -EINVAL;
    if (__atomic_load_n(&g->carriers, __ATOMIC_ACQUIRE))
        return -EBUSY;
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

/* counters written with atomic adds, read one 64-bit word at a time */
_Static_assert(__builtin_offsetof(struct ferry_group_stats, npools) % 8 == 0 &&
               sizeof(struct ferry_pool_stats) % 8 == 0, "the counters are 64-bit words");
static void load_words(void *dst, const void *src, size_t bytes)
{
    uint64_t *d = dst;
    const uint64_t *w = src;
    for (size_t i = 0; i < bytes / 8; i++)
        d[i] = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
}

__declspec(dllexport) int ferry_group_stats(struct ferry_group *g, struct ferry_group_stats *out)
{
    if (!g || !out)
        return -EINVAL;
    ferry_zero(out, sizeof(*out));
    load_words(out, &g->st, __builtin_offsetof(struct ferry_group_stats, npools));
    out->npools = g->cfg.npools;
    for (unsigned i = 0; i < g->cfg.npools; i++)
        load_words(&out->pools[i], &g->pools[i].st, sizeof(out->pools[i]));
    return 0;
}
