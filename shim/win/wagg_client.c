/* Clients: a thread of the program using a group.  Its calls complete into
 * its own completion ring, read from memory; it crosses into the kernel
 * only to wake a sleeping worker (once per batch) or to sleep on its ring. */
#include <windows.h>

#include "wagg.h"

#define SPIN 4000           /* polls of an empty completion ring before sleeping */

/* Whether no thread runs under `tid` any more.  Thread ids are reused: a
 * thread alive under it is the client's own or a new one, which finds the
 * client by its id and may use it. */
static int thread_gone(uint32_t tid)
{
    HANDLE h = OpenThread(THREAD_QUERY_LIMITED_INFORMATION, FALSE, tid);
    if (!h)
        return 1;
    DWORD code = STILL_ACTIVE;
    int gone = GetExitCodeThread(h, &code) && code != STILL_ACTIVE;
    CloseHandle(h);
    return gone;
}

/* With every entry taken: the client of a thread that has ended with
 * nothing in flight (no worker will write to its ring, and its owner, the
 * only one that changes its counts, is gone) becomes the caller's.  A
 * program that starts threads for ever and uses a group from each would
 * otherwise be refused from its 257th thread on.  Under the group's lock. */
static struct wagg_client *take_over(struct ferry_group *g, uint32_t tid)
{
    for (uint32_t i = 0; i < g->nclients; i++) {
        struct wagg_client *cl = g->clients[i];
        if (__atomic_load_n(&cl->inflight, __ATOMIC_ACQUIRE) || !thread_gone(cl->tid))
            continue;
        cl->sleeping = 0;
        __atomic_store_n(&cl->tid, tid, __ATOMIC_RELEASE);
        return cl;
    }
    return 0;
}

static void lock_group(struct ferry_group *g)
{
    while (__atomic_exchange_n(&g->lock, 1, __ATOMIC_ACQUIRE))
        YieldProcessor();
}

static void unlock_group(struct ferry_group *g) { __atomic_store_n(&g->lock, 0, __ATOMIC_RELEASE); }

/* take_over with the group's lock taken here (ferry.dll's own calls: not the program's) */
static struct wagg_client *take_over_locking(struct ferry_group *g, uint32_t tid)
{
    uint64_t was = ferry_own_begin();
    lock_group(g);
    struct wagg_client *cl = take_over(g, tid);
    unlock_group(g);
    ferry_own_end(was);
    return cl;
}

