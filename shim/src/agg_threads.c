/* Transparent hybrid threading (FlexSC-Threads without a kernel patch): with
 * `threads = fibers` in the profile, an unmodified program's threads are
 * fibers on a carrier.  Every thread operation of glibc is a system call
 * that already comes through the shim, so the shim answers them itself:
 *
 *   clone/clone3 with CLONE_THREAD  a fiber on the stack and TLS glibc
 *                                   prepared, resuming from the registers
 *                                   of the call as the kernel's child would
 *   exit                            the fiber ends; CLONE_CHILD_CLEARTID is
 *                                   honoured once it is off its stack
 *   gettid, tgkill, tkill           a virtual tid per fiber; a signal to a
 *                                   fiber is raised on the carrier when that
 *                                   fiber runs and does not block it
 *   rt_sigprocmask                  per fiber: the carrier's mask follows
 *                                   the fiber it runs
 *   sched_yield, rseq, set_robust_list, sched_{get,set}affinity
 *
 * The process's first thread becomes fiber 0 where it stands (before
 * main); the scheduler gets a stack of its own.  Blocking calls park the
 * fiber and go to a pool or a worker as the routing table says (agg_route.c),
 * private futexes are emulated between fibers (agg_futex.c).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agg.h"
#include "catchall.h"
#include "raw.h"
#include "store.h"
#include "util.h"

#define EINTR_ 4
#define ESRCH_ 3
#define EINVAL_ 22
#define EFAULT_ 14
#define VTID_BASE 0x3f000000  /* above any pid_max: never a real thread's id */
#define MAX_THREADS 65536
#define SCHED_STACK (256 * 1024)
#define FUTEX_WAKE_ 1

int agg_threads_on;                  /* the profile asked for it */
static struct agg_fiber **by_vtid;   /* fibers by vtid - VTID_BASE */
static unsigned next_vtid;
static int main_vtid;                /* fiber 0 keeps the real tid of the first thread */
static struct agg_fiber *fiber0;

struct clone_args_k {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

/* Where a new thread resumes: the registers of the clone call. */
struct agg_thread_start {
    long rbx, rbp, r12, r13, r14, r15, rdi, rsi, rdx, r10, r8, r9;
    long flags;
    long resume;    /* the trampoline's label A */
    long rsp;       /* the new stack's top, less the red zone A steps back over */
};

void ferry_agg_thread_resume(struct agg_thread_start *s) __attribute__((noreturn));

static long real_tid(struct agg_carrier *c) { return c->tid; }

static struct agg_fiber *lookup(long tid)
{
    if (tid == main_vtid)
        return fiber0 && fiber0->state != AGG_DONE ? fiber0 : 0;
    unsigned long i = (unsigned long)tid - VTID_BASE;
    if (!by_vtid || i >= MAX_THREADS)
        return 0;
    struct agg_fiber *f = by_vtid[i];
    return f && f->state != AGG_DONE ? f : 0;
}

static uint64_t kernel_mask(void)
{
    uint64_t m = 0;
    ferry_raw4(SYS_rt_sigprocmask, SIG_BLOCK, 0, &m, 8);
    return m;
}

/* The carrier's mask becomes the fiber's when it runs again. */
void agg_thread_resumed(struct agg_fiber *f)
{
    struct agg_carrier *c = f->carrier;
    if (c->kmask != f->sigmask) {
        ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &f->sigmask, 0, 8);
        c->kmask = f->sigmask;
    }
}

static int restarts(int sig)
{
    struct ferry_ksigaction act;
    if (ferry_raw4(SYS_rt_sigaction, sig, 0, &act, 8) != 0)
        return 0;
    return act.handler == SIG_IGN || act.handler == SIG_DFL || (act.flags & SA_RESTART);
}

/* Signals sent to the running fiber while it was away: raised now, on the
 * carrier, so that each handler runs on the fiber's stack with its thread
 * pointer.  1 when the call they cut short is to run again. */
