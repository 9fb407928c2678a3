/* The engine's figures: in the group (ferry_group_stats) and in the process
 * file's aggregation area (aggarea.h; ferry/aggdata.py reads it),
 * where every group of the process adds into the same counters. */
#define _GNU_SOURCE
#include "agg.h"
#include "aggarea.h"
#include "store.h"
#include "util.h"

_Static_assert(sizeof(struct ferry_agg_area) <= sizeof(((struct ferry_proc_header *)0)->aggregate),
               "the aggregation area fits its room in the process file");

/* The group's counters and the file's share their order up to `carriers`;
 * the pool counters differ in order, so they are mapped one by one. */
static struct ferry_agg_area *area(void)
{
    return ferry_hdr ? (struct ferry_agg_area *)ferry_hdr->aggregate : 0;
}

static uint64_t *file_field(struct ferry_agg_area *a, size_t field)
{
    switch (field) {
    case AGG_ST(aggregated): return &a->aggregated;
    case AGG_ST(native): return &a->native;
    case AGG_ST(worker): return &a->worker;
    case AGG_ST(crossings): return &a->crossings;
    case AGG_ST(fibers): return &a->fibers;
    case AGG_ST(switches): return &a->switches;
    case AGG_ST(carriers): return &a->carriers;
    }
    return 0;
}

static uint64_t *file_pool_field(struct ferry_agg_area *a, unsigned pool, size_t field)
{
    struct ferry_agg_pool_row *p = &a->pools[pool];
    switch (field) {
    case AGG_PST(submitted): return &p->submitted;
    case AGG_PST(completed): return &p->completed;
    case AGG_PST(enters): return &p->enters;
    case AGG_PST(wait_ns): return &p->wait_ns;
    case AGG_PST(depth_sum): return &p->depth_sum;
    }
    return 0;
}

#define POOL_STRIDE (sizeof(((struct agg_counters *)0)->pools[0]))

void agg_stat(struct ferry_group *g, size_t field, uint64_t n)
{
    __atomic_add_fetch((uint64_t *)((char *)&g->st + field), n, __ATOMIC_RELAXED);
    struct ferry_agg_area *a = area();
    uint64_t *f = a ? file_field(a, field) : 0;
    if (f)
        __atomic_add_fetch(f, n, __ATOMIC_RELAXED);
}

void agg_stat_pool(struct ferry_group *g, unsigned pool, size_t field, uint64_t n)
{
    __atomic_add_fetch((uint64_t *)((char *)&g->st + field + pool * POOL_STRIDE), n, __ATOMIC_RELAXED);
    struct ferry_agg_area *a = area();
    uint64_t *f = a ? file_pool_field(a, pool, field) : 0;
    if (f)
        __atomic_add_fetch(f, n, __ATOMIC_RELAXED);
}

static void max_into(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void agg_stat_max_depth(struct ferry_group *g, unsigned pool, uint64_t depth)
{
    max_into(&g->st.pools[pool].max_depth, depth);
    struct ferry_agg_area *a = area();
    if (a)
        max_into(&a->pools[pool].max_depth, depth);
}

void agg_stat_batch(struct ferry_group *g, unsigned pool, unsigned n)
{
    unsigned b = 0;
    while (b < 11 && (n >> (b + 1)))
        b++;
    __atomic_add_fetch(&g->st.pools[pool].batches[b], 1, __ATOMIC_RELAXED);
    struct ferry_agg_area *a = area();
    if (a)
        __atomic_add_fetch(&a->pools[pool].batches[b], 1, __ATOMIC_RELAXED);
}

/* A carrier's row in the file, or -1 once the rows are taken (it still
 * counts in the totals). */
int agg_stat_carrier_slot(void)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return -1;
    return ferry_agg_claim_carrier_slot(a);
}

static struct ferry_agg_carrier_row *carrier_row(struct agg_carrier *c)
{
    struct ferry_agg_area *a = area();
    return a && c->slot >= 0 ? &a->carrier[c->slot] : 0;
}

void agg_stat_carrier(struct agg_carrier *c, uint64_t fibers, uint64_t switches, uint64_t crossings,
                      uint64_t completed)
{
    struct ferry_agg_carrier_row *row = carrier_row(c);
    if (!row)
        return;
    /* each row has one writer, its carrier: plain adds */
    row->fibers += fibers;
    row->switches += switches;
    row->crossings += crossings;
    row->completed += completed;
}

void agg_stat_carrier_peak(struct agg_carrier *c)
{
    struct ferry_agg_carrier_row *row = carrier_row(c);
    if (row)
        row->peak = c->peak;
}

/* A new group: its settings and routing table in the file. */
void agg_stats_group(struct ferry_group *g)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return;
    a->version = FERRY_AGG_VERSION;
    if (a->npools < g->cfg.npools)
        a->npools = g->cfg.npools;
    for (unsigned i = 0; i < g->cfg.npools; i++)
        ferry_agg_pool_row_set(&a->pools[i], &g->cfg.pools[i]);
    ferry_memcpy(a->route, g->cfg.route, sizeof(a->route));
    __atomic_add_fetch(&a->groups, 1, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)a->magic, *(const uint64_t *)FERRY_AGG_MAGIC, __ATOMIC_RELEASE);
}

__attribute__((visibility("default"))) int ferry_group_stats(struct ferry_group *g,
                                                             struct ferry_group_stats *out)
{
    if (!g || !out)
        return -EINVAL;
    ferry_memset(out, 0, sizeof(*out));
    out->aggregated = __atomic_load_n(&g->st.aggregated, __ATOMIC_RELAXED);
    out->native = __atomic_load_n(&g->st.native, __ATOMIC_RELAXED);
    out->worker = __atomic_load_n(&g->st.worker, __ATOMIC_RELAXED);
    out->crossings = __atomic_load_n(&g->st.crossings, __ATOMIC_RELAXED);
    out->fibers = __atomic_load_n(&g->st.fibers, __ATOMIC_RELAXED);
    out->switches = __atomic_load_n(&g->st.switches, __ATOMIC_RELAXED);
    out->npools = g->cfg.npools;
    for (unsigned i = 0; i < g->cfg.npools; i++) {
        out->pools[i].submitted = g->st.pools[i].submitted;
        out->pools[i].completed = g->st.pools[i].completed;
        out->pools[i].enters = g->st.pools[i].enters;
        out->pools[i].max_depth = g->st.pools[i].max_depth;
        out->pools[i].wait_ns = g->st.pools[i].wait_ns;
        for (unsigned b = 0; b < FERRY_BATCH_BUCKETS; b++)
            out->pools[i].batches[b] = g->st.pools[i].batches[b];
    }
    return 0;
}
