/* The engine's figures in the group and in the process file's aggregation
 * area, as shim/src/agg_stats.c writes them for the ELF engine.  Several
 * threads add into the same counters: atomic adds; a carrier's row has one
 * writer, its carrier.  Pools beyond the file's (the worker pool) count in
 * the group only. */
#include "wagg_stats.h"
#include "ferry_dll.h"
#include "../src/aggarea.h"
#include "../src/procfile.h"

_Static_assert(sizeof(struct ferry_agg_area) <= sizeof(((struct ferry_proc_header *)0)->aggregate),
               "the aggregation area fits its room in the process file");

static struct ferry_agg_area *area(void)
{
    return ferry_agg_area();
}

static void add(uint64_t *p, uint64_t n)
{
    __atomic_add_fetch(p, n, __ATOMIC_RELAXED);
}

static uint64_t *group_field(struct ferry_group_stats *st, enum wagg_stat_field f)
{
    uint64_t *const fields[] = {
        [WAGG_ST_AGGREGATED] = &st->aggregated, [WAGG_ST_NATIVE] = &st->native,
        [WAGG_ST_WORKER] = &st->worker, [WAGG_ST_CROSSINGS] = &st->crossings,
        [WAGG_ST_FIBERS] = &st->fibers, [WAGG_ST_SWITCHES] = &st->switches,
        [WAGG_ST_CARRIERS] = 0,
    };
    return fields[f];
}

static uint64_t *pool_field(struct ferry_pool_stats *st, enum wagg_pool_field f)
{
    uint64_t *const fields[] = {
        [WAGG_PST_SUBMITTED] = &st->submitted, [WAGG_PST_COMPLETED] = &st->completed,
        [WAGG_PST_ENTERS] = &st->enters, [WAGG_PST_WAIT_NS] = &st->wait_ns,
        [WAGG_PST_DEPTH_SUM] = 0,
    };
    return fields[f];
}

void wagg_stat(struct ferry_group *g, enum wagg_stat_field f, uint64_t n)
{
    uint64_t *mine = g ? group_field(&g->st, f) : 0;
    if (mine)
        add(mine, n);
    struct ferry_agg_area *a = area();
    if (!a)
        return;
    uint64_t *const fields[] = {
        [WAGG_ST_AGGREGATED] = &a->aggregated, [WAGG_ST_NATIVE] = &a->native,
        [WAGG_ST_WORKER] = &a->worker, [WAGG_ST_CROSSINGS] = &a->crossings,
        [WAGG_ST_FIBERS] = &a->fibers, [WAGG_ST_SWITCHES] = &a->switches,
        [WAGG_ST_CARRIERS] = &a->carriers,
    };
    add(fields[f], n);
}

void wagg_stat_pool(struct ferry_group *g, unsigned pool, enum wagg_pool_field f, uint64_t n)
{
    uint64_t *mine = g && pool < WAGG_NPOOLS ? pool_field(&g->pools[pool].st, f) : 0;
    if (mine)
        add(mine, n);
    struct ferry_agg_area *a = area();
    if (!a || pool >= FERRY_MAX_POOLS)
        return;
    struct ferry_agg_pool_row *p = &a->pools[pool];
    uint64_t *const fields[] = {
        [WAGG_PST_SUBMITTED] = &p->submitted, [WAGG_PST_COMPLETED] = &p->completed,
        [WAGG_PST_ENTERS] = &p->enters, [WAGG_PST_WAIT_NS] = &p->wait_ns,
        [WAGG_PST_DEPTH_SUM] = &p->depth_sum,
    };
    add(fields[f], n);
}

void wagg_stat_batch(struct ferry_group *g, unsigned pool, unsigned n)
{
    if (!n)
        return;
    unsigned b = 0;
    while (b < FERRY_BATCH_BUCKETS - 1 && (n >> (b + 1)))
        b++;
    if (g && pool < WAGG_NPOOLS)
        add(&g->pools[pool].st.batches[b], 1);
    struct ferry_agg_area *a = area();
    if (a && pool < FERRY_MAX_POOLS)
        add(&a->pools[pool].batches[b], 1);
}

static void max_into(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void wagg_stat_max_depth(struct ferry_group *g, unsigned pool, uint64_t depth)
{
    if (g && pool < WAGG_NPOOLS)
        max_into(&g->pools[pool].st.max_depth, depth);
    struct ferry_agg_area *a = area();
    if (a && pool < FERRY_MAX_POOLS)
        max_into(&a->pools[pool].max_depth, depth);
}

uint64_t wagg_tsc_ns(uint64_t ticks)
{
    const struct ferry_proc_header *h = ferry_proc_header();
    if (!h || !h->cal_tsc)
        return 0;
    return (uint64_t)((unsigned __int128)ticks * h->cal_ns / h->cal_tsc);
}

int wagg_stat_carrier_slot(void)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return -1;
    uint32_t n = __atomic_load_n(&a->carrier_slots, __ATOMIC_RELAXED);
    do
        if (n >= FERRY_AGG_CARRIER_SLOTS)
            return -1;
    while (!__atomic_compare_exchange_n(&a->carrier_slots, &n, n + 1, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return (int)n;
}

static struct ferry_agg_carrier_row *row(int slot)
{
    struct ferry_agg_area *a = area();
    return a && slot >= 0 ? &a->carrier[slot] : 0;
}

void wagg_stat_carrier(int slot, uint64_t fibers, uint64_t switches, uint64_t peak)
{
    struct ferry_agg_carrier_row *r = row(slot);
    if (!r)
        return;
    r->fibers += fibers;
    r->switches += switches;
    if (peak > r->peak)
        r->peak = peak;
}

void wagg_stat_carrier_io(int slot, uint64_t crossings, uint64_t completed)
{
    struct ferry_agg_carrier_row *r = row(slot);
    if (!r)
        return;
    r->crossings += crossings;
    r->completed += completed;
}

void wagg_stats_group(const struct ferry_group_config *cfg)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return;
    a->version = FERRY_AGG_VERSION;
    if (a->npools < cfg->npools)
        a->npools = cfg->npools;
    for (unsigned i = 0; i < cfg->npools && i < FERRY_MAX_POOLS; i++) {
        const struct ferry_pool_config *pc = &cfg->pools[i];
        struct ferry_agg_pool_row *p = &a->pools[i];
        p->entries = pc->entries ? pc->entries : 256;
        p->concurrency = pc->concurrency;
        p->cpus = pc->cpus;
        p->sqpoll_cpu = pc->sqpoll_cpu;
        p->priority = pc->priority;
        p->wait = pc->wait;
        p->wait_limit = pc->wait_limit;
        p->wait_timeout_ns = pc->wait_timeout_ns;
    }
    ferry_copy(a->route, cfg->route, sizeof(a->route));
    add(&a->groups, 1);
    uint64_t magic;
    ferry_copy(&magic, FERRY_AGG_MAGIC, 8);
    __atomic_store_n((uint64_t *)a->magic, magic, __ATOMIC_RELEASE);
}
