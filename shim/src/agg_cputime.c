/* A thread's own CPU-time clock under fibers.
 *
 * The kernel's clock of a thread (CLOCK_THREAD_CPUTIME_ID, the clock
 * pthread_getcpuclockid names) counts what its kernel thread ran.  Under
 * fibers that thread is a carrier, which runs every fiber placed on it: a
 * thread parked in epoll_wait "used" what its siblings computed, and another
 * thread's clock names a vtid, which is no kernel thread (EINVAL).  haproxy's
 * watchdog, which takes a thread whose clock advanced by a second since it
 * last polled for a thread stuck in a loop, then killed the process.
 *
 * So each carrier charges its fibers what it ran while each was current:
 * its own clock read as one fiber's turn ends and the next one's begins
 * (agg_cpu_turn).  A read is a system call (the vDSO does not serve CPU
 * clocks), so the carriers charge only once the program has asked for a
 * thread's clock: most programs never do.  What a thread ran before that
 * is not known: its clock starts from zero then (the first thread's from
 * what the kernel last could have told it).
 */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <time.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

int agg_cputime_on FERRY_HOT;

uint64_t agg_cpu_thread_ns(int tid)
{
    struct timespec ts;
    if (ferry_raw2(SYS_clock_gettime, agg_thread_clock(tid, 2 /* CPUCLOCK_SCHED */), &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void agg_cpu_turn_charge(struct agg_carrier *c, struct agg_fiber *from)
{
    uint64_t now = agg_cpu_thread_ns(0);
    uint64_t mark = c->cpu_mark;
    if (from && mark && now > mark)
        __atomic_add_fetch(&from->cpu_ns, now - mark, __ATOMIC_RELAXED);
    c->cpu_mark = now;
}

/* The first read of a thread's clock: the carriers charge from then on.
 * Until then no fiber was charged (each has zero), and no fiber's clock was
 * read through the fiber world; but the first thread's may have been read
 * before it became fiber 0, from the kernel: it starts from its own kernel
 * thread's clock, so that its clock never goes back.  The others start from
 * zero, as threads that never ran.  `here`: the calling thread's carrier,
 * if it is one. */
void agg_cpu_start(struct agg_carrier *here, struct agg_fiber *first)
{
    static int starting;
    if (__atomic_load_n(&agg_cputime_on, __ATOMIC_ACQUIRE) ||
        __atomic_exchange_n(&starting, 1, __ATOMIC_ACQ_REL))
        return;
    struct agg_carrier *c0 = first ? __atomic_load_n(&first->carrier, __ATOMIC_ACQUIRE) : 0;
    if (c0) {
        uint64_t base = agg_cpu_thread_ns(c0->tid);
        __atomic_store_n(&first->cpu_ns, base, __ATOMIC_RELAXED);
        __atomic_store_n(&first->cpu_seen, base, __ATOMIC_RELAXED);
    }
    if (here)
        here->cpu_mark = agg_cpu_thread_ns(0);
    __atomic_store_n(&agg_cputime_on, 1, __ATOMIC_RELEASE);
}

/* What `t`'s clock says now (0), or -1 when t ended while it was read.  A
 * fiber that runs right now has its carrier's clock since its turn began on
 * top; a read never goes back (a fiber that moved between carriers
 * meanwhile could make it).  Another thread's fiber is read through the
 * kernel: it may be freed as it is read.  Carriers live as long as the
 * process. */
int agg_cpu_fiber_ns(struct agg_fiber *self, struct agg_fiber *t, uint64_t *out)
{
    if (t == self) {
        struct agg_carrier *c = self->carrier;
        uint64_t now = agg_cpu_thread_ns(0);
        if (!c->cpu_mark)
            c->cpu_mark = now;   /* charging began while it ran */
        uint64_t ns = __atomic_load_n(&self->cpu_ns, __ATOMIC_RELAXED) + (now - c->cpu_mark);
        uint64_t seen = __atomic_load_n(&self->cpu_seen, __ATOMIC_RELAXED);
        if (ns > seen)
            __atomic_store_n(&self->cpu_seen, ns, __ATOMIC_RELAXED);
        *out = ns > seen ? ns : seen;
        return 0;
    }
    uint64_t both[2];            /* cpu_ns, cpu_seen */
    struct agg_carrier *c;
    if (ferry_safe_read(both, &t->cpu_ns, sizeof(both)) != sizeof(both) ||
        ferry_safe_read(&c, &t->carrier, sizeof(c)) != sizeof(c))
        return -1;
    uint64_t ns = both[0];
    if (c && __atomic_load_n(&c->current, __ATOMIC_ACQUIRE) == t) {
        uint64_t mark = __atomic_load_n(&c->cpu_mark, __ATOMIC_RELAXED);
        uint64_t now = agg_cpu_thread_ns(c->tid);
        if (mark && now > mark)
            ns += now - mark;
    }
    *out = ns > both[1] ? ns : both[1];
    return 0;
}
