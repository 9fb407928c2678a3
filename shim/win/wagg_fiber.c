/* Carriers and fibers on Windows fibers, as the thesis's clusterapi.dll ran
 * them.  CreateFiberEx/SwitchToFiber keep the TEB as Windows (and wine)
 * expect it for each fiber: NT_TIB's StackBase/StackLimit, the
 * DeallocationStack the stack probes (__chkstk, guard-page growth) rely on,
 * FiberData and the fiber-local storage.  So SEH, stack growth and wine's
 * own per-thread state behave on a fiber as on a thread.  An own switch
 * would have to swap every one of those fields itself; bench/pe_cluster.py
 * measures what SwitchToFiber costs under wine.
 */
#include <windows.h>
#include <errno.h>

#include "ferry_dll.h"
#include "wagg_fiber.h"
#include "wagg_stats.h"

uint32_t wagg_carrier_slot;

#define FIBER_STACK_DEFAULT (256 * 1024)

int wagg_init_slots(void)
{
    DWORD i = TlsAlloc();
    if (i == TLS_OUT_OF_INDEXES || i >= 64)
        return -1;      /* read straight from the TEB: an inline slot only */
    wagg_carrier_slot = TEB_TLS_SLOTS + 8 * i;
    return 0;
}

static void *zalloc(SIZE_T n)
{
    return HeapAlloc(GetProcessHeap(), HEAP_ZERO_MEMORY, n);
}

static void release(void *p)
{
    HeapFree(GetProcessHeap(), 0, p);
}

void wagg_fiber_ready(struct wagg_carrier *c, struct ferry_fiber *f)
{
    f->ready_seq = ++c->seq;
    f->next = 0;
    if (c->tail)
        c->tail->next = f;
    else
        c->head = f;
    c->tail = f;
}

static struct ferry_fiber *take_ready(struct wagg_carrier *c)
{
    struct ferry_fiber *f = c->head;
    if (f) {
        c->head = f->next;
        if (!c->head)
            c->tail = 0;
    }
    return f;
}

void wagg_fiber_park(struct wagg_carrier *c)
{
    SwitchToFiber(c->sched);
}

/* A fiber's first and last frames.  It must never return: a fiber's start
 * routine that returns ends the thread. */
static void WINAPI fiber_start(void *p)
{
    struct ferry_fiber *f = p;
    struct wagg_carrier *c = f->c;
    wagg_program_mode(c);
    f->fn(f->arg);
    wagg_ferry_mode(c);
    f->done = 1;
    for (;;)
        SwitchToFiber(c->sched);
}

static void fiber_free(struct ferry_fiber *f)
{
    struct wagg_carrier *c = f->c;
    if (f->all_prev)
        f->all_prev->all_next = f->all_next;
    else
        c->all = f->all_next;
    if (f->all_next)
        f->all_next->all_prev = f->all_prev;
    DeleteFiber(f->handle);
    release(f);
}

