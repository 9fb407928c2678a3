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

static int pool_up(struct ferry_group *g, unsigned i)
{
    struct wagg_pool *p = &g->pools[i];
    int worker_pool = i == WAGG_WORKER_POOL;
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
    if (!r)
        __atomic_store_n(&p->up, 1, __ATOMIC_RELEASE);
    return r;
}

/* FERRY_ROUTE_WORKER's pool starts with the first call routed to it: most
 * groups never route one there, though the default table names some */
int wagg_pool_ensure(struct ferry_group *g, unsigned pool)
{
    if (__atomic_load_n(&g->pools[pool].up, __ATOMIC_ACQUIRE))
        return 0;
    while (__atomic_exchange_n(&g->lock, 1, __ATOMIC_ACQUIRE))
        YieldProcessor();
    int r = g->pools[pool].up ? 0 : pool_up(g, pool);
    __atomic_store_n(&g->lock, 0, __ATOMIC_RELEASE);
    return r;
}

static int start(struct ferry_group *g)
{
    for (unsigned i = 0; i < g->cfg.npools; i++) {
        int r = pool_up(g, i);
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
