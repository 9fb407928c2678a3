/* A process's end while calls of its fibers sit in its rings.
 *
 * A call parked in a ring (a read on a pipe, an accept) holds its
 * descriptor's file.  When a process ends, the kernel cancels what its rings
 * still hold from a workqueue, once the last reference to the ring is gone:
 * after the process could be reaped.  For a few milliseconds after its
 * parent's wait returns, a pipe it read still has a reader (a writer gets no
 * EPIPE) and a socket it listened on stays bound (a restart's bind gets
 * EADDRINUSE).  Natively those files are closed before the parent can reap.
 *
 * So exit_group first has every carrier of the process cancel what its rings
 * hold, and wait for it (IORING_REGISTER_SYNC_CANCEL): the files are then
 * released with the threads that submitted them, before the process is a
 * zombie.  A ring registered with IORING_REGISTER_RING_FDS can be named only
 * by the thread that registered it, so the exiting thread cancels its own
 * carrier's rings and asks the others to cancel theirs and stop; it waits
 * for them a bounded time (a carrier blocked in a native call cannot answer).
 * A process ended by a signal runs none of this: docs/aggregate.md says what
 * that leaves.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

#ifndef IORING_REGISTER_SYNC_CANCEL
#define IORING_REGISTER_SYNC_CANCEL 24
#endif

/* How long one ring's cancellation may wait for calls that are running (a
 * worker's read of a file cannot be stopped), and how long the exiting
 * thread waits for the other carriers. */
#define CANCEL_WAIT_NS 10000000L
#define OTHERS_WAIT_NS 20000000ULL
#define NUDGE_NS 1000000L

static int exiting;        /* 1 once a thread of the world began exit_group */
static unsigned stopped;   /* carriers that cancelled their calls and stopped */

int agg_exiting(void) { return __atomic_load_n(&exiting, __ATOMIC_ACQUIRE); }

static void cancel_ring(struct io_uring *ring)
{
    struct io_uring_sync_cancel_reg reg;
    ferry_memset(&reg, 0, sizeof(reg));
    reg.fd = -1;
    reg.flags = IORING_ASYNC_CANCEL_ANY;
    reg.timeout.tv_sec = 0;
    reg.timeout.tv_nsec = CANCEL_WAIT_NS;
    agg_ring_register(ring, IORING_REGISTER_SYNC_CANCEL, &reg, 1);
}

static void cancel_carrier(struct agg_carrier *c)
{
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (c->pools[i].up)
            cancel_ring(&c->pools[i].ring);
}

/* From the carrier loop of a carrier that found agg_exiting(): it cancels
 * its calls, says so, and runs nothing more; exit_group ends its thread. */
void agg_exit_stop(struct agg_carrier *c)
{
    cancel_carrier(c);
    __atomic_add_fetch(&stopped, 1, __ATOMIC_SEQ_CST);
    ferry_raw6(SYS_futex, (long)&stopped, 129 /* FUTEX_WAKE_PRIVATE */, 1, 0, 0, 0);
    int never = 0;
    for (;;)
        ferry_raw6(SYS_futex, (long)&never, 128 /* FUTEX_WAIT_PRIVATE */, 0, 0, 0, 0);
}

/* exit_group from a fiber of this process's world (shim.c). */
FERRY_HOT_TEXT void agg_exit_cancel(void)
{
    /* A vfork child (or another child sharing the memory) sees its parent's
     * carriers and flags: it must not stop them, nor cancel their calls
     * through a ring descriptor it holds a copy of. */
    if (agg_in_vfork_child())
        return;
    struct agg_carrier *mine = agg_carrier;
    if (mine && ferry_raw0(SYS_gettid) != mine->tid)
        mine = 0;
    struct agg_carrier *others[AGG_MAX_CARRIERS];
    unsigned n = agg_threads_world(others, AGG_MAX_CARRIERS);
    if (!mine && !n)
        return;
    /* a second exit_group meanwhile: the first one asks the carriers */
    int first = !__atomic_exchange_n(&exiting, 1, __ATOMIC_ACQ_REL);
    if (mine)
        cancel_carrier(mine);
    if (!first)
        return;
    unsigned want = 0;
    for (unsigned i = 0; i < n; i++)
        if (others[i] != mine)
            others[want++] = others[i];
    uint64_t deadline = agg_now_ns() + OTHERS_WAIT_NS;
    for (;;) {
        unsigned seen = __atomic_load_n(&stopped, __ATOMIC_SEQ_CST);
        if (seen >= want || agg_now_ns() >= deadline)
            break;
        /* again each time: a carrier that was about to sleep missed the last */
        for (unsigned i = 0; i < want; i++)
            agg_kick(others[i]);
        struct timespec ts = {0, NUDGE_NS};
        ferry_raw6(SYS_futex, (long)&stopped, 128 /* FUTEX_WAIT_PRIVATE */, seen, (long)&ts, 0, 0);
    }
}
