/* The aggregation area of the process file, filled as shim/src/agg_stats.c
 * fills it for the ELF engine, from the groups' own counters. */
#include <windows.h>

#include "wagg_stats.h"
#include "../src/aggarea.h"
#include "../src/procfile.h"

_Static_assert(sizeof(struct ferry_agg_area) <= sizeof(((struct ferry_proc_header *)0)->aggregate),
               "the aggregation area fits its room in the process file");

#define MAX_GROUPS 32       /* groups alive at once whose figures reach the file */

static struct {
    struct ferry_group *g;
    struct ferry_group_stats seen;  /* what the area has of it */
} groups[MAX_GROUPS];
static long lock;

static struct ferry_agg_area *area(void)
{
    return ferry_agg_area();
}

static void add(uint64_t *p, uint64_t n)
{
    __atomic_add_fetch(p, n, __ATOMIC_RELAXED);
}

static void max_into(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static void take(void)
{
    while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
        YieldProcessor();
}

static void give(void)
{
    __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

void wagg_stats_group(struct ferry_group *g)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return;
    take();
    for (int i = 0; i < MAX_GROUPS; i++)
        if (!groups[i].g) {
            groups[i].g = g;
            ferry_zero(&groups[i].seen, sizeof(groups[i].seen));
            break;
        }
    give();
    const struct ferry_group_config *cfg = &g->cfg;
    a->version = FERRY_AGG_VERSION;
    if (a->npools < cfg->npools)
        a->npools = cfg->npools;
    for (unsigned i = 0; i < cfg->npools && i < FERRY_MAX_POOLS; i++)
        ferry_agg_pool_row_set(&a->pools[i], &cfg->pools[i]);
    ferry_copy(a->route, cfg->route, sizeof(a->route));
    add(&a->groups, 1);
    uint64_t magic;
    ferry_copy(&magic, FERRY_AGG_MAGIC, 8);
    __atomic_store_n((uint64_t *)a->magic, magic, __ATOMIC_RELEASE);
}

/* The deltas of one group's counters, under the lock */
static void publish(struct ferry_agg_area *a, struct ferry_group *g, struct ferry_group_stats *seen)
{
    struct ferry_group_stats now;
    ferry_group_stats(g, &now);
    add(&a->aggregated, now.aggregated - seen->aggregated);
    add(&a->native, now.native - seen->native);
    add(&a->worker, now.worker - seen->worker);
    add(&a->crossings, now.crossings - seen->crossings);
    add(&a->fibers, now.fibers - seen->fibers);
    add(&a->switches, now.switches - seen->switches);
    for (unsigned i = 0; i < now.npools && i < FERRY_MAX_POOLS; i++) {
        const struct ferry_pool_stats *n = &now.pools[i], *s = &seen->pools[i];
        struct ferry_agg_pool_row *p = &a->pools[i];
        add(&p->submitted, n->submitted - s->submitted);
        add(&p->completed, n->completed - s->completed);
        add(&p->enters, n->enters - s->enters);
        add(&p->wait_ns, n->wait_ns - s->wait_ns);
        max_into(&p->max_depth, n->max_depth);
        for (unsigned b = 0; b < FERRY_BATCH_BUCKETS; b++)
            add(&p->batches[b], n->batches[b] - s->batches[b]);
    }
    *seen = now;
}

static void each_group(struct ferry_group *only, int forget)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return;
    take();
    for (int i = 0; i < MAX_GROUPS; i++) {
        if (!groups[i].g || (only && groups[i].g != only))
            continue;
        publish(a, groups[i].g, &groups[i].seen);
        if (forget)
            groups[i].g = 0;
    }
    give();
}

void wagg_stats_publish(struct ferry_group *g)
{
    each_group(g, 0);
}

void wagg_stats_forget(struct ferry_group *g)
{
    each_group(g, 1);
}

void wagg_stats_publish_all(void)
{
    each_group(0, 0);
}

int wagg_stat_carrier_slot(void)
{
    struct ferry_agg_area *a = area();
    if (!a)
        return -1;
    add(&a->carriers, 1);
    return ferry_agg_claim_carrier_slot(a);
}

void wagg_stat_carrier(int slot, uint64_t fibers, uint64_t switches, uint64_t peak,
                       uint64_t handoffs, uint64_t completed)
{
    struct ferry_agg_area *a = area();
    if (!a || slot < 0)
        return;
    struct ferry_agg_carrier_row *r = &a->carrier[slot];   /* one writer: its carrier */
    r->fibers += fibers;
    r->switches += switches;
    r->crossings += handoffs;
    r->completed += completed;
    if (peak > r->peak)
        r->peak = peak;
}

void wagg_stat_depth(unsigned pool, uint64_t depth)
{
    struct ferry_agg_area *a = area();
    if (a && pool < FERRY_MAX_POOLS)
        add(&a->pools[pool].depth_sum, depth);
}