int agg_threads_deliver(long result)
{
    struct agg_fiber *f = agg_self;
    if (!f || !f->thread || f->state != AGG_RUNNING || f->busy)
        return 0;
    int interrupted = f->interrupted;
    f->interrupted = 0;
    uint64_t due = __atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~f->sigmask;
    int restart = interrupted && result == -EINTR_;
    while (due) {
        int sig = __builtin_ctzll(due) + 1;
        due &= due - 1;
        __atomic_and_fetch(&f->sigpending, ~(1ULL << (sig - 1)), __ATOMIC_ACQ_REL);
        if (restart && !restarts(sig))
            restart = 0;
        ferry_raw3(SYS_tgkill, ferry_raw0(SYS_getpid), real_tid(f->carrier), sig);
    }
    return restart;
}

/* The carrier waits: a process-directed signal must reach it unless every
 * thread of the program blocks it, whatever the last fiber's mask was. */
static uint64_t idle_mask = ~0ULL;
static int idle_mask_stale = 1;

void agg_threads_idle(struct agg_carrier *c)
{
    if (!agg_threads_on)
        return;
    if (idle_mask_stale) {
        uint64_t m = fiber0 ? fiber0->sigmask : ~0ULL;
        for (unsigned i = 0; i < next_vtid; i++)
            if (by_vtid[i])
                m &= by_vtid[i]->sigmask;
        idle_mask = m;
        idle_mask_stale = 0;
    }
    if (c->kmask != idle_mask) {
        ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &idle_mask, 0, 8);
        c->kmask = idle_mask;
    }
}

/* ---- fiber 0 and the scheduler's own context ----------------------------- */

static void sched_main(void *arg)
{
    struct agg_carrier *c = arg;
    agg_carrier_loop(c);
    /* every thread ended with exit(2) and none with exit_group: the kernel
     * ends the process when its last thread goes */
    ferry_store_exit(0);
    ferry_raw1(SYS_exit_group, 0);
    __builtin_unreachable();
}

