/* A pool's worker threads: they take calls from the pool's request ring,
 * run them as the program's thread would have (uncounted: the call was
 * counted where the program made it, or is a raw batch's), and put each in
 * its client's completion ring, waking the client only if it sleeps.  An
 * idle worker spins a little, then sleeps on the pool's wake word. */
#include <windows.h>

#include "wagg.h"

NTSTATUS NTAPI RtlWaitOnAddress(const void *addr, const void *cmp, SIZE_T size, const LARGE_INTEGER *timeout);
void NTAPI RtlWakeAddressSingle(const void *addr);
void NTAPI RtlWakeAddressAll(const void *addr);

#define SPIN 2000           /* polls of an empty ring before sleeping (a few microseconds) */

int wagg_wake_one(uint32_t *word, const uint32_t *sleepers)
{
    __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(sleepers, __ATOMIC_SEQ_CST))
        return 0;
    uint64_t was = ferry_own_begin();
    RtlWakeAddressSingle(word);
    ferry_own_end(was);
    return 1;
}

int wagg_sleep(uint32_t *word, uint32_t *sleepers, const struct wagg_ring *ready, int also,
               const void *timeout)
{
    uint32_t seen = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
    int r = -1;
    if (wagg_ring_empty(ready) && !also) {
        uint64_t was = ferry_own_begin();
        r = RtlWaitOnAddress(word, &seen, sizeof(seen), timeout) == STATUS_TIMEOUT;
        ferry_own_end(was);
    }
    __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    return r;
}

static void complete(struct ferry_group *g, unsigned pool, struct ferry_call *c, struct wagg_client *cl)
{
    c->result = wagg_run(c);
    while (wagg_ring_push(&cl->done, c, (void *)(uintptr_t)pool))
        YieldProcessor();   /* never full: a client has at most WAGG_DONE_CAP calls out */
    wagg_add(g->pools[pool].st.completed, 1);
    if (pool == WAGG_WORKER_POOL)
        wagg_add(g->st.worker, 1);
    else
        wagg_add(g->st.aggregated, 1);
    wagg_wake_one(&cl->wake, &cl->sleeping);
}

static int priority_of(int nice)
{
    return nice <= -15 ? THREAD_PRIORITY_HIGHEST : nice <= -5 ? THREAD_PRIORITY_ABOVE_NORMAL
         : nice < 5 ? THREAD_PRIORITY_NORMAL : nice < 15 ? THREAD_PRIORITY_BELOW_NORMAL
         : THREAD_PRIORITY_LOWEST;
}

static DWORD WINAPI worker_main(void *arg)
{
    ferry_own_thread();     /* nothing a worker does is the program's call */
    struct wagg_pool *p = arg;
    struct ferry_group *g = p->group;
    if (p->cfg.cpus)
        SetThreadAffinityMask(GetCurrentThread(), (DWORD_PTR)p->cfg.cpus);
    if (p->cfg.priority)
        SetThreadPriority(GetCurrentThread(), priority_of(p->cfg.priority));
    unsigned idle = 0;
    for (;;) {
        void *c, *cl;
        if (wagg_ring_pop(&p->req, &c, &cl) == 0) {
            idle = 0;
            /* a batch's one wake reaches one worker; the next one it wakes
             * (a wake missed here costs parallelism, not progress: this
             * worker comes back for the rest) */
            if (__atomic_load_n(&p->sleepers, __ATOMIC_RELAXED) && !wagg_ring_empty(&p->req))
                wagg_wake_one(&p->wake, &p->sleepers);
            complete(g, p->index, c, cl);
            continue;
        }
        if (__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE))
            return 0;
        if (++idle < SPIN) {
            YieldProcessor();
            continue;
        }
        idle = 0;
        wagg_sleep(&p->wake, &p->sleepers, &p->req, (int)__atomic_load_n(&g->stop, __ATOMIC_SEQ_CST), 0);
    }
}

int wagg_pool_start(struct ferry_group *g, unsigned pool, unsigned nworkers)
{
    struct wagg_pool *p = &g->pools[pool];
    p->group = g;
    p->index = pool;
    p->threads = VirtualAlloc(0, nworkers * sizeof(void *), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (!p->threads)
        return -ENOMEM;
    uint64_t was = ferry_own_begin();
    for (; p->nworkers < nworkers; p->nworkers++) {
        /* the stack reserved, committed as used: a call may raise and unwind on it */
        HANDLE h = ferry_own_thread_create(worker_main, p, 256 * 1024);
        if (!h)
            break;
        p->threads[p->nworkers] = h;
    }
    ferry_own_end(was);
    return p->nworkers == nworkers ? 0 : -ENOMEM;
}

void wagg_pools_stop(struct ferry_group *g)
{
    uint64_t was = ferry_own_begin();
    __atomic_store_n(&g->stop, 1, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; i < WAGG_NPOOLS; i++) {
        struct wagg_pool *p = &g->pools[i];
        __atomic_fetch_add(&p->wake, 1, __ATOMIC_SEQ_CST);
        RtlWakeAddressAll(&p->wake);
        for (unsigned k = 0; k < p->nworkers; k++) {
            WaitForSingleObject(p->threads[k], INFINITE);
            CloseHandle(p->threads[k]);
        }
        if (p->threads)
            VirtualFree(p->threads, 0, MEM_RELEASE);
        p->threads = 0;
        p->nworkers = 0;
        p->up = 0;
        wagg_ring_free(&p->req);
    }
    ferry_own_end(was);
}