struct wagg_client *wagg_client(struct ferry_group *g)
{
    uint32_t tid = (uint32_t)GetCurrentThreadId();
    uint32_t n = __atomic_load_n(&g->nclients, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (__atomic_load_n(&g->clients[i]->tid, __ATOMIC_ACQUIRE) == tid)
            return g->clients[i];
    if (n == WAGG_MAX_CLIENTS)
        return take_over_locking(g, tid);
    /* only this thread adds itself: the list before it is all it can be in */
    uint64_t was = ferry_own_begin();
    struct wagg_client *cl = VirtualAlloc(0, sizeof(*cl), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (cl && wagg_ring_init(&cl->done, WAGG_DONE_CAP)) {
        VirtualFree(cl, 0, MEM_RELEASE);
        cl = 0;
    }
    ferry_own_end(was);
    if (!cl)
        return 0;
    cl->g = g;
    cl->tid = tid;
    lock_group(g);
    n = g->nclients;
    int added = n < WAGG_MAX_CLIENTS;
    if (added) {
        g->clients[n] = cl;
        __atomic_store_n(&g->nclients, n + 1, __ATOMIC_RELEASE);
    }
    unlock_group(g);
    if (added)
        return cl;
    /* the others took the last entries meanwhile */
    was = ferry_own_begin();
    wagg_ring_free(&cl->done);
    VirtualFree(cl, 0, MEM_RELEASE);
    ferry_own_end(was);
    return take_over_locking(g, tid);
}

/* 0, or -EBUSY when a client still has calls out (a worker may be using
 * the memory they name) */
int wagg_clients_idle(struct ferry_group *g)
{
    for (uint32_t i = 0; i < g->nclients; i++)
        if (__atomic_load_n(&g->clients[i]->inflight, __ATOMIC_ACQUIRE))
            return -EBUSY;
    return 0;
}

void wagg_clients_free(struct ferry_group *g)
{
    for (uint32_t i = 0; i < g->nclients; i++) {
        wagg_ring_free(&g->clients[i]->done);
        VirtualFree(g->clients[i], 0, MEM_RELEASE);
    }
    g->nclients = 0;
}

int wagg_push(struct ferry_group *g, unsigned pool, struct ferry_call *c)
{
    struct wagg_client *cl = wagg_client(g);
    if (!cl)
        return -ENOMEM;
    if (cl->inflight >= WAGG_DONE_CAP)
        return -EAGAIN;
    /* pools of the configuration run from the group's start: no look at
     * the pool's state (a line workers write) per call */
    int r = pool == WAGG_WORKER_POOL ? wagg_pool_ensure(g, pool) : 0;
    if (r)
        return r;
    struct wagg_pool *p = &g->pools[pool];
    c->done = 0;
    if (wagg_ring_push(&p->req, c, cl))
        return -EAGAIN;
    cl->inflight++;
    cl->pool_inflight[pool]++;
    return 0;
}

int wagg_kick(struct ferry_group *g, unsigned pool)
{
    struct wagg_pool *p = &g->pools[pool];
    if (!wagg_wake_one(&p->wake, &p->sleepers))
        return 0;
    wagg_add(g->st.crossings, 1);
    wagg_add(p->st.enters, 1);
    return 1;
}

void wagg_batch(struct ferry_group *g, unsigned pool, unsigned n)
{
    struct ferry_pool_stats *s = &g->pools[pool].st;
    unsigned b = 0;
    while (b < FERRY_BATCH_BUCKETS - 1 && (n >> (b + 1)))
        b++;
    wagg_add(s->batches[b], 1);
    wagg_add(s->submitted, n);
    /* the depth as the submitting thread sees it (its calls out on the
     * pool), once per batch: a pool-wide count kept per call would move a
     * cache line between client and worker for every call */
    struct wagg_client *cl = wagg_client(g);
    uint64_t depth = cl ? cl->pool_inflight[pool] : 0;
    uint64_t max = __atomic_load_n(&s->max_depth, __ATOMIC_RELAXED);
    while (depth > max && !__atomic_compare_exchange_n(&s->max_depth, &max, depth, 1,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

int wagg_client_pop(struct wagg_client *cl, struct ferry_call **c, unsigned *pool)
{
    void *a, *b;
    if (wagg_ring_pop(&cl->done, &a, &b))
        return -1;
    *c = a;
    *pool = (unsigned)(uintptr_t)b;
    cl->inflight--;
    cl->pool_inflight[*pool]--;
    __atomic_store_n(&(*c)->done, 1, __ATOMIC_RELEASE);
    return 0;
}

uint64_t wagg_now_ns(void)
{
    return ferry_ticks_ns(__builtin_ia32_rdtsc());
}

uint64_t wagg_deadline(uint64_t timeout_ns)
{
    uint64_t now = wagg_now_ns();
    return timeout_ns >= UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
}

int wagg_client_wait(struct ferry_group *g, struct wagg_client *cl, unsigned pool, uint64_t deadline_ns)
{
    for (int k = 0; k < SPIN; k++) {
        if (!wagg_ring_empty(&cl->done))
            return 0;
        YieldProcessor();
    }
    LARGE_INTEGER rel, *timeout = 0;
    if (deadline_ns != UINT64_MAX) {
        uint64_t now = wagg_now_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        rel.QuadPart = -(LONGLONG)((deadline_ns - now + 99) / 100);
        timeout = &rel;
    }
    uint64_t t0 = __builtin_ia32_rdtsc();
    int r = wagg_sleep(&cl->wake, &cl->sleeping, &cl->done, 0, timeout);
    if (r >= 0) {       /* it slept: a crossing, and time waited */
        cl->crossings++;
        wagg_add(g->st.crossings, 1);
        wagg_add(g->pools[pool].st.enters, 1);
        wagg_add(g->pools[pool].st.wait_ns, ferry_ticks_ns(__builtin_ia32_rdtsc() - t0));
    }
    return r == 1 ? -ETIMEDOUT : 0;
}

int wagg_reap_calls(struct ferry_group *g, struct ferry_call **out, unsigned cap, unsigned min,
                    uint64_t timeout_ns)
{
    struct wagg_client *cl = wagg_client(g);
    if (!cl)
        return -ENOMEM;
    uint64_t deadline = wagg_deadline(timeout_ns);
    unsigned got = 0, pool;
    struct ferry_call *c;
    for (;;) {
        while (got < cap && wagg_client_pop(cl, &c, &pool) == 0)
            out[got++] = c;
        if (got >= min || got == cap || !cl->inflight)
            return (int)got;
        if (wagg_client_wait(g, cl, 0, deadline)) {
            while (got < cap && wagg_client_pop(cl, &c, &pool) == 0)
                out[got++] = c;
            return (int)got;
        }
    }
}