static int sched_context(struct agg_carrier *c)
{
    long p = ferry_raw6(SYS_mmap, 0, SCHED_STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if ((unsigned long)p > -4096UL)
        return (int)p;
    ferry_raw3(SYS_mprotect, p, 4096, PROT_NONE);
    agg_ctx_start(&c->sched, (void *)(p + SCHED_STACK), sched_main, c);
    c->sched.fsbase = 0;
    return 0;
}

/* The calling thread becomes fiber 0 of a new carrier. */
static int become_fiber0(struct ferry_group *g)
{
    struct agg_carrier *c;
    int r = agg_carrier_new(g, &c);
    if (r)
        return r;
    r = sched_context(c);
    if (r)
        return r;
    struct agg_fiber *f = agg_calloc(1, sizeof(*f));
    if (!f)
        return -AGG_ENOMEM;
    f->thread = 1;
    f->carrier = c;
    f->tcb = (void *)agg_tp();
    f->ctx.fsbase = agg_tp();
    f->state = AGG_RUNNING;
    f->joined = -1;
    f->sigmask = kernel_mask();
    c->kmask = f->sigmask;
    c->tid = (int)ferry_raw0(SYS_gettid);
    c->alive = 1;
    c->current = f;
    main_vtid = c->tid;
    f->vtid = main_vtid;
    fiber0 = f;
    agg_carrier = c;
    agg_self = f;
    agg_stat(g, AGG_ST(fibers), 1);
    agg_stat(g, AGG_ST(carriers), 1);
    return 0;
}

int agg_threads_start(void)
{
    if (!agg_threads_on)
        return 0;
    long p = ferry_raw6(SYS_mmap, 0, MAX_THREADS * sizeof(*by_vtid), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if ((unsigned long)p > -4096UL)
        return (int)p;
    by_vtid = (struct agg_fiber **)p;
    struct ferry_group *g;
    int r = ferry_group_create(&g, &agg_profile);
    if (r)
        return r;
    return become_fiber0(g);
}

/* A fork child has only the thread that forked, and rings shared with its
 * parent: it starts over, the forking fiber as its fiber 0. */
void agg_threads_after_fork(void)
{
    struct agg_fiber *self = agg_self;
    if (!agg_threads_on || !self)
        return;
    struct agg_carrier *old = self->carrier;
    agg_carrier_forget(old);
    agg_group_forget(old->g);
    ferry_memset(by_vtid, 0, MAX_THREADS * sizeof(*by_vtid));
    agg_self = 0;
    agg_carrier = 0;
    fiber0 = 0;
    struct ferry_group *g;
    if (ferry_group_create(&g, &agg_profile) == 0)
        become_fiber0(g);
}

/* ---- threads ------------------------------------------------------------- */

static void thread_entry(void *arg)
{
    struct agg_fiber *f = arg;
    agg_thread_resumed(f);  /* a signal sent before it ever ran waits for its first call */
    ferry_agg_thread_resume(f->start);
}

static long new_thread(struct agg_fiber *self, struct ferry_regs *r, unsigned long flags,
                       unsigned long stack_top, int *ptid, int *ctid, unsigned long tls)
{
    struct agg_carrier *c = self->carrier;
    if (next_vtid >= MAX_THREADS)
        return -11;  /* EAGAIN, as when a process hits its thread limit */
    struct agg_fiber *f = agg_calloc(1, sizeof(*f));
    struct agg_thread_start *s = agg_calloc(1, sizeof(*s));
    if (!f || !s) {
        agg_free(f);
        agg_free(s);
        return -AGG_ENOMEM;
    }
    long *frame = r->frame;
    *s = (struct agg_thread_start){frame[0], r->rbp, r->r12, r->r13, r->r14, r->r15, r->rdi,
                                   r->rsi, r->rdx, r->r10, r->r8, r->r9, frame[1], frame[2],
                                   (long)stack_top - 128};
    f->thread = 1;
    f->start = s;
    f->carrier = c;
    f->tcb = (void *)tls;
    f->ctx.fsbase = tls;
    f->joined = -1;
    f->sigmask = self->sigmask;  /* a new thread inherits its creator's mask */
    f->vtid = VTID_BASE + (int)next_vtid++;
    if (flags & CLONE_CHILD_CLEARTID)
        f->clear_tid = ctid;
    /* the thread's own copy of the shim's per-thread state */
    *TLS_IN(tls, agg_self) = f;
    *TLS_IN(tls, agg_carrier) = c;
    /* its first switch starts thread_entry on the new stack, well below what
     * the resume writes at its top */
    agg_ctx_start(&f->ctx, (void *)(stack_top - 128 - 512), thread_entry, f);
    by_vtid[f->vtid - VTID_BASE] = f;
    idle_mask_stale = 1;
    if (flags & CLONE_PARENT_SETTID)
        *ptid = f->vtid;
    if (flags & CLONE_CHILD_SETTID)
        *ctid = f->vtid;
    c->alive++;
    agg_stat(c->g, AGG_ST(fibers), 1);
    agg_wake(f);
    return f->vtid;
}

/* clone/clone3 of a thread: 1 and the result in r->rax, or 0 when it is not
 * a thread the fiber world can host (then it runs as the kernel's). */
static int clone_thread(struct agg_fiber *self, struct ferry_regs *r)
{
    unsigned long flags, stack_top, tls;
    int *ptid, *ctid;
    if (!r->frame)
        return 0;  /* caught by the catch-all: no trampoline to resume through */
    if (r->rax == SYS_clone3) {
        struct clone_args_k a;
        if ((unsigned long)r->rsi < sizeof(a) || ferry_safe_read(&a, (void *)r->rdi, sizeof(a)) != sizeof(a))
            return 0;
        flags = a.flags;
        stack_top = a.stack + a.stack_size;
        ptid = (int *)a.parent_tid;
        ctid = (int *)a.child_tid;
        tls = a.tls;
        if (a.exit_signal)  /* pidfd only counts with CLONE_PIDFD, refused below */
            return 0;
    } else {
        flags = (unsigned long)r->rdi;
        stack_top = (unsigned long)r->rsi;
        ptid = (int *)r->rdx;
        ctid = (int *)r->r10;
        tls = (unsigned long)r->r8;
    }
    const unsigned long need = CLONE_VM | CLONE_THREAD | CLONE_SIGHAND | CLONE_SETTLS;
    if ((flags & need) != need || !stack_top || !tls || (flags & (CLONE_VFORK | CLONE_PIDFD)))
        return 0;
    r->rax = new_thread(self, r, flags, stack_top, ptid, ctid, tls);
    return 1;
}

/* On the scheduler, once the fiber that ran the thread is off its stack:
 * glibc may reuse that stack as soon as the tid word reads 0. */
void agg_thread_finished(struct agg_carrier *c, struct agg_fiber *f)
{
    (void)c;
    if (f->clear_tid) {
        __atomic_store_n(f->clear_tid, 0, __ATOMIC_RELEASE);
        /* pthread_join waits on it as a shared futex, through the kernel */
        ferry_raw6(SYS_futex, (long)f->clear_tid, FUTEX_WAKE_, 0x7fffffff, 0, 0, 0);
        agg_futex_wake_all(c, f->clear_tid);
    }
    if (f->vtid >= VTID_BASE)
        by_vtid[f->vtid - VTID_BASE] = 0;
    idle_mask_stale = 1;
    if (f == fiber0)
        fiber0 = 0;
    agg_free(f->start);
    agg_free(f);
}

/* A signal for a fiber that is not running: kept until it runs; a fiber
 * parked in a call is woken so the call ends with EINTR, as a blocked
 * thread's would. */
static long signal_fiber(struct agg_fiber *self, struct agg_fiber *t, long sig)
{
    if (sig < 0 || sig > 64)
        return -EINVAL_;
    if (sig == 0)
        return 0;
    if (t == self) {
        agg_stat(self->carrier->g, AGG_ST(native), 1);
        return ferry_raw3(SYS_tgkill, ferry_raw0(SYS_getpid), real_tid(self->carrier), sig);
    }
    __atomic_or_fetch(&t->sigpending, 1ULL << (sig - 1), __ATOMIC_ACQ_REL);
    if (!((t->sigmask & ~t->waitset) & (1ULL << (sig - 1))) && t->state == AGG_PARKED) {
        if (t->suspended) {
            t->suspended = 0;
            agg_wake(t);
        } else {
            agg_interrupt(t);
        }
    }
    return 0;
}

static long exit_thread(struct agg_fiber *self, long code)
{
    (void)code;
    ferry_blk_retire();
    agg_fiber_finish(self);
}

/* Signals pending for the process (sent while every fiber blocked them)
 * that `mask` lets through become the fiber's. */
static void take_process_signals(struct agg_fiber *f, uint64_t mask)
{
    uint64_t pend = 0;
    if (ferry_raw2(SYS_rt_sigpending, &pend, 8) != 0 || !(pend &= ~mask))
        return;
    while (pend) {
        int sig = __builtin_ctzll(pend) + 1;
        pend &= pend - 1;
        uint64_t one = 1ULL << (sig - 1);
        struct __kernel_timespec now = {0, 0};
        char info[128];
        if (ferry_raw4(SYS_rt_sigtimedwait, &one, info, &now, 8) == sig)
            __atomic_or_fetch(&f->sigpending, one, __ATOMIC_ACQ_REL);
    }
}

/* Park the fiber for up to `ns` (a routed nanosleep: the carrier runs the
 * others meanwhile; a signal for the fiber cuts it short). */
static void nap(uint64_t ns)
{
    struct __kernel_timespec ts = {(long long)(ns / 1000000000ULL), (long long)(ns % 1000000000ULL)};
    struct ferry_regs sleep = {.rax = SYS_nanosleep, .rdi = (long)&ts};
    if (!ferry_agg_route(&sleep))
        ferry_raw2(SYS_nanosleep, &ts, 0);
}

/* sigwait and friends: the fiber waits, not the carrier.  A signal another
 * fiber sends wakes it at once; one sent from outside is pending for the
 * process (every fiber blocks it, as sigwait asks) and is seen within 10 ms. */
static long wait_for_signal(struct agg_fiber *f, struct ferry_regs *r)
{
    uint64_t set;
    if (r->r10 != 8)
        return -EINVAL_;
    if (ferry_safe_read(&set, (void *)r->rdi, 8) != 8)
        return -EFAULT_;
    set &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
    uint64_t deadline = 0;
    if (r->rdx) {
        struct __kernel_timespec ts;
        if (ferry_safe_read(&ts, (void *)r->rdx, sizeof(ts)) != sizeof(ts))
            return -EFAULT_;
        if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)
            return -EINVAL_;
        deadline = ferry_mono_ns() + (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    }
    long res;
    f->waitset = set;
    for (;;) {
        take_process_signals(f, ~set);
        uint64_t hit = __atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & set;
        if (hit) {
            int sig = __builtin_ctzll(hit) + 1;
            __atomic_and_fetch(&f->sigpending, ~(1ULL << (sig - 1)), __ATOMIC_ACQ_REL);
            res = sig;
            if (r->rsi) {
                int32_t info[32] = {sig, 0, -6 /* SI_TKILL */, (int32_t)ferry_raw0(SYS_getpid)};
                ferry_memcpy((void *)r->rsi, info, sizeof(info));
            }
            break;
        }
        if (__atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~f->sigmask & ~set) {
            res = -EINTR_;  /* a handler runs first (agg_threads_deliver) */
            f->interrupted = 1;
            break;
        }
        uint64_t now = ferry_mono_ns(), wait = 10000000ULL;
        if (r->rdx) {
            if (now >= deadline) {
                res = -11;  /* EAGAIN */
                break;
            }
            if (deadline - now < wait)
                wait = deadline - now;
        }
        nap(wait);
    }
    f->waitset = 0;
    return res;
}

/* From ferry_slow, before anything else: 1 if this was a thread operation
 * the fiber world answers (result in r->rax). */
int ferry_agg_thread_call(struct ferry_regs *r)
{
    struct agg_fiber *f = agg_self;
    if (!agg_threads_on || !f || f->busy || f->state != AGG_RUNNING || !f->thread)
        return 0;
    struct agg_carrier *c = f->carrier;
    switch (r->rax) {
    case SYS_clone:
    case SYS_clone3:
        return clone_thread(f, r);
    case SYS_exit:
        exit_thread(f, r->rdi);
        return 1;
    case SYS_gettid:
        r->rax = f->vtid;
        return 1;
    case SYS_tkill:
    case SYS_tgkill: {
        long tid = r->rax == SYS_tkill ? r->rdi : r->rsi;
        long sig = r->rax == SYS_tkill ? r->rsi : r->rdx;
        if (r->rax == SYS_tgkill && r->rdi != ferry_raw0(SYS_getpid))
            return 0;
        struct agg_fiber *t = lookup(tid);
        if (!t)
            return tid >= VTID_BASE ? (r->rax = -ESRCH_, 1) : 0;
        r->rax = signal_fiber(f, t, sig);
        return 1;
    }
    case SYS_rt_sigprocmask:
        if (!(ferry_catchall_on && ferry_catchall_masked_call(r)))
            r->rax = ferry_pass6(r->rax, r->rdi, r->rsi, r->rdx, r->r10, 0, 0);
        f->sigmask = c->kmask = kernel_mask();
        idle_mask_stale = 1;
        return 1;
    case SYS_kill: {
        /* To the process: the kernel would pick a thread that does not block
         * it; the carrier can only offer the running fiber's mask, so when
         * that one blocks it another fiber is picked here. */
        long sig = r->rsi;
        if (r->rdi != ferry_raw0(SYS_getpid) || sig <= 0 || sig > 64 ||
            !(f->sigmask & (1ULL << (sig - 1))))
            return 0;
        struct agg_fiber *t = 0;
        if (fiber0 && fiber0 != f && !(fiber0->sigmask & (1ULL << (sig - 1))))
            t = fiber0;
        for (unsigned i = 0; !t && i < next_vtid; i++)
            if (by_vtid[i] && by_vtid[i] != f && !(by_vtid[i]->sigmask & (1ULL << (sig - 1))))
                t = by_vtid[i];
        if (!t)
            return 0;  /* every thread blocks it: pending for the process */
        r->rax = signal_fiber(f, t, sig);
        return 1;
    }
    case SYS_rt_sigsuspend: {
        /* The fiber waits with the given mask for a signal sent to it; its
         * handler runs under that mask, then the old one is back. */
        uint64_t during;
        if (r->rsi != 8)
            return r->rax = -EINVAL_, 1;
        if (ferry_safe_read(&during, (void *)r->rdi, 8) != 8)
            return r->rax = -EFAULT_, 1;
        during &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
        uint64_t saved = f->sigmask;
        f->sigmask = during;
        idle_mask_stale = 1;
        take_process_signals(f, during);
        while (!(__atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~during)) {
            f->suspended = 1;
            agg_park(f);
            f->suspended = 0;
        }
        agg_thread_resumed(f);
        f->interrupted = 0;
        agg_threads_deliver(-EINTR_);
        f->sigmask = saved;
        idle_mask_stale = 1;
        agg_thread_resumed(f);
        r->rax = -EINTR_;
        return 1;
    }
    case SYS_rt_sigtimedwait:
        r->rax = wait_for_signal(f, r);
        return 1;
    case SYS_sched_yield:
        ferry_fiber_yield();
        r->rax = 0;
        return 1;
    case SYS_rseq:
        /* One carrier, one registered area: fiber 0 keeps the first thread's.
         * The others are told yes (glibc treats a refusal as fatal), and
         * their area says "no CPU known", so that sched_getcpu asks the
         * kernel instead of reading it. */
        if (f == fiber0)
            return 0;
        if (r->rdi && !(r->rdx & 1)) {
            int32_t unknown = -1;  /* RSEQ_CPU_ID_UNINITIALIZED */
            ferry_memcpy((char *)r->rdi + 4, &unknown, 4);
        }
        r->rax = 0;
        return 1;
    case SYS_set_robust_list:
        if (f == fiber0)
            return 0;
        r->rax = r->rsi == 24 ? 0 : -EINVAL_;  /* sizeof(struct robust_list_head) */
        return 1;
    case SYS_sched_getaffinity:
    case SYS_sched_setaffinity: {
        struct agg_fiber *t = r->rdi == 0 ? f : lookup(r->rdi);
        if (!t)
            return r->rdi >= VTID_BASE ? (r->rax = -ESRCH_, 1) : 0;
        if (r->rax == SYS_sched_setaffinity) {
            /* a fiber runs where its carrier does: the request is checked
             * against the machine and remembered, so a get answers it */
            uint64_t want = 0;
            unsigned long len = (unsigned long)r->rsi < 8 ? (unsigned long)r->rsi : 8;
            if (ferry_safe_read(&want, (void *)r->rdx, len) != (long)len)
                return r->rax = -EFAULT_, 1;
            uint64_t have = 0;
            ferry_raw3(SYS_sched_getaffinity, 0, sizeof(have), &have);
            if (!(want & have))
                return r->rax = -EINVAL_, 1;
            t->affinity = want & have;
            r->rax = 0;
            return 1;
        }
        long n = ferry_pass6(SYS_sched_getaffinity, 0, r->rsi, r->rdx, 0, 0, 0);
        if (n > 0 && t->affinity)
            *(uint64_t *)r->rdx = t->affinity;  /* the kernel just wrote it */
        r->rax = n;
        return 1;
    }
    }
    return 0;
}

/* Calls the fiber world answers: they must reach ferry_slow. */
void agg_threads_watch(void)
{
    static const unsigned short calls[] = {SYS_clone, SYS_clone3, SYS_exit, SYS_gettid, SYS_tkill,
                                           SYS_tgkill, SYS_rt_sigprocmask, SYS_sched_yield,
                                           SYS_rseq, SYS_set_robust_list, SYS_sched_getaffinity,
                                           SYS_sched_setaffinity, SYS_futex, SYS_rt_sigsuspend, SYS_kill,
                                           SYS_rt_sigtimedwait};
    for (unsigned i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        __atomic_store_n(&ferry_action[calls[i]], 1, __ATOMIC_RELAXED);
}

/* A signal for a parked fiber: its call ends early, as a blocked thread's
 * would (a worker's call cannot be cut short: it finishes first). */
void agg_interrupt(struct agg_fiber *f)
{
    if (f->futex_addr) {
        f->interrupted = 1;
        agg_futex_interrupt(f);
        return;
    }
    struct agg_req *req = f->req;
    if (!req || req->done || f->interrupted)
        return;
    f->interrupted = 1;
    struct agg_carrier *c = f->carrier;
    struct io_uring_sqe *sqe = agg_sqe(c, (unsigned)f->req_pool);
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)req | AGG_TAG_REQ, 0);
    io_uring_sqe_set_data64(sqe, AGG_TAG_IGNORE);
    c->pools[f->req_pool].misc++;
}
