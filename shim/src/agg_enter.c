/* Entering a carrier's ring: what its SQ holds goes to the kernel, and the
 * carrier waits for completions, entering the kernel only when it must.
 *
 * liburing's submit calls do not say whether they entered (with SQPOLL a
 * submit enters only to wake the thread; a wait for completions already in
 * the CQ need not enter, yet io_uring_submit_and_wait does), and the
 * engine's crossings must count every io_uring_enter and nothing else: the
 * decision is made here, and the answer says whether it entered.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"

/* liburing's own flush (static in its queue.c): the SQEs written since the
 * last one become the kernel's; how many it has not consumed yet.  The SQ
 * array is the identity, set once when liburing mapped the ring. */
static unsigned flush_sq(struct io_uring *ring)
{
    struct io_uring_sq *sq = &ring->sq;
    unsigned tail = sq->sqe_tail;
    if (sq->sqe_head != tail) {
        sq->sqe_head = tail;
        __atomic_store_n(sq->ktail, tail, __ATOMIC_RELEASE);
    }
    return tail - __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
}

int agg_ring_enter(struct io_uring *ring, unsigned min, uint64_t timeout_ns, int ext_arg)
{
    unsigned submit = flush_sq(ring);
    unsigned flags = 0;
    int enter = 0;
    if (submit) {
        if (!(ring->flags & IORING_SETUP_SQPOLL)) {
            enter = 1;
        } else {
            /* the thread may have gone to sleep after the tail moved: the
             * fence orders the tail store before the look at its flag */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (__atomic_load_n(ring->sq.kflags, __ATOMIC_RELAXED) & IORING_SQ_NEED_WAKEUP) {
                flags |= IORING_ENTER_SQ_WAKEUP;
                enter = 1;
            }
        }
    }
    /* completions the kernel could not post (CQ overflow) or task work it
     * asks to run come only through an enter */
    unsigned kflags = __atomic_load_n(ring->sq.kflags, __ATOMIC_RELAXED);
    if ((min && io_uring_cq_ready(ring) < min) || (kflags & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN))) {
        flags |= IORING_ENTER_GETEVENTS;
        enter = 1;
    } else {
        min = 0;
    }
    if (!enter)
        return 0;
    if (ring->int_flags & INT_FLAG_REG_RING_)
        flags |= IORING_ENTER_REGISTERED_RING;
    struct __kernel_timespec ts;
    struct io_uring_getevents_arg arg;
    void *argp = 0;
    long argsz = 8;  /* _NSIG / 8, for a null mask */
    if (min && timeout_ns && ext_arg) {
        ts.tv_sec = (long long)(timeout_ns / 1000000000ULL);
        ts.tv_nsec = (long long)(timeout_ns % 1000000000ULL);
        arg.sigmask = 0;
        arg.sigmask_sz = 8;
        arg.pad = 0;
        arg.ts = (uint64_t)(uintptr_t)&ts;
        argp = &arg;
        argsz = sizeof(arg);
        flags |= IORING_ENTER_EXT_ARG;
    }
    ferry_raw6(SYS_io_uring_enter, ring->enter_ring_fd, submit, min, flags, (long)argp, argsz);
    return 1;
}
