#include "trace.h"

#include "store.h"
#include "util.h"

/* Nanoseconds a tick, in 32.32 fixed point, from the record's calibration
 * (ferry_trace_set_rate): every traced call multiplies by it, where it
 * divided a 128-bit product by the rate (a call into libgcc's __udivti3,
 * code that lay apart from the rest of the path).  The factor's error is
 * below 2^-32 ns a tick: under 0.3 ns in a second. */
static uint64_t ns_per_tick FERRY_HOT;

void ferry_trace_set_rate(uint64_t tsc, uint64_t ns)
{
    uint64_t q = 0, r;
    /* (ns << 32) / tsc with one divq; its quotient fits 64 bits when
     * ns >> 32 < tsc, true of every rate of a TSC above 1 Hz */
    if (tsc && (ns >> 32) < tsc)
        __asm__("divq %[d]" : "=a"(q), "=d"(r) : "a"(ns << 32), "d"(ns >> 32), [d] "rm"(tsc) : "cc");
    ns_per_tick = q;
}

static uint64_t ticks_to_ns(uint64_t ticks)
{
    if (!ferry_hdr || !ns_per_tick)
        return ticks;
    return (uint64_t)(((unsigned __int128)ticks * ns_per_tick) >> 32);
}

/* The entry for `key` (not 0) in a table of entries of `size` bytes, each
 * beginning with its key (0: free), among `tries` of the `n` entries (a
 * power of two) from entry `first` on, looked for from the `from`th; 0 when
 * none of them is its or free.  The first free entry met is taken, and
 * entries are never given back, so a key is always met before a free entry,
 * where the same order put it.  Taken by compare-and-swap: a signal handler
 * on this thread may record a call in the middle. */
static void *keyed_entry(void *table, size_t size, uint32_t key, uint32_t from, uint32_t first, uint32_t n,
                         uint32_t tries)
{
    for (uint32_t probe = 0; probe < tries; probe++) {
        uint32_t *at = (uint32_t *)((char *)table + (first + ((from + probe) & (n - 1))) * size);
        uint32_t was = __atomic_load_n(at, __ATOMIC_RELAXED);
        if (!was && __atomic_compare_exchange_n(at, &was, key, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return at;
        if (was == key)  /* its own, or taken for it meanwhile (was: what the swap found) */
            return at;
    }
    return 0;
}

_Static_assert(__builtin_offsetof(struct ferry_errno_slot, key) == 0 &&
               __builtin_offsetof(struct ferry_site_stats, site) == 0, "keyed tables: the key first");

/* Errno slots probed first within the table's first page (256 slots), then
 * over the whole table: the few (number, errno) pairs of most processes
 * land in one page of the record instead of one page each. */
#define ERRNO_NEAR (4096 / sizeof(struct ferry_errno_slot))
#define ERRNO_TRIES 16

static void spill(struct ferry_blk *b, uint32_t what)
{
    if (!(__atomic_load_n(&b->spilled, __ATOMIC_RELAXED) & what))
        __atomic_fetch_or(&b->spilled, what, __ATOMIC_RELAXED);
}

static void count_errno(struct ferry_blk *b, long nr, long err)
{
    uint32_t key = (uint32_t)nr << 16 | (uint32_t)err;
    /* The product's high bits, which depend on all of the key's: its low
     * ones depend only on the key's low ones, the errno, so that every
     * number failing with one errno was looked for at the same 16 entries,
     * and the counts of those beyond them were lost (a process whose calls
     * of 20 numbers failed with EBADF kept the errno of ~16). */
    uint32_t h = (key * 2654435761u) >> 16;
    struct ferry_errno_slot *e = keyed_entry(b->errnos, sizeof(*e), key, h, 0, ERRNO_NEAR, ERRNO_TRIES);
    if (!e) {
        spill(b, FERRY_SPILL_ERRNOS);
        e = keyed_entry(b->errnos, sizeof(*e), key, h, 0, FERRY_ERRNO_SLOTS, ERRNO_TRIES);
    }
    if (e)
        e->count++;
}

/* A site's entry: a few entries within the table's first page, then a few
 * within its next four pages, then the whole table, which has an entry for
 * every site there can be: a process's first ~100 sites share a page, its
 * first ~600 five, and every site finds an entry. */
#define SITE_NEAR (4096 / sizeof(struct ferry_site_stats))
#define SITE_TRIES 16
_Static_assert((SITE_NEAR & (SITE_NEAR - 1)) == 0 && (FERRY_MAX_SITES & (FERRY_MAX_SITES - 1)) == 0 &&
               (ERRNO_NEAR & (ERRNO_NEAR - 1)) == 0 && (FERRY_ERRNO_SLOTS & (FERRY_ERRNO_SLOTS - 1)) == 0 &&
               5 * SITE_NEAR <= FERRY_MAX_SITES, "keyed tables probed with a mask");

static struct ferry_site_stats *site_figures(struct ferry_blk *b, uint32_t site)
{
    /* the product's high bits depend on all of the number's */
    uint32_t h = (site * 2654435761u) >> 16;
    size_t size = sizeof(struct ferry_site_stats);
    struct ferry_site_stats *ss = keyed_entry(b->sites, size, site, h, 0, SITE_NEAR, SITE_TRIES);
    if (ss)
        return ss;
    /* flagged before the entry is taken: its record reads the pages then */
    spill(b, FERRY_SPILL_SITES_NEAR);
    ss = keyed_entry(b->sites, size, site, h, SITE_NEAR, 4 * SITE_NEAR, SITE_TRIES);
    if (ss)
        return ss;
    spill(b, FERRY_SPILL_SITES_FAR);
    return keyed_entry(b->sites, size, site, h, 0, FERRY_MAX_SITES, FERRY_MAX_SITES);
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
    struct ferry_site_stats *ss = site && site <= FERRY_MAX_SITES ? site_figures(b, site) : 0;
    if (ss) {
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
