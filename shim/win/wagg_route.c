/* Routing a fiber's Nt* call: the C half of the route hook.
 *
 * A patched stub's trampoline, having counted the call, looks at the TEB's
 * route word: 0 on every thread that is not a carrier running a fiber, so
 * there the call goes on into the stub at the cost of one compare.  On a
 * carrier in program mode it jumps to wagg_route_entry (wagg_route_entry.S),
 * which gathers the 4 register and 12 stack argument slots and calls
 * wagg_route_call: 0 sends the call on into its stub at once (native), 1
 * returns *result to the program as the stub's status.
 *
 * Calls that stay on their own thread whatever the route table says:
 *  - wagg_must_native's (wagg_native.c): the ones about the calling thread
 *    itself (its context, exceptions and callbacks: NtContinue,
 *    NtRaiseException, NtCallbackReturn; its alerts and APCs: NtTestAlert,
 *    NtWaitForAlertByThreadId; NtGet/SetContextThread, NtTerminateThread and
 *    every other *Thread call given the current thread (-2 or 0); its
 *    windows and GDI state: every NtUser and NtGdi call), and the process's
 *    end and children (NtTerminateProcess, NtCreateUserProcess: ferry.dll's
 *    hooks);
 *  - here: a wait that is alertable (user APCs run only on the thread that
 *    waits: on a worker they would run there, or never), and I/O given an
 *    APC routine (it is queued to the thread that started the I/O).
 * A routed wait on a mutant is owned by the worker that waited: programs
 * that route waits must not use mutants on fibers (docs/aggregate.md).
 */
#include <windows.h>

#include "wagg_fiber.h"
#include "wagg_stats.h"

/* Per stub index, learnt from its name on first use: KNOWN, the argument
 * (+1; 0: none) that is the Alertable flag (a BOOLEAN: its low byte) or,
 * with APC, the APC routine (a pointer). */
#define KNOWN 0x80
#define APC 0x40
#define ARG 0x0f
static uint8_t apc_arg[FERRY_WIN_MAX_STUBS];

static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

static uint8_t apc_arg_of(const char *name)
{
    static const struct {
        const char *name;
        uint8_t arg;
    } calls[] = {
        {"NtWaitForSingleObject", 2}, {"NtWaitForMultipleObjects", 4}, {"NtDelayExecution", 1},
        {"NtSignalAndWaitForSingleObject", 3}, {"NtRemoveIoCompletionEx", 6},
        {"NtWaitForKeyedEvent", 3}, {"NtReleaseKeyedEvent", 3},
        {"NtReadFile", APC | 3}, {"NtWriteFile", APC | 3}, {"NtDeviceIoControlFile", APC | 3},
        {"NtFsControlFile", APC | 3}, {"NtReadFileScatter", APC | 3},
        {"NtWriteFileGather", APC | 3}, {"NtLockFile", APC | 3},
        {"NtNotifyChangeDirectoryFile", APC | 3}, {"NtQueryDirectoryFile", APC | 3},
    };
    for (unsigned i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        if (same(name, calls[i].name))
            return calls[i].arg;
    return 0;
}

/* Whether this call, with these arguments, must run on the fiber's thread. */
static int stays_here(unsigned index, const uint64_t *args)
{
    if (wagg_must_native(index, (const long long *)args))
        return 1;
    uint8_t a = __atomic_load_n(&apc_arg[index], __ATOMIC_RELAXED);
    if (!a) {
        const struct ferry_stub *s = ferry_stub_at(index);
        a = KNOWN | (s ? apc_arg_of(s->name) : 0);
        __atomic_store_n(&apc_arg[index], a, __ATOMIC_RELAXED);
    }
    if (!(a & ARG))
        return 0;
    uint64_t v = args[(a & ARG) - 1];
    return a & APC ? v != 0 : (v & 0xff) != 0;
}

/* Store the fiber's call on `pool` (it leaves with the carrier's next kick,
 * wagg_fiber.c) and park the fiber until the call completed. */
static int64_t aggregate(struct wagg_carrier *c, unsigned pool, unsigned index, const uint64_t *args)
{
    struct ferry_fiber *f = c->cur;
    f->call.nr = index;
    for (int i = 0; i < FERRY_CALL_ARGS; i++)
        f->call.args[i] = (ferry_word)args[i];
    f->call.result = 0;
    f->call.done = 0;
    int r;
    while ((r = wagg_push(c->g, pool, &f->call)) == -EAGAIN)
        wagg_carrier_drain(c);   /* the rings are full: let the stored calls go first */
    if (r) {    /* no client for this thread (out of memory, or of client slots): here */
        wagg_add(c->g->st.native, 1);
        wagg_add(c->g->st.crossings, 1);
        return wagg_native(index, args);
    }
    if (!c->nstored++)
        c->store_mark = c->seq;
    c->out++;
    c->pool_out[pool]++;
    c->stored[pool]++;
    f->pool = pool;
    f->parked = 1;
    wagg_fiber_park(c);
    return f->call.result;
}

int wagg_route_call(unsigned index, uint64_t *args, int64_t *result)
{
    struct wagg_carrier *c = wagg_current();
    if (!c || !c->cur || index >= FERRY_NR_MAX)
        return 0;
    unsigned target = c->g->cfg.route[index];
    unsigned pool = target == FERRY_ROUTE_WORKER ? WAGG_WORKER_POOL : target;
    if (target == FERRY_ROUTE_NATIVE || (target != FERRY_ROUTE_WORKER && target >= c->g->cfg.npools)
        || stays_here(index, args)) {
        wagg_add(c->g->st.native, 1);
        wagg_add(c->g->st.crossings, 1);
        return 0;
    }
    wagg_ferry_mode(c);
    *result = aggregate(c, pool, index, args);
    wagg_program_mode(c);
    return 1;
}