static int fiber_new(struct wagg_carrier *c, struct ferry_fiber **out, void (*fn)(void *), void *arg,
                     int joinable)
{
    struct ferry_fiber *f = zalloc(sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->c = c;
    f->fn = fn;
    f->arg = arg;
    f->joinable = joinable;
    size_t stack = c->g->cfg.fiber_stack;
    /* the whole stack reserved, committed as it is touched (guard page) */
    f->handle = CreateFiberEx(0, stack ? stack : FIBER_STACK_DEFAULT, FIBER_FLAG_FLOAT_SWITCH,
                              fiber_start, f);
    if (!f->handle) {
        release(f);
        return -ENOMEM;
    }
    f->all_next = c->all;
    if (c->all)
        c->all->all_prev = f;
    c->all = f;
    c->alive++;
    if (c->alive > c->peak)
        c->peak = c->alive;
    c->fibers++;
    wagg_add(c->g->st.fibers, 1);
    wagg_fiber_ready(c, f);
    if (out)
        *out = f;
    return 0;
}

/* How long a carrier with no fiber ready waits, by the wait policy of the
 * pool it has calls out on (the first such): for how many completions
 * (0: none, it only looks) and for at most how long.  Adaptive waits as
 * "any": the batch then follows the completion rate by itself (the calls
 * that completed while the fibers ran leave together).  Waiting for half the
 * calls out instead (more calls per batch) doubled the cost per call of
 * bench/pe_cluster_fibers.py at 256-1024 fibers under wine on 2 CPUs: the
 * waiting carrier spins on a CPU the workers need. */
static unsigned wait_for(const struct wagg_carrier *c, uint64_t *timeout_ns)
{
    unsigned p = 0;
    while (p < WAGG_NPOOLS - 1 && !c->pool_out[p])
        p++;
    const struct ferry_pool_config *pc = p < c->g->cfg.npools ? &c->g->cfg.pools[p] : 0;
    *timeout_ns = UINT64_MAX;
    switch (pc ? pc->wait : FERRY_WAIT_ANY) {
    case FERRY_WAIT_NONE:
        return 0;
    case FERRY_WAIT_SOME:
        *timeout_ns = pc->wait_timeout_ns;
        return pc->wait_limit < c->out ? pc->wait_limit : c->out;
    case FERRY_WAIT_ALL:
        return c->out;
    default:
        return 1;
    }
}

/* Fibers whose routed calls completed, ready again; with `wait`, as long as
 * the wait policy says.  (The calls were counted by the pool's workers as
 * they completed them, the wait by the client.) */
static void collect(struct wagg_carrier *c, int wait)
{
    struct ferry_call *done[256];
    uint64_t timeout = UINT64_MAX;
    unsigned min = wait ? wait_for(c, &timeout) : 0;
    uint64_t slept = c->cl ? c->cl->crossings : 0;
    int n = 0;
    do {
        int k = wagg_reap_calls(c->g, done, 256, min > 256 ? 256 : min, timeout);
        for (int i = 0; i < k; i++) {
            struct ferry_fiber *f = (struct ferry_fiber *)((char *)done[i] -
                                                           __builtin_offsetof(struct ferry_fiber, call));
            f->parked = 0;
            c->out--;
            c->pool_out[f->pool]--;
            c->completed++;
            wagg_fiber_ready(c, f);
        }
        n += k > 0 ? k : 0;
        min = (unsigned)n < min ? min - (unsigned)n : 0;
    } while (min && c->out && timeout == UINT64_MAX);
    if (c->cl && c->cl->crossings != slept) {
        c->crossings += c->cl->crossings - slept;
        wagg_stat_depth(0, c->out + (uint64_t)n);   /* in flight when it went to sleep */
    }
    if (wait && !n && !min)
        SwitchToThread();   /* wait "none" and nothing done: the workers' turn */
}

/* Each pool's stored calls leave as one batch: one wake of its workers
 * (a crossing only if one sleeps). */
static void kick(struct wagg_carrier *c)
{
    for (unsigned p = 0; p < WAGG_NPOOLS; p++) {
        unsigned n = c->stored[p];
        if (!n)
            continue;
        c->stored[p] = 0;
        c->nstored -= n;
        wagg_batch(c->g, p, n);
        if (wagg_kick(c->g, p)) {
            c->crossings++;
            wagg_stat_depth(p, c->out);
        }
    }
}

void wagg_carrier_drain(struct wagg_carrier *c)
{
    kick(c);
    if (c->out)
        collect(c, 1);
    else
        SwitchToThread();   /* rings full of other carriers' calls: theirs go first */
}

/* Windows fibers share the thread's TEB, and with it two fields that are a
 * thread's own to the code above ntdll: the last error, and WinSockData,
 * ws2_32's per-thread data, whose synchronous event every blocking Winsock
 * call waits on (wine's ws2_32: NtDeviceIoControlFile with that event, then
 * a wait on it).  Two fibers sharing one event each see the other's
 * completion.  Each fiber keeps its own, as a thread would; a finished
 * fiber's goes to the next fiber of the carrier (ws2_32 frees a thread's at
 * its exit, and knows nothing of fibers: freeing it is not ours to do). */
static void run(struct ferry_fiber *f)
{
    struct wagg_carrier *c = f->c;
    uint64_t own_ws = ferry_teb_get(TEB_WINSOCK_DATA);
    uint32_t own_le = ferry_teb_get32(TEB_LAST_ERROR);
    if (!f->winsock && c->nwinsock_spare)
        f->winsock = c->winsock_spare[--c->nwinsock_spare];
    ferry_teb_set(TEB_WINSOCK_DATA, (uint64_t)f->winsock);
    ferry_teb_set32(TEB_LAST_ERROR, f->last_error);
    SwitchToFiber(f->handle);
    f->winsock = (void *)ferry_teb_get(TEB_WINSOCK_DATA);
    f->last_error = ferry_teb_get32(TEB_LAST_ERROR);
    ferry_teb_set(TEB_WINSOCK_DATA, own_ws);
    ferry_teb_set32(TEB_LAST_ERROR, own_le);
    if (f->done && f->winsock && c->nwinsock_spare < sizeof(c->winsock_spare) / sizeof(void *)) {
        c->winsock_spare[c->nwinsock_spare++] = f->winsock;
        f->winsock = 0;
    }
}

/* The scheduler, on the thread's own fiber, in ferry mode: runs ready fibers
 * in turn; when none is, the stored calls leave and it waits for routed
 * calls to complete.  Stored calls also leave once every fiber that was
 * ready when the first of them was stored has had its turn: fibers that
 * only yield never keep them back.  0 once every fiber finished; -EDEADLK
 * when the ones left wait only on each other. */
static int schedule(struct wagg_carrier *c)
{
    while (c->alive) {
        if (c->out && !c->head)
            wagg_carrier_drain(c);
        else if (c->out)
            collect(c, 0);
        struct ferry_fiber *f = take_ready(c);
        if (!f) {
            if (c->out)
                continue;
            return -EDEADLK;
        }
        if (c->nstored && f->ready_seq > c->store_mark)
            kick(c);    /* a round since the oldest stored call */
        c->cur = f;
        c->switches++;
        run(f);
        c->cur = 0;
        if (!f->done)
            continue;
        c->alive--;
        if (f->joiner)
            wagg_fiber_ready(c, f->joiner);
        else if (!f->joinable)
            fiber_free(f);
    }
    return 0;
}

int ferry_carrier_run(struct ferry_group *g, void (*main)(void *), void *arg)
{
    if (!g || !main || !wagg_carrier_slot)
        return -EINVAL;
    if (wagg_current())
        return -EBUSY;
    struct wagg_carrier *c = zalloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->g = g;
    __atomic_add_fetch(&g->carriers, 1, __ATOMIC_RELAXED);
    c->slot = -1;
    int converted = !IsThreadAFiber();
    /* the NT_TIB's FiberData (GetCurrentFiber, which gcc takes for an
     * access out of bounds) */
    c->sched = converted ? ConvertThreadToFiber(0) : (void *)(uintptr_t)ferry_teb_get(0x20);
    if (!c->sched) {
        __atomic_sub_fetch(&g->carriers, 1, __ATOMIC_RELAXED);
        release(c);
        return -ENOMEM;
    }
    ferry_teb_set(wagg_carrier_slot, (uint64_t)(uintptr_t)c);
    wagg_ferry_mode(c);
    c->cl = wagg_client(g);
    c->slot = wagg_stat_carrier_slot();
    int r = fiber_new(c, 0, main, arg, 0);
    if (r == 0)
        r = schedule(c);
    /* fibers that finished unjoined, and after a deadlock the stuck ones */
    while (c->all)
        fiber_free(c->all);
    wagg_add(g->st.switches, c->switches);
    wagg_stat_carrier(c->slot, c->fibers, c->switches, c->peak, c->crossings, c->completed);
    wagg_stats_publish(g);
    __atomic_sub_fetch(&g->carriers, 1, __ATOMIC_RELAXED);
    wagg_program_mode(c);
    ferry_teb_set(wagg_carrier_slot, 0);
    if (ferry_route_slot)
        ferry_teb_set(ferry_route_slot, 0);
    if (converted)
        ConvertFiberToThread();
    release(c);
    return r;
}

/* The fiber-side API: called from program mode on a fiber of this thread. */
static struct ferry_fiber *self_on(struct wagg_carrier *c)
{
    return c ? c->cur : 0;
}

int ferry_fiber_spawn(struct ferry_fiber **out, void (*fn)(void *), void *arg)
{
    struct wagg_carrier *c = wagg_current();
    if (!self_on(c) || !fn)
        return -EINVAL;
    wagg_ferry_mode(c);
    int r = fiber_new(c, out, fn, arg, out != 0);
    wagg_program_mode(c);
    return r;
}

int ferry_fiber_yield(void)
{
    struct wagg_carrier *c = wagg_current();
    struct ferry_fiber *self = self_on(c);
    if (!self)
        return -EINVAL;
    wagg_ferry_mode(c);
    wagg_fiber_ready(c, self);
    wagg_fiber_park(c);
    wagg_program_mode(c);
    return 0;
}

int ferry_fiber_join(struct ferry_fiber *f)
{
    struct wagg_carrier *c = wagg_current();
    struct ferry_fiber *self = self_on(c);
    if (!self || !f || f->c != c || !f->joinable || f->joined || f->joiner)
        return -EINVAL;
    if (f == self)
        return -EDEADLK;
    wagg_ferry_mode(c);
    if (!f->done) {
        f->joiner = self;
        wagg_fiber_park(c);
    }
    f->joined = 1;
    fiber_free(f);
    wagg_program_mode(c);
    return 0;
}

struct ferry_fiber *ferry_fiber_self(void)
{
    return self_on(wagg_current());
}
