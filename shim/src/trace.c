#include "trace.h"

#include "store.h"

static uint64_t ticks_to_ns(uint64_t ticks)
{
    const struct ferry_proc_header *h = ferry_hdr;
    if (!h || !h->cal_tsc)
        return ticks;
    return (uint64_t)(((unsigned __int128)ticks * h->cal_ns) / h->cal_tsc);
}

/* Errno slots probed first within the table's first page (256 slots), then
 * over the whole table: the few (number, errno) pairs of most processes
 * land in one page of the record instead of one page each.  Slots are never
 * given back, so a key is always found where this order put it. */
#define ERRNO_NEAR (4096 / sizeof(struct ferry_errno_slot))

static int errno_slot(struct ferry_errno_slot *s, uint32_t key)
{
    if (s->key == key || s->key == 0) {
        s->key = key;
        s->count++;
        return 1;
    }
    return 0;
}

static void count_errno(struct ferry_blk *b, long nr, long err)
{
    uint32_t key = (uint32_t)nr << 16 | (uint32_t)err;
    uint32_t h = key * 2654435761u;
    for (uint32_t probe = 0, i = h % ERRNO_NEAR; probe < 16; probe++, i = (i + 1) % ERRNO_NEAR)
        if (errno_slot(&b->errnos[i], key))
            return;
    for (uint32_t probe = 0, i = h % FERRY_ERRNO_SLOTS; probe < 16; probe++, i = (i + 1) % FERRY_ERRNO_SLOTS)
        if (errno_slot(&b->errnos[i], key))
            return;
}

void ferry_trace_record(struct ferry_blk *b, long nr, long result, uint64_t t0, uint64_t t1,
                        uint32_t site)
{
    if (!b || (unsigned long)nr >= FERRY_NR_MAX)
        return;
    struct ferry_nr_stats *s = ferry_nr_figures(b, (unsigned)nr);
    if (!s)
        return;
    uint64_t d = t1 - t0;
    int failed = result < 0 && result > -4096;
    s->time_total += d;
    if (s->time_min == 0 || d < s->time_min)
        s->time_min = d ? d : 1;
    if (d > s->time_max)
        s->time_max = d;
    uint64_t ns = ticks_to_ns(d);
    int bucket = ns ? 63 - __builtin_clzll(ns) : 0;
    s->hist[bucket < FERRY_HIST_BUCKETS ? bucket : FERRY_HIST_BUCKETS - 1]++;
    if (failed) {
        s->errors++;
        count_errno(b, nr, -result);
    }
    if (site && site <= FERRY_MAX_SITES) {
        struct ferry_site_stats *ss = &b->sites[site - 1];
        ss->calls++;
        ss->errors += failed;
        ss->time_total += d;
    }
    uint32_t cap = ferry_hdr ? ferry_hdr->event_capacity : 0;
    if (cap) {
        struct ferry_event *e = &b->events[b->event_head % cap];
        e->enter_tsc = t0;
        e->exit_tsc = t1;
        e->result = result;
        e->nr = (uint16_t)nr;
        e->site = site;
        __atomic_store_n(&b->event_head, b->event_head + 1, __ATOMIC_RELEASE);
    }
}
