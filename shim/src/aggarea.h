/* The aggregation area of a process file (struct ferry_proc_header's
 * `aggregate`): the engine's figures, written by agg_stats.c as they happen
 * and read by ferry/aggdata.py through ferry.base.layouts, which takes every
 * offset from this header.  Little-endian, all zero while the process has
 * created no group; several groups of one process add into the same area.
 */
#ifndef FERRY_AGGAREA_H
#define FERRY_AGGAREA_H

#include <stdint.h>

#include "ferry.h"

#define FERRY_AGG_MAGIC "FERRYAGG"
#define FERRY_AGG_VERSION 1
#define FERRY_AGG_CARRIER_SLOTS 64

struct ferry_agg_pool_row {
    uint64_t submitted;
    uint64_t completed;
    uint64_t enters;                /* io_uring_enter calls on this pool */
    uint64_t max_depth;             /* most calls in flight at once */
    uint64_t wait_ns;               /* time spent waiting in io_uring_enter */
    uint64_t depth_sum;             /* calls in flight at submit, summed over enters */
    uint64_t reserved[2];
    uint64_t batches[FERRY_BATCH_BUCKETS];  /* calls per enter: bucket i holds 2^i .. 2^(i+1)-1 */
    /* the pool's settings (struct ferry_pool_config) */
    uint32_t entries;
    uint32_t concurrency;
    uint64_t cpus;
    int32_t sqpoll_cpu;
    int32_t priority;
    uint32_t wait;                  /* enum ferry_wait */
    uint32_t wait_limit;
    uint64_t wait_timeout_ns;
    char pad[56];
};

struct ferry_agg_carrier_row {      /* one carrier's figures; one writer, its carrier */
    uint64_t fibers;                /* fibers that ran on it (threads placed, API fibers) */
    uint64_t switches;              /* fiber switches on it */
    uint64_t crossings;             /* io_uring_enter calls it made */
    uint64_t completed;             /* calls completed through its rings */
    uint64_t peak;                  /* most fibers alive on it at once */
};

struct ferry_agg_area {
    char magic[8];                  /* FERRY_AGG_MAGIC, stored last */
    uint32_t version;
    uint32_t npools;                /* the most pools of any group */
    uint64_t aggregated;            /* calls executed through a pool (io_uring) */
    uint64_t native;                /* calls of fibers executed at once */
    uint64_t worker;                /* calls executed by worker threads */
    uint64_t crossings;             /* io_uring_enter calls + native + worker */
    uint64_t fibers;                /* fibers created */
    uint64_t switches;              /* fiber switches */
    uint64_t carriers;              /* carriers that ran */
    uint64_t groups;                /* groups created */
    struct ferry_agg_pool_row pools[FERRY_MAX_POOLS];
    uint8_t route[FERRY_NR_MAX];    /* the routing table: pool index or FERRY_ROUTE_* */
    uint32_t carrier_slots;         /* rows used below; later carriers count only in the totals */
    uint32_t reserved;
    struct ferry_agg_carrier_row carrier[FERRY_AGG_CARRIER_SLOTS];
};

_Static_assert(sizeof(struct ferry_agg_pool_row) == 256, "aggregation area layout");

/* A carrier's row in the area, or -1 when every row is taken (both engines) */
static inline int ferry_agg_claim_carrier_slot(struct ferry_agg_area *a)
{
    uint32_t n = __atomic_load_n(&a->carrier_slots, __ATOMIC_RELAXED);
    do
        if (n >= FERRY_AGG_CARRIER_SLOTS)
            return -1;
    while (!__atomic_compare_exchange_n(&a->carrier_slots, &n, n + 1, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return (int)n;
}

/* A pool's settings as the file shows them (both engines, Linux and ferry.dll) */
static inline void ferry_agg_pool_row_set(struct ferry_agg_pool_row *p, const struct ferry_pool_config *pc)
{
    p->entries = pc->entries ? pc->entries : 256;
    p->concurrency = pc->concurrency;
    p->cpus = pc->cpus;
    p->sqpoll_cpu = pc->sqpoll_cpu;
    p->priority = pc->priority;
    p->wait = pc->wait;
    p->wait_limit = pc->wait_limit;
    p->wait_timeout_ns = pc->wait_timeout_ns;
}

#endif
