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
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "agg.h"
#include "catchall.h"
#include "raw.h"
#include "store.h"
#include "util.h"

#define EINTR_ 4
#define ESRCH_ 3
#define PRIO_PROCESS_ 0
#define EINVAL_ 22
#define EFAULT_ 14
#define VTID_BASE 0x3f000000  /* above any pid_max: never a real thread's id */
#define MAX_THREADS 65536
#define SCHED_STACK (256 * 1024)
#define FUTEX_WAKE_ 1

#define MAX_CARRIERS AGG_MAX_CARRIERS
#define CARRIER_STACK (256 * 1024)

int agg_threads_on FERRY_HOT;        /* the profile asked for it */
unsigned agg_threads_carriers = 1;   /* ... on this many carriers */
int agg_threads_alive;               /* threads not ended, on every carrier */
/* The fiber world's tables, shared by the carriers: under `world_lock`.  A
 * thread fiber is freed only by its carrier, with the lock held while it
 * leaves the table, so a fiber found in the table under the lock can be
 * posted to. */
static int world_lock;
static struct agg_fiber **by_vtid;   /* fibers by vtid - VTID_BASE */
static unsigned next_vtid;
static int main_vtid;                /* fiber 0 keeps the real tid of the first thread */
static struct agg_fiber *fiber0;
/* the exit(2) code of the thread that ended last: the process's status
 * once every thread ended so, as the kernel reports it */
static int last_thread_code;
static struct agg_carrier *carriers[MAX_CARRIERS];
static unsigned ncarriers;
static int carriers_tried;
static long world_pid FERRY_HOT;     /* the process the tables above are of; read at every exit */

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

FERRY_HOT_TEXT int agg_thread_fiber(void) { return agg_self && agg_self->thread; }

/* The fiber the tables name `tid`, ended or not.  Without world_lock it
 * may end and be freed as it is read (a pointer store publishes it). */
static struct agg_fiber *table_entry(long tid)
{
    if (tid == main_vtid)
        return __atomic_load_n(&fiber0, __ATOMIC_ACQUIRE);
    unsigned long i = (unsigned long)tid - VTID_BASE;
    if (!by_vtid || i >= MAX_THREADS)
        return 0;
    return __atomic_load_n(&by_vtid[i], __ATOMIC_ACQUIRE);
}

/* With world_lock held. */
static struct agg_fiber *lookup(long tid)
{
    struct agg_fiber *f = table_entry(tid);
    return f && f->state != AGG_DONE ? f : 0;
}

/* Fiber 0's name is its kernel thread's, which another thread may set
 * through /proc/self/task/TID/comm: fiber 0 keeps its real tid, and that
 * file is there (agg_names.c answers for the vtids). */
static const char *current_name(struct agg_fiber *f)
{
    if (f == fiber0)
        ferry_raw2(SYS_prctl, PR_GET_NAME, (long)f->name);
    return f->name;
}

static uint64_t kernel_mask(void)
{
    uint64_t m = 0;
    ferry_raw4(SYS_rt_sigprocmask, SIG_BLOCK, 0, &m, 8);
    return m;
}

/* The carrier thread's mask in the kernel, changed only when it differs. */
static void carrier_mask(struct agg_carrier *c, uint64_t m)
{
    if (c->kmask != m) {
        ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, 8);
        c->kmask = m;
    }
}

/* ---- alternate signal stacks ------------------------------------------------ */

/* sigaltstack(2) is per kernel thread: each fiber has its own, which the
 * kernel holds for its carrier while the fiber runs.  Go gives every thread
 * one (its handlers run there, never on a goroutine's small stack), Rust
 * one per thread for its stack-overflow report: fibers that shared their
 * carrier's would have their handlers' frames written over each other's. */

#define SS_ONSTACK_ 1
#define SS_DISABLE_ 2

static const struct agg_altstack no_altstack = {0, SS_DISABLE_, 0};

static struct agg_altstack kernel_altstack(void)
{
    struct agg_altstack a = no_altstack;
    if (ferry_raw2(SYS_sigaltstack, 0, &a) != 0)
        return no_altstack;
    a.flags &= ~SS_ONSTACK_;  /* where the caller's stack pointer is, not a setting */
    return a;
}

/* The carrier thread's alternate stack in the kernel, changed only when it
 * differs.  The call runs from the resumed fiber's C path: the kernel
 * refuses (EPERM) only while that stack pointer is on the stack being
 * replaced, another fiber's, which it is not. */
static void carrier_altstack(struct agg_carrier *c, const struct agg_altstack *want)
{
    struct agg_altstack *k = &c->kalt;
    if (k->sp == want->sp && k->size == want->size && k->flags == want->flags)
        return;
    if (ferry_raw2(SYS_sigaltstack, (want->flags & SS_DISABLE_) ? &no_altstack : want, 0) == 0)
        *k = *want;
}

/* sigaltstack from a fiber ran natively at the program's own stack pointer
 * (what SS_ONSTACK and EPERM depend on), in the trampoline (shim.c): what
 * the kernel now has is the fiber's. */
FERRY_HOT_TEXT void agg_altstack_changed(long result)
{
    struct agg_fiber *f = agg_self;
    if (result != 0 || !f || !f->thread)
        return;
    f->alt = kernel_altstack();
    f->carrier->kalt = f->alt;
}

FERRY_HOT_TEXT void agg_altstack_set(void *sp, int flags, size_t size)
{
    struct agg_fiber *f = agg_self;
    if (!f || !f->thread)
        return;
    f->alt = (flags & SS_DISABLE_) ? no_altstack
                                   : (struct agg_altstack){sp, flags & ~SS_ONSTACK_, size};
    /* the kernel's too: the catch-all made the change at once, from below
     * the interrupted stack pointer, and matched the frame's copy, which
     * the handler's return installs again (catchall.c, sigaltstack_below) */
    f->carrier->kalt = f->alt;
}

/* ---- the mask without asking: rseq ------------------------------------------- */

/* Reading the kernel's mask at every park cost a system call each (5 % of
 * apache under fibers).  The mask changes out of the engine's sight only
 * as a handler begins (the kernel sets the handler's) and as it returns
 * (rt_sigreturn).  rseq tells the first: the kernel clears the rseq_cs word
 * of the thread's area when it delivers a signal (or preempts the thread)
 * outside the critical section that word names, and the probe's section
 * has no length.  entry.S clears the word at the second.  While the probe
 * is there, the carrier's mask is what the engine last read or set. */

#define RSEQ_SIG_ 0x53053053u   /* glibc's on x86 */
#define RSEQ_LEN_ 32u           /* the area's size in the kernel's first ABI */
#define EBUSY_ 16

_Static_assert(offsetof(struct agg_carrier, rseq_cs) == AGG_CARRIER_RSEQ_CS, "entry.S reads it there");

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
void ferry_agg_rseq_abort(void);

static struct {
    uint32_t version, flags;
    uint64_t start_ip, post_commit_offset, abort_ip;
} __attribute__((aligned(32))) probe;

/* Carrier 0 has the area glibc registered for the first thread (found at
 * its thread pointer, and confirmed by the kernel: EBUSY only for the same
 * area, size and signature); a carrier thread of the engine's registers
 * one of its own.  Without one, every leave reads the mask. */
static void rseq_attach(struct agg_carrier *c, int own)
{
    c->rseq_cs = 0;
    probe.start_ip = probe.abort_ip = (uint64_t)(uintptr_t)ferry_agg_rseq_abort;
    char *area;
    if (own) {
        area = (char *)(((uintptr_t)c->own_rseq + 31) & ~(uintptr_t)31);
        if (ferry_raw4(SYS_rseq, (long)area, RSEQ_LEN_, 0, RSEQ_SIG_) != 0)
            return;
    } else {
        if (!&__rseq_size || !&__rseq_offset || !__rseq_size)
            return;
        area = (char *)(c->tp + __rseq_offset);
        unsigned len = __rseq_size > RSEQ_LEN_ ? __rseq_size : RSEQ_LEN_;
        if (ferry_raw4(SYS_rseq, (long)area, len, 0, RSEQ_SIG_) != -EBUSY_)
            return;
    }
    c->rseq_cs = (uint64_t *)(area + 8);
}

/* A fiber that leaves its carrier from inside a handler of the program's
 * has that handler's mask in the kernel, which the kernel set as it ran the
 * handler, out of the engine's sight (and rt_sigreturn takes it off the
 * same way): so the mask a fiber gets back is read as it leaves, once the
 * program has a handler at all.  Not in rt_sigsuspend, whose mask is the
 * engine's alone.  A fiber that went on with another's handler mask kept
 * signals sent to it blocked, and one resumed in its handler could be
 * interrupted by the signal that handler blocks. */
void agg_thread_leaving(struct agg_fiber *f)
{
    if (!__atomic_load_n(&agg_program_handlers, __ATOMIC_RELAXED) || f->suspended)
        return;
    struct agg_carrier *c = f->carrier;
    /* without the catch-all, a handler could return through an
     * rt_sigreturn the shim never sees (code it did not rewrite) */
    uint64_t *cs = ferry_catchall_on ? c->rseq_cs : 0;
    if (!cs || __atomic_load_n(cs, __ATOMIC_RELAXED) != (uint64_t)(uintptr_t)&probe) {
        /* armed before the read: a handler that begins after it is seen
         * at the next leave */
        if (cs)
            __atomic_store_n(cs, (uint64_t)(uintptr_t)&probe, __ATOMIC_RELAXED);
        c->kmask = kernel_mask();
    }
    f->sigmask = c->kmask;
}

/* The carrier's alternate stack and mask become the fiber's when it runs
 * again: in that order, as a signal the mask lets through is delivered at
 * once, on whatever alternate stack the kernel has then. */
void agg_thread_resumed(struct agg_fiber *f)
{
    agg_creds_follow(&f->carrier->creds_seen);  /* it may have moved here */
    carrier_altstack(f->carrier, &f->alt);
    carrier_mask(f->carrier, f->sigmask);
}

static int restarts(int sig)
{
    struct ferry_ksigaction act;
    if (agg_signal_action(sig, &act) != 0)
        return 0;
    return act.handler == SIG_IGN || act.handler == SIG_DFL || (act.flags & SA_RESTART);
}

/* ---- what a handler is told about its signal (siginfo) ---------------------- */

#define SIGINFO_SIZE 128

/* A signal taken from the kernel's queue on the fiber's behalf keeps the
 * siginfo its sender gave it (si_code, si_pid, a child's exit status, a
 * sigqueue value) until it is raised again for the fiber.  With world_lock
 * held. */
static void keep_info(struct agg_fiber *f, int sig, const char *info)
{
    if (!f->siginfo && !(f->siginfo = agg_calloc(64, SIGINFO_SIZE)))
        return;
    ferry_memcpy(f->siginfo + (sig - 1) * SIGINFO_SIZE, info, SIGINFO_SIZE);
    f->siginfo_set |= 1ULL << (sig - 1);
}

/* 1 and the kept siginfo in `out`, or 0. */
static int take_info(struct agg_fiber *f, int sig, char *out)
{
    uint64_t bit = 1ULL << (sig - 1);
    agg_lock(&world_lock);
    int have = (f->siginfo_set & bit) != 0;
    if (have) {
        ferry_memcpy(out, f->siginfo + (sig - 1) * SIGINFO_SIZE, SIGINFO_SIZE);
        f->siginfo_set &= ~bit;
    }
    agg_unlock(&world_lock);
    return have;
}

/* What tgkill from this process says of itself. */
static void own_info(int sig, int code, char *out)
{
    int32_t *w = (int32_t *)out;
    ferry_memset(out, 0, SIGINFO_SIZE);
    w[0] = sig;
    w[2] = code;
    w[4] = (int32_t)ferry_raw0(SYS_getpid);   /* si_pid */
    w[5] = (int32_t)ferry_raw0(SYS_getuid);   /* si_uid */
}

/* Calls the kernel never restarts after a handler, SA_RESTART or not
 * (signal(7)): they end with EINTR. */
static int never_restarted(long nr)
{
    switch (nr) {
    case SYS_select:
    case SYS_pselect6:
    case SYS_poll:
    case SYS_ppoll:
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2:
    case SYS_nanosleep:
    case SYS_clock_nanosleep:
    case SYS_io_getevents:
    case SYS_io_pgetevents:
    case SYS_msgrcv:
    case SYS_msgsnd:
    case SYS_semop:
    case SYS_semtimedop:
    case SYS_rt_sigtimedwait:
    case SYS_rt_sigsuspend:
    case SYS_pause:
        return 1;
    }
    return 0;
}

/* What agg_threads_deliver will say, without raising anything: 1 when the
 * call (`nr`, ended with `result`) is to run again, so that it is not yet
 * over (neither counted again nor recorded with its EINTR). */
int agg_threads_will_restart(long nr, long result)
{
    struct agg_fiber *f = agg_self;
    if (!f || !f->thread || f->state != AGG_RUNNING || f->busy || !f->interrupted ||
        result != -EINTR_ || never_restarted(nr))
        return 0;
    uint64_t due = __atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~f->sigmask;
    for (; due; due &= due - 1)
        if (!restarts(__builtin_ctzll(due) + 1))
            return 0;
    return 1;
}

/* Signals sent to the running fiber while it was away: raised now, on the
 * carrier, so that each handler runs on the fiber's stack with its thread
 * pointer.  1 when the call they cut short (`nr`) is to run again. */
int agg_threads_deliver(long nr, long result)
{
    struct agg_fiber *f = agg_self;
    if (!f || !f->thread || f->state != AGG_RUNNING || f->busy)
        return 0;
    int interrupted = f->interrupted;
    f->interrupted = 0;
    uint64_t due = __atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~f->sigmask;
    int restart = interrupted && result == -EINTR_ && !never_restarted(nr);
    while (due) {
        int sig = __builtin_ctzll(due) + 1;
        due &= due - 1;
        __atomic_and_fetch(&f->sigpending, ~(1ULL << (sig - 1)), __ATOMIC_ACQ_REL);
        if (restart && !restarts(sig))
            restart = 0;
        char info[SIGINFO_SIZE];
        if (take_info(f, sig, info))
            ferry_raw4(SYS_rt_tgsigqueueinfo, ferry_raw0(SYS_getpid), real_tid(f->carrier), sig, info);
        else
            ferry_raw3(SYS_tgkill, ferry_raw0(SYS_getpid), real_tid(f->carrier), sig);
    }
    return restart;
}

/* A signal for t, which runs on another carrier: its carrier is told, and
 * when t is the fiber it runs (maybe making no call at all), interrupted so
 * that the signal is delivered at once, as to a running thread. */
static void post_signal(struct agg_fiber *t)
{
    struct agg_carrier *c = t->carrier;
    int running = __atomic_load_n(&c->current, __ATOMIC_ACQUIRE) == t;
    agg_post(t, AGG_POST_SIGNAL);
    if (running)
        agg_signal_kick(c);
}

/* From the engine's tick (agg_signal.c), in f's own context with the
 * program's code interrupted: signals sent to f while it made no call are
 * raised on its carrier with every signal blocked, so that when the tick's
 * handler returns and rt_sigreturn restores `frame_mask`, the kernel delivers
 * them there, in the program's own context, as to a running thread. */
void agg_threads_raise(struct agg_fiber *f, uint64_t frame_mask)
{
    struct agg_carrier *c = f->carrier;
    if (!(__atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~f->sigmask))
        return;
    carrier_mask(c, ~0ULL);
    f->interrupted = 0;
    agg_threads_deliver(-1, 0);
    c->kmask = frame_mask;
}

/* A carrier that waits blocks every signal: a handler that ran there would
 * run on the scheduler's stack, not a thread's, and the call the thread is
 * parked in would go on waiting.  Carrier 0 looks for signals pending for
 * the process (or for the first thread) after each wait, which lasts at
 * most SIGNAL_POLL_NS, and hands each to a fiber that does not block it, as
 * the kernel hands it to such a thread (agg_threads_take_signals). */
#define SIGNAL_POLL_NS 10000000ULL
#define SIGNAL_LOOK_NS 1000000ULL
static uint64_t accepted;            /* signals some thread does not block */
static int accepted_stale = 1;

void agg_threads_idle(struct agg_carrier *c)
{
    if (!agg_threads_on || !c->threads)
        return;
    carrier_mask(c, ~0ULL);
}

/* Threads of the program that the fiber world does not run: made before it
 * started, or by a clone it let through (not a thread it can host, or one
 * it did not see).  Only they can wake a fiber's futex from outside the
 * engine, with a FUTEX_WAKE the engine never sees.  In .data: every fork
 * child reads it, and a page of .bss its parent never touched is a fault. */
static int outside_threads FERRY_HOT;

/* 0: the call runs as the kernel's; a clone that does is noted. */
static int native_call(const struct ferry_regs *r)
{
    if (r->rax != SYS_clone && r->rax != SYS_clone3)
        return 0;
    unsigned long flags = (unsigned long)r->rdi;
    if (r->rax == SYS_clone3) {
        uint64_t f3;
        if (ferry_safe_read(&f3, (void *)r->rdi, sizeof(f3)) != sizeof(f3))
            f3 = CLONE_VM;  /* unreadable: assume the worst */
        flags = f3;
    }
    /* a vfork child shares the memory only until its exec */
    if ((flags & CLONE_VM) && !(flags & CLONE_VFORK))
        __atomic_store_n(&outside_threads, 1, __ATOMIC_RELAXED);
    return 0;
}

/* May a thread outside the engine wake the futexes c's fibers wait on?
 * Carriers of fibers made through the API share the process with the
 * program's own threads; a carrier of the program's threads does only
 * when some thread escaped the fiber world.  Only then does a carrier
 * look at its waiters' words after every wait and wait 1 ms at most for
 * it (an idle server's carriers woke a thousand times a second). */
int agg_outside_wakers(const struct agg_carrier *c)
{
    return !c->threads || __atomic_load_n(&outside_threads, __ATOMIC_RELAXED);
}

uint64_t agg_threads_wait_limit(const struct agg_carrier *c)
{
    return agg_threads_on && c->threads && !c->raw ? SIGNAL_POLL_NS : 0;
}

static int default_ignored(int sig)
{
    return sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH || sig == SIGCONT;
}

/* With world_lock held: the thread that gets `sig`, as the kernel picks
 * one (the first thread when it takes it). */
static struct agg_fiber *taker(int sig)
{
    uint64_t bit = 1ULL << (sig - 1);
    if (fiber0 && fiber0->state != AGG_DONE && !(fiber0->sigmask & bit))
        return fiber0;
    for (unsigned i = 0; i < next_vtid; i++)
        if (by_vtid[i] && by_vtid[i]->state != AGG_DONE && !(by_vtid[i]->sigmask & bit))
            return by_vtid[i];
    return 0;
}

static int dequeue(int sig, char *info)
{
    uint64_t one = 1ULL << (sig - 1);
    struct __kernel_timespec now = {0, 0};
    return ferry_raw4(SYS_rt_sigtimedwait, &one, info, &now, 8) == sig;
}

/* On carrier 0, after a wait: signals pending for the process that a thread
 * takes.  A default action that ends or stops the process happens here, on
 * the carrier, as it would on any thread; an ignored one is dropped (a
 * blocked signal is kept even when ignored); one with a handler goes to a
 * fiber that does not block it, whose parked call ends with EINTR (or runs
 * again under SA_RESTART) and whose handler runs on its stack.  A signal no
 * thread takes stays pending, as natively. */
void agg_threads_take_signals(struct agg_carrier *c)
{
    if (!agg_threads_wait_limit(c))
        return;
    /* at most once a millisecond: a busy carrier waits thousands of times a
     * second, and each look is a crossing */
    static uint64_t looked;
    uint64_t now = agg_now_ns();
    if (now - looked < SIGNAL_LOOK_NS)
        return;
    looked = now;
    uint64_t pend = 0;
    if (ferry_raw2(SYS_rt_sigpending, &pend, 8) != 0 || !pend)
        return;
    if (__atomic_load_n(&accepted_stale, __ATOMIC_ACQUIRE)) {
        agg_lock(&world_lock);
        accepted_stale = 0;
        uint64_t all = fiber0 ? fiber0->sigmask : ~0ULL;
        for (unsigned i = 0; i < next_vtid; i++)
            if (by_vtid[i])
                all &= by_vtid[i]->sigmask;
        accepted = ~all;
        agg_unlock(&world_lock);
    }
    pend &= accepted & ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
    while (pend) {
        int sig = __builtin_ctzll(pend) + 1;
        uint64_t bit = 1ULL << (sig - 1);
        pend &= pend - 1;
        struct ferry_ksigaction act;
        if (agg_signal_action(sig, &act) != 0)
            continue;
        char info[SIGINFO_SIZE];
        if (act.handler == SIG_IGN || (act.handler == SIG_DFL && default_ignored(sig))) {
            dequeue(sig, info);
            continue;
        }
        if (act.handler == SIG_DFL) {
            /* ends or stops the process: let the kernel act on it here */
            uint64_t m = c->kmask;
            carrier_mask(c, m & ~bit);
            carrier_mask(c, m);
            continue;
        }
        agg_lock(&world_lock);
        struct agg_fiber *t = taker(sig);
        if (t && dequeue(sig, info)) {
            keep_info(t, sig, info);
            __atomic_or_fetch(&t->sigpending, bit, __ATOMIC_ACQ_REL);
            if (t->carrier != c || agg_threads_signalled(c, t))
                post_signal(t);
        }
        agg_unlock(&world_lock);
    }
}

/* ---- fiber 0 and the scheduler's own context ----------------------------- */

static void run_carrier(struct agg_carrier *c)
{
    agg_carrier_loop(c);
    /* every thread ended with exit(2) and none with exit_group: the kernel
     * ends the process when its last thread goes */
    agg_carrier_tls(c);
    ferry_store_exit(last_thread_code);
    ferry_raw1(SYS_exit_group, last_thread_code);
    /* refused: strict mode, which allows exit alone; a worker ends the
     * process, and this thread ends as strict mode lets it */
    agg_workers_end_process(last_thread_code);
    for (;;)
        ferry_pass6(SYS_exit, 0, 0, 0, 0, 0, 0);
}

static void sched_main(void *arg) { run_carrier(arg); }

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
        return -ENOMEM;
    f->thread = 1;
    f->carrier = c;
    f->tcb = (void *)ferry_tp();
    f->ctx.fsbase = ferry_tp();
    f->state = AGG_RUNNING;
    f->joined = -1;
    f->sigmask = kernel_mask();
    c->kmask = f->sigmask;
    f->alt = c->kalt = kernel_altstack();
    ferry_raw2(SYS_prctl, PR_GET_NAME, (long)f->name);
    long prio = ferry_raw2(SYS_getpriority, PRIO_PROCESS_, 0);  /* 20 - nice */
    f->nice = prio > 0 ? 20 - (int)prio : 0;
    c->tid = (int)ferry_raw0(SYS_gettid);
    c->threads = 1;
    c->placed = 1;  /* fiber 0 is one of its threads */
    agg_tick_create(c);
    agg_count_fiber(c);
    c->current = f;
    main_vtid = c->tid;
    f->vtid = main_vtid;
    fiber0 = f;
    agg_carrier = c;
    agg_self = f;
    agg_threads_alive = 1;
    carriers[0] = c;
    ncarriers = 1;
    world_pid = ferry_raw0(SYS_getpid);
    rseq_attach(c, 0);
    agg_steal_join(c);
    __atomic_add_fetch(&g->carriers, 1, __ATOMIC_ACQ_REL);
    agg_stat(g, AGG_ST(fibers), 1);
    agg_stat(g, AGG_ST(carriers), 1);
    return 0;
}

/* ---- more carriers: threads of the shim's own ------------------------------ */

struct carrier_boot {
    struct ferry_group *g;
    struct agg_carrier *c;
    unsigned long tp;
    int done;       /* futex word: 1 started, 2 failed */
};

static void carrier_main(void *arg)
{
    struct carrier_boot *b = arg;
    struct agg_carrier *c;
    int r = agg_carrier_new(b->g, &c);
    if (r == 0) {
        c->raw = 1;
        c->threads = 1;
        c->kmask = ~0ULL;   /* as it was cloned: every signal blocked, */
        c->kalt = no_altstack;  /* no alternate stack (CLONE_VM) */
        rseq_attach(c, 1);
        agg_tick_create(c);
        agg_carrier = c;
        agg_self = 0;
        ferry_catchall_thread();
        agg_steal_join(c);  /* one at a time: the starter waits for `done` */
        b->c = c;
    }
    __atomic_store_n(&b->done, r == 0 ? 1 : 2, __ATOMIC_RELEASE);
    ferry_raw6(SYS_futex, (long)&b->done, 129 /* FUTEX_WAKE_PRIVATE */, 1, 0, 0, 0);
    if (r == 0)
        run_carrier(c);
}

long ferry_agg_clone(unsigned long flags, void *stack_top, int *ptid, int *ctid, unsigned long tls,
                     void (*fn)(void *), void *arg);

/* Carriers 1..n-1: each a thread with a thread block like a fiber's, so
 * that what the shim does on it finds its own TLS. */
static int start_carriers(struct ferry_group *g, unsigned n)
{
    uint64_t all = ~0ULL, old;
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
    int r = 0;
    while (ncarriers < n && ncarriers < MAX_CARRIERS) {
        size_t size;
        unsigned long tp;
        char *top;
        if (!agg_thread_block(CARRIER_STACK, &size, &tp, &top)) {
            r = -ENOMEM;
            break;
        }
        struct carrier_boot b = {g, 0, tp, 0};
        long tid = ferry_agg_clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                                       CLONE_SYSVSEM | CLONE_SETTLS,
                                   top, 0, 0, tp, carrier_main, &b);
        if (tid < 0) {
            r = (int)tid;
            break;
        }
        int d;
        while (!(d = __atomic_load_n(&b.done, __ATOMIC_ACQUIRE)))
            ferry_raw6(SYS_futex, (long)&b.done, 128 /* FUTEX_WAIT_PRIVATE */, 0, 0, 0, 0);
        if (d != 1) {
            r = -ENOMEM;  /* its thread has ended; its mapping stays */
            break;
        }
        __atomic_add_fetch(&g->carriers, 1, __ATOMIC_ACQ_REL);
        agg_stat(g, AGG_ST(carriers), 1);
        __atomic_store_n(&carriers[ncarriers], b.c, __ATOMIC_RELEASE);
        __atomic_add_fetch(&ncarriers, 1, __ATOMIC_RELEASE);
    }
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &old, 0, 8);
    return r;
}

/* Where a new thread goes: the carrier with the fewest threads placed, or
 * its creator's when a filter binds the creator (it binds the new thread
 * too, and no other carrier has it). */
static struct agg_carrier *place(struct agg_carrier *mine, int confined)
{
    struct agg_carrier *best = mine;
    unsigned least = __atomic_load_n(&mine->placed, __ATOMIC_RELAXED);
    unsigned n = confined ? 0 : __atomic_load_n(&ncarriers, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++) {
        struct agg_carrier *c = carriers[i];
        unsigned k = __atomic_load_n(&c->placed, __ATOMIC_RELAXED);
        if (k < least)
            best = c, least = k;
    }
    __atomic_add_fetch(&best->placed, 1, __ATOMIC_RELAXED);
    agg_tick_update(best);
    return best;
}

/* A seccomp filter (or strict mode) the calling fiber installed binds its
 * carrier's kernel thread, which runs the fiber's calls the filter refuses
 * (agg_route.c), and no other carrier, unless TSYNC gave it every thread
 * of the process: the fiber stays on its carrier from now on, and the
 * threads it starts, which natively inherit the filter, go there too.  On
 * other carriers the calls the filter refuses had run unfiltered (a
 * thread started after the filter opened the file it answers EPERM). */
void agg_threads_confined(int every_thread)
{
    struct agg_fiber *f = agg_self;
    if (!agg_threads_on || !f || !f->thread || every_thread)
        return;
    f->confined = 1;
    f->movable = 0;  /* it runs now, in no carrier's queue */
}

/* The carriers of the calling process's fiber world, none in a process that
 * shares the world's memory without being its process (a vfork child, a
 * clone(CLONE_VM) child): their carriers are the parent's. */
FERRY_HOT_TEXT unsigned agg_threads_world(struct agg_carrier **out, unsigned cap)
{
    if (!world_pid || ferry_raw0(SYS_getpid) != world_pid)
        return 0;
    unsigned n = __atomic_load_n(&ncarriers, __ATOMIC_ACQUIRE);
    if (n > cap)
        n = cap;
    for (unsigned i = 0; i < n; i++)
        out[i] = __atomic_load_n(&carriers[i], __ATOMIC_ACQUIRE);
    return n;
}

static int start_world(void)
{
    /* The pools' own rings serve raw batches, which no one makes on this
     * group, and SQPOLL threads the carriers attach to: only those are made
     * (each a descriptor the program would see; agg_group_create says why
     * none is made to be closed). */
    struct ferry_group *g;
    int r = agg_group_create(&g, &agg_profile, 0);
    if (r)
        return r;
    /* the other carriers start with the second thread (see new_thread) */
    return become_fiber0(g);
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
    /* pthread_create clears it: threads made before this one became fiber
     * 0 are not fibers; nor are those a clone no shim sees can make */
    if ((&__libc_single_threaded && !__libc_single_threaded) || !ferry_catchall_on)
        outside_threads = 1;
    return start_world();
}

/* A fork child has only the thread that forked, and rings shared with its
 * parent: it starts over, the forking fiber as its fiber 0. */
void agg_threads_after_fork(void)
{
    /* the other threads' locks and waits are not the child's */
    agg_futex_forget();
    agg_creds_after_fork();
    /* stored only when it changes: a store copies its page (a fault) in
     * every fork child, fibers or not */
    if (outside_threads != !ferry_catchall_on)
        outside_threads = !ferry_catchall_on;
    struct agg_fiber *self = agg_self;
    if (!agg_threads_on || !self)
        return;
    struct agg_carrier *old = self->carrier;
    /* the kernel named the child after the carrier: natively, the thread that forked */
    ferry_raw2(SYS_prctl, PR_SET_NAME, (long)self->name);
    agg_carrier_forget(old);
    agg_group_forget(old->g);
    ferry_memset(by_vtid, 0, MAX_THREADS * sizeof(*by_vtid));
    world_lock = 0;
    next_vtid = 0;
    ncarriers = 0;
    carriers_tried = 0;
    agg_steal_forget();
    accepted_stale = 1;
    agg_self = 0;
    agg_carrier = 0;
    fiber0 = 0;
    agg_tick_forget();
    start_world();
}

/* ---- vfork ---------------------------------------------------------------- */

/* A vfork child runs on its parent's stack and thread block, as another
 * task: nothing it does may reach the fiber world (its calls would park a
 * fiber of the parent, or run another carrier's fibers in the child).  It
 * sees no fiber; the parent, which waits meanwhile, gets its own back. */
static __thread struct agg_fiber *vfork_parent __attribute__((tls_model("initial-exec")));

FERRY_HOT_TEXT void agg_vfork_child(void)
{
    vfork_parent = agg_self;
    agg_self = 0;
}

FERRY_HOT_TEXT int agg_in_vfork_child(void) { return vfork_parent != 0; }

FERRY_HOT_TEXT void agg_vfork_parent(void)
{
    if (vfork_parent)
        agg_self = vfork_parent;
    vfork_parent = 0;
}

/* ---- threads ------------------------------------------------------------- */

static void thread_entry(void *arg)
{
    struct agg_fiber *f = arg;
    agg_thread_resumed(f);  /* a signal sent before it ever ran waits for its first call */
    ferry_agg_thread_resume(f->start);
}

static long new_thread(struct agg_fiber *self, struct ferry_regs *r, unsigned long flags,
                       unsigned long stack_lo, unsigned long stack_top, int *ptid, int *ctid,
                       unsigned long tls)
{
    if (__atomic_load_n(&next_vtid, __ATOMIC_RELAXED) >= MAX_THREADS)
        return -EAGAIN;  /* as when a process hits its thread limit */
    if (!carriers_tried) {
        /* Not before: a fork child comes here only once glibc has unlocked
         * what its fork locked (malloc's arenas, ld.so's TLS lock), which
         * making thread blocks takes.  Those locks' own calls run natively,
         * as in ferry_fiber_spawn.  Fewer carriers than asked (out of
         * memory) still run the program. */
        carriers_tried = 1;
        /* fibers to share a carrier between: they are preempted from now on
         * (without the signal they still run, but one that makes no call
         * keeps its carrier) */
        if (agg_signal_start() == 0)
            agg_tick_create(carriers[0]);
        int busy = self->busy;
        self->busy = 1;
        start_carriers(self->carrier->g, agg_threads_carriers);
        self->busy = busy;
    }
    struct agg_fiber *f = agg_calloc(1, sizeof(*f));
    struct agg_thread_start *s = agg_calloc(1, sizeof(*s));
    if (!f || !s) {
        agg_free(f);
        agg_free(s);
        return -ENOMEM;
    }
    long *frame = r->frame;
    *s = (struct agg_thread_start){frame[0], r->rbp, r->r12, r->r13, r->r14, r->r15, r->rdi,
                                   r->rsi, r->rdx, r->r10, r->r8, r->r9, frame[1], frame[2],
                                   (long)stack_top - 128};
    struct agg_carrier *c = place(self->carrier, self->confined);
    f->thread = 1;
    f->confined = self->confined;  /* a thread inherits its creator's filter */
    f->movable = agg_steal_on() && !f->confined;  /* fiber 0 never: its block is carrier 0's own */
    f->start = s;
    f->carrier = c;
    f->tcb = (void *)tls;
    f->stack_lo = (char *)stack_lo;
    f->stack_top = (char *)stack_top;
    f->ctx.fsbase = tls;
    f->joined = -1;
    f->sigmask = self->sigmask;  /* a new thread inherits its creator's mask, */
    f->alt = no_altstack;        /* but not its alternate stack (CLONE_VM) */
    ferry_memcpy(f->name, current_name(self), sizeof(f->name));  /* and its name */
    f->nice = self->nice;        /* and its nice value */
    if (flags & CLONE_CHILD_CLEARTID)
        f->clear_tid = ctid;
    /* the thread's own copy of the shim's per-thread state */
    *FERRY_TLS_IN(tls, agg_self) = f;
    *FERRY_TLS_IN(tls, agg_carrier) = c;
    ferry_catchall_adopt(tls, c->tp);
    /* its first switch starts thread_entry on the new stack, well below what
     * the resume writes at its top */
    agg_ctx_start(&f->ctx, (void *)(stack_top - 128 - 512), thread_entry, f);
    agg_lock(&world_lock);
    f->vtid = VTID_BASE + (int)next_vtid++;
    by_vtid[f->vtid - VTID_BASE] = f;
    accepted_stale = 1;
    agg_unlock(&world_lock);
    /* as the kernel does, before the child can run */
    if (flags & CLONE_PARENT_SETTID)
        *ptid = f->vtid;
    if (flags & CLONE_CHILD_SETTID)
        *ctid = f->vtid;
    __atomic_add_fetch(&agg_threads_alive, 1, __ATOMIC_ACQ_REL);
    agg_stat(c->g, AGG_ST(fibers), 1);
    long vtid = f->vtid;
    if (c == self->carrier) {
        agg_count_fiber(c);
        agg_wake(f);
    } else {
        agg_post(f, AGG_POST_NEW);  /* from here on f is its carrier's */
    }
    return vtid;
}

/* clone/clone3 of a thread: 1 and the result in r->rax, or 0 when it is not
 * a thread the fiber world can host (then it runs as the kernel's). */
static int clone_thread(struct agg_fiber *self, struct ferry_regs *r)
{
    unsigned long flags, stack_lo = 0, stack_top, tls;
    int *ptid, *ctid;
    if (!r->frame)
        return 0;  /* caught by the catch-all: no trampoline to resume through */
    if (r->rax == SYS_clone3) {
        struct clone_args_k a;
        if ((unsigned long)r->rsi < sizeof(a) || ferry_safe_read(&a, (void *)r->rdi, sizeof(a)) != sizeof(a))
            return 0;
        flags = a.flags;
        stack_lo = a.stack;    /* clone(2) gives only the top */
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
    r->rax = new_thread(self, r, flags, stack_lo, stack_top, ptid, ctid, tls);
    return 1;
}

/* On the scheduler, once the fiber that ran the thread is off its stack. */
void agg_thread_free(struct agg_fiber *f)
{
    agg_free(f->siginfo);
    agg_free(f->start);
    agg_free(f);
}

void agg_thread_finished(struct agg_carrier *c, struct agg_fiber *f)
{
    /* the shim's stack is named in the thread's TLS, which glibc may unmap
     * or reuse (a joiner on another carrier) as soon as the tid word reads 0 */
    ferry_thread_stack_release(FERRY_TLS_IN((unsigned long)f->tcb, ferry_thr));
    if (f->clear_tid) {
        __atomic_store_n(f->clear_tid, 0, __ATOMIC_RELEASE);
        /* pthread_join waits on it as a shared futex, through the kernel */
        ferry_raw6(SYS_futex, (long)f->clear_tid, FUTEX_WAKE_, 0x7fffffff, 0, 0, 0);
        agg_futex_wake_all(f->clear_tid);
    }
    agg_lock(&world_lock);
    if (f->vtid >= VTID_BASE)
        by_vtid[f->vtid - VTID_BASE] = 0;
    accepted_stale = 1;
    if (f == fiber0)
        fiber0 = 0;
    agg_unlock(&world_lock);
    __atomic_sub_fetch(&c->placed, 1, __ATOMIC_RELAXED);
    agg_tick_update(c);
    /* a post made before it left the table (maybe being read by the carrier
     * it left): the inbox that holds it frees it */
    if (!__atomic_fetch_or(&f->posted, AGG_POST_DEAD, __ATOMIC_ACQ_REL))
        agg_thread_free(f);
    __atomic_sub_fetch(&agg_threads_alive, 1, __ATOMIC_ACQ_REL);
}

/* On carrier c, for a signal sent to t from anywhere: a fiber parked in a
 * call on c is woken so the call ends with EINTR, as a blocked thread's
 * would; one that runs or is ready sees it at its next call (or as it
 * parks, agg_park).  1 when t is parked on another carrier (it moved since
 * it was c's): the caller passes the signal on. */
int agg_threads_signalled(struct agg_carrier *c, struct agg_fiber *t)
{
    uint64_t due = __atomic_load_n(&t->sigpending, __ATOMIC_ACQUIRE) & ~(t->sigmask & ~t->waitset);
    if (!due || __atomic_load_n(&t->state, __ATOMIC_SEQ_CST) != AGG_PARKED)
        return 0;
    if (__atomic_load_n(&t->carrier, __ATOMIC_ACQUIRE) != c)
        return 1;
    if (t->suspended) {
        t->suspended = 0;
        agg_wake(t);
    } else {
        agg_interrupt(t);
    }
    return 0;
}

/* A signal for a fiber that is not running: kept until it runs (with
 * world_lock held: t stays while it is in the table). */
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
    __atomic_or_fetch(&t->sigpending, 1ULL << (sig - 1), __ATOMIC_SEQ_CST);
    if (t->carrier != self->carrier || agg_threads_signalled(self->carrier, t))
        post_signal(t);
    return 0;
}

static long exit_thread(struct agg_fiber *self, long code)
{
    __atomic_store_n(&last_thread_code, (int)code, __ATOMIC_RELAXED);
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
        char info[SIGINFO_SIZE];
        if (dequeue(sig, info)) {
            agg_lock(&world_lock);
            keep_info(f, sig, info);
            agg_unlock(&world_lock);
            __atomic_or_fetch(&f->sigpending, 1ULL << (sig - 1), __ATOMIC_ACQ_REL);
        }
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
    if (ferry_read_arg(r, &set, (void *)r->rdi, 8) != 8)
        return -EFAULT_;
    set &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
    uint64_t deadline = 0;
    if (r->rdx) {
        struct __kernel_timespec ts;
        if (ferry_read_arg(r, &ts, (void *)r->rdx, sizeof(ts)) != sizeof(ts))
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
            char info[SIGINFO_SIZE];
            if (!take_info(f, sig, info))
                own_info(sig, -6 /* SI_TKILL */, info);
            if (r->rsi && ferry_write_arg(r, (void *)r->rsi, info, sizeof(info)))
                res = -EFAULT_;
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
                res = -EAGAIN;
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

/* sched_{get,set}affinity of a fiber: it runs where its carrier does, so a
 * request is checked against the machine and remembered, and a get answers
 * what was asked. */
static int affinity(struct agg_fiber *f, struct ferry_regs *r)
{
    uint64_t want = 0;
    int set = r->rax == SYS_sched_setaffinity;
    if (set) {
        unsigned long len = (unsigned long)r->rsi < 8 ? (unsigned long)r->rsi : 8;
        if (ferry_read_arg(r, &want, (void *)r->rdx, len) != (long)len)
            return r->rax = -EFAULT_, 1;
        uint64_t have = 0;
        ferry_raw3(SYS_sched_getaffinity, 0, sizeof(have), &have);
        want &= have;
    }
    agg_lock(&world_lock);
    struct agg_fiber *t = r->rdi == 0 ? f : lookup(r->rdi);
    uint64_t asked = 0;
    if (t && set && want)
        t->affinity = want;
    else if (t)
        asked = t->affinity;
    agg_unlock(&world_lock);
    if (!t)
        return r->rdi >= VTID_BASE ? (r->rax = -ESRCH_, 1) : 0;
    if (set) {
        r->rax = want ? 0 : -EINVAL_;
        return 1;
    }
    long n = ferry_pass6(SYS_sched_getaffinity, 0, r->rsi, r->rdx, 0, 0, 0);
    if (n > 0 && asked)
        *(uint64_t *)r->rdx = asked;  /* the kernel just wrote it */
    r->rax = n;
    return 1;
}

/* setpriority and getpriority of a thread (PRIO_PROCESS with its tid, or
 * 0 for the caller): the fiber's own nice value, kept as its affinity is
 * and not acted on (the fibers of a carrier share its kernel thread).
 * With a fiber's virtual tid the kernel knew no such task (ESRCH: a
 * server's background threads were refused their lower priority), and
 * with 0 it set the carrier's, for every fiber on it.  The first thread's
 * stays its kernel thread's.  The kernel's rules: clamped to -20..19, and lowering it needs
 * RLIMIT_NICE to allow it or CAP_SYS_NICE (EACCES). */
#define EACCES_ 13
#define RLIMIT_NICE_ 13
#define CAP_SYS_NICE_ 23

static int may_lower_nice(int nice)
{
    struct { uint64_t cur, max; } lim = {0, 0};
    if (ferry_raw4(SYS_prlimit64, 0, RLIMIT_NICE_, 0, &lim) == 0 && (uint64_t)(20 - nice) <= lim.cur)
        return 1;
    struct { uint32_t version; int pid; } h = {0x20080522, 0};
    struct { uint32_t effective, permitted, inheritable; } caps[2] = {{0, 0, 0}, {0, 0, 0}};
    return ferry_raw2(SYS_capget, &h, caps) == 0 && (caps[0].effective & (1U << CAP_SYS_NICE_));
}

static int priority(struct agg_fiber *f, struct ferry_regs *r)
{
    if (r->rdi != PRIO_PROCESS_)
        return 0;  /* a process group's or a user's: the kernel's */
    int set = r->rax == SYS_setpriority;
    long want = (long)(int)r->rdx;
    want = want < -20 ? -20 : want > 19 ? 19 : want;
    agg_lock(&world_lock);
    struct agg_fiber *t = r->rsi == 0 ? f : lookup(r->rsi);
    int nice = t ? t->nice : 0;
    agg_unlock(&world_lock);
    if (!t)
        return r->rsi >= VTID_BASE ? (r->rax = -ESRCH_, 1) : 0;
    if (t->vtid < VTID_BASE) {
        /* the first thread's is its kernel thread's (carrier 0, which it
         * never leaves): what `ps` shows and the scheduler acts on, as natively */
        r->rax = ferry_pass6(r->rax, PRIO_PROCESS_, t->vtid, r->rdx, 0, 0, 0);
        if (set && r->rax == 0)
            t->nice = (int)want;
        return 1;
    }
    if (!set) {
        r->rax = 20 - nice;  /* as the system call says it; glibc takes it back */
        return 1;
    }
    if (want < nice && !may_lower_nice((int)want)) {
        r->rax = -EACCES_;
        return 1;
    }
    agg_lock(&world_lock);
    if (lookup(t->vtid) == t)
        t->nice = (int)want;
    agg_unlock(&world_lock);
    r->rax = 0;
    return 1;
}

/* clock_gettime and clock_getres of a thread's CPU clock: the caller's
 * (CLOCK_THREAD_CPUTIME_ID, or the per-thread clock of tid 0), or that of a
 * thread by its id (pthread_getcpuclockid), which for a vtid lost its top
 * bits in the clock's encoding (the kernel's MAKE_THREAD_CPUCLOCK) and reads
 * as a clock of no thread.  Answered from what the carriers charged each
 * fiber (agg_cputime.c); 0 for any other clock, and for a kernel thread that
 * is no fiber's.  `f`: the fiber calling, 0 when none runs (a handler the
 * kernel ran on a carrier between fibers, or on a worker).
 *
 * Without world_lock: a program's signal handler reads clocks too
 * (haproxy's watchdog), and one that interrupted a section holding the lock,
 * on the same carrier, spun on it for ever.  The tables are read as they
 * are (a pointer store publishes a fiber); another thread's fiber may end
 * and be freed meanwhile, so what is read of it goes through the kernel. */
static int cpu_clock(struct agg_fiber *f, struct ferry_regs *r)
{
    int clk = (int)r->rdi;
    long tid = 0;
    if (clk == 3 /* CLOCK_THREAD_CPUTIME_ID */) {
        clk = -2;  /* the caller's, CPUCLOCK_SCHED */
    } else if (clk < 0 || clk >= 16 /* MAX_CLOCKS */) {
        if (!(clk & 4) || (clk & 3) == 3)
            return 0;  /* a process's clock, or no clock at all */
        tid = ~(long)(clk >> 3);
        if (tid < 0)
            tid = (tid & 0x1fffffffL) | (VTID_BASE & ~0x1fffffffL);
    } else {
        return 0;
    }
    if (tid == 0 && !f)
        return 0;  /* a carrier's or a worker's own: the kernel's */
    struct agg_fiber *t = tid == 0 ? f : table_entry(tid);
    int state = AGG_RUNNING;  /* the caller's own */
    if (t && t != f && ferry_safe_read(&state, &t->state, sizeof(state)) != sizeof(state))
        t = 0;
    if (!t || state == AGG_DONE)
        return tid >= VTID_BASE ? (r->rax = -EINVAL_, 1) : 0;
    struct timespec ts = {0, 0};
    if (r->rax == SYS_clock_getres) {
        /* as the caller's own clock of that kind */
        r->rax = ferry_raw2(SYS_clock_getres, agg_thread_clock(0, clk & 3), r->rsi ? &ts : 0);
        if (r->rax == 0 && r->rsi && ferry_write_arg(r, (void *)r->rsi, &ts, sizeof(ts)))
            r->rax = -EFAULT_;
        return 1;
    }
    agg_cpu_start(agg_carrier, fiber0);
    uint64_t ns;
    if (agg_cpu_fiber_ns(f, t, &ns))
        return r->rax = -EINVAL_, 1;  /* it ended meanwhile */
    ts.tv_sec = (time_t)(ns / 1000000000ULL);
    ts.tv_nsec = (long)(ns % 1000000000ULL);
    r->rax = ferry_write_arg(r, (void *)r->rsi, &ts, sizeof(ts)) ? -EFAULT_ : 0;
    return 1;
}

/* What prctl(PR_SET_NAME) takes of `src`: up to 15 bytes, to its NUL, the
 * rest of `out` zeros; -EFAULT where the kernel's copy would fail (a byte
 * before the NUL that cannot be read). */
static long read_name(const struct ferry_regs *r, char out[16], const char *src)
{
    ferry_memset(out, 0, 16);
    size_t room = 4096 - ((uintptr_t)src & 4095), n = room < 15 ? room : 15;
    if (ferry_read_arg(r, out, src, n) != (long)n)
        return -EFAULT_;
    size_t len = 0;
    while (len < n && out[len])
        len++;
    if (len == n && n < 15 && ferry_read_arg(r, out + n, src + n, 15 - n) != (long)(15 - n))
        return -EFAULT_;
    while (len < 15 && out[len])
        len++;
    ferry_memset(out + len, 0, 16 - len);
    return 0;
}

/* A thread's name (prctl PR_SET_NAME, PR_GET_NAME: glibc's
 * pthread_setname_np and pthread_getname_np of the calling thread) is its
 * kernel thread's, which under fibers is the carrier's, shared by its
 * fibers: a thread read back the name another one had set last.  Each
 * fiber keeps its own (a new thread its creator's, as the kernel copies
 * it); setting it goes to the kernel, which checks and cuts it, and names
 * the carrier after it, but for carrier 0's other fibers: carrier 0 is the
 * program's first thread, whose name is the process's (/proc/PID/comm,
 * what ps and pgrep match), and a thread naming itself renamed the process
 * (redis became `jemalloc_bg_thd`).  Their name is cut as the kernel cuts
 * it.  Another thread's name lies in /proc/self/task/TID/comm, where no
 * vtid has an entry. */
static int thread_name(struct agg_fiber *f, struct ferry_regs *r)
{
    if (r->rdi == PR_SET_NAME && f != fiber0 && f->carrier && f->carrier->tid == world_pid) {
        char name[16];
        r->rax = read_name(r, name, (const char *)r->rsi);
        if (r->rax == 0)
            ferry_memcpy(f->name, name, sizeof(f->name));
        return 1;
    }
    if (r->rdi == PR_SET_NAME) {
        r->rax = ferry_pass6(SYS_prctl, PR_SET_NAME, r->rsi, r->rdx, r->r10, r->r8, 0);
        if (r->rax == 0)
            ferry_raw2(SYS_prctl, PR_GET_NAME, (long)f->name);
        return 1;
    }
    if (r->rdi == PR_GET_NAME) {
        r->rax = ferry_write_arg(r, (void *)r->rsi, current_name(f), sizeof(f->name)) ? -EFAULT_ : 0;
        return 1;
    }
    return 0;
}

struct agg_fiber *agg_thread_hold(long tid)
{
    agg_lock(&world_lock);
    return lookup(tid);
}

void agg_thread_let_go(void) { agg_unlock(&world_lock); }

void agg_thread_rename(struct agg_fiber *t, const char name[16])
{
    ferry_memcpy(t->name, name, sizeof(t->name));
    if (t == agg_self && (t == fiber0 || t->carrier->tid != world_pid))
        ferry_raw2(SYS_prctl, PR_SET_NAME, (long)t->name);
}

/* From ferry_slow, before anything else: 1 if this was a thread operation
 * the fiber world answers (result in r->rax). */
int ferry_agg_thread_call(struct ferry_regs *r)
{
    struct agg_fiber *f = agg_self;
    if (!agg_threads_on)
        return 0;
    switch (r->rax) {
    case SYS_mmap: case SYS_munmap: case SYS_mremap: case SYS_mprotect: case SYS_pkey_mprotect:
    case SYS_madvise: case SYS_brk: case SYS_shmat: case SYS_shmdt: case SYS_remap_file_pages:
        agg_usermem_call(r);  /* from any thread: the pages are everyone's */
        return 0;
    }
    if (r->rax == SYS_clock_gettime || r->rax == SYS_clock_getres)
        /* also from a handler that interrupted the shim (busy), or that the
         * kernel ran on a carrier between fibers or on a worker: another
         * thread's clock is still a vtid's */
        return cpu_clock(f && f->thread && f->state == AGG_RUNNING ? f : 0, r);
    if (!f || f->busy || f->state != AGG_RUNNING || !f->thread)
        return native_call(r);
    struct agg_carrier *c = f->carrier;
    switch (r->rax) {
    case SYS_clone:
    case SYS_clone3:
        return clone_thread(f, r) || native_call(r);
    case SYS_exit:
        exit_thread(f, r->rdi);
        return 1;
    case SYS_gettid:
        r->rax = f->vtid;
        return 1;
    case SYS_read:
    case SYS_write:
        return __atomic_load_n(&agg_name_files, __ATOMIC_RELAXED) && agg_name_file_io(r);
    case SYS_close:
        if (__atomic_load_n(&agg_name_files, __ATOMIC_RELAXED))
            agg_name_file_closed(r->rdi);
        return 0;
    case SYS_tkill:
    case SYS_tgkill: {
        long tid = r->rax == SYS_tkill ? r->rdi : r->rsi;
        long sig = r->rax == SYS_tkill ? r->rsi : r->rdx;
        if (r->rax == SYS_tgkill && r->rdi != ferry_raw0(SYS_getpid))
            return 0;
        agg_lock(&world_lock);
        struct agg_fiber *t = lookup(tid);
        if (t && t != f)
            r->rax = signal_fiber(f, t, sig);
        agg_unlock(&world_lock);
        /* To itself: the kernel runs the handler as the call returns, and
         * it must not run with world_lock held.  A handler that raised
         * again, or whose call parked the fiber while another one raised,
         * spun for ever on the lock (haproxy's thread dump, SIGURG from
         * its watchdog's handler, hung it under -p fibers). */
        if (t == f)
            r->rax = signal_fiber(f, t, sig);
        if (!t)
            return tid >= VTID_BASE ? (r->rax = -ESRCH_, 1) : 0;
        return 1;
    }
    case SYS_rt_sigprocmask:
        if (!(ferry_catchall_on && ferry_catchall_masked_call(r)))
            r->rax = ferry_pass6(r->rax, r->rdi, r->rsi, r->rdx, r->r10, 0, 0);
        f->sigmask = c->kmask = kernel_mask();
        __atomic_store_n(&accepted_stale, 1, __ATOMIC_RELEASE);
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
        agg_lock(&world_lock);
        if (fiber0 && fiber0 != f && !(fiber0->sigmask & (1ULL << (sig - 1))))
            t = fiber0;
        for (unsigned i = 0; !t && i < next_vtid; i++)
            if (by_vtid[i] && by_vtid[i] != f && !(by_vtid[i]->sigmask & (1ULL << (sig - 1))))
                t = by_vtid[i];
        if (t) {
            char info[SIGINFO_SIZE];
            own_info((int)sig, 0 /* SI_USER */, info);
            keep_info(t, (int)sig, info);
            r->rax = signal_fiber(f, t, sig);
        }
        agg_unlock(&world_lock);
        return t != 0;  /* none: every thread blocks it, pending for the process */
    }
    case SYS_rt_sigsuspend: {
        /* The fiber waits with the given mask for a signal sent to it; its
         * handler runs under that mask, then the old one is back. */
        uint64_t during;
        if (r->rsi != 8)
            return r->rax = -EINVAL_, 1;
        if (ferry_read_arg(r, &during, (void *)r->rdi, 8) != 8)
            return r->rax = -EFAULT_, 1;
        during &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
        uint64_t saved = f->sigmask;
        f->sigmask = during;
        __atomic_store_n(&accepted_stale, 1, __ATOMIC_RELEASE);
        take_process_signals(f, during);
        while (!(__atomic_load_n(&f->sigpending, __ATOMIC_ACQUIRE) & ~during)) {
            f->suspended = 1;
            agg_park(f);
            f->suspended = 0;
        }
        agg_thread_resumed(f);
        f->interrupted = 0;
        agg_threads_deliver(SYS_rt_sigsuspend, -EINTR_);
        f->sigmask = saved;
        __atomic_store_n(&accepted_stale, 1, __ATOMIC_RELEASE);
        agg_thread_resumed(f);
        r->rax = -EINTR_;
        return 1;
    }
    case SYS_rt_sigtimedwait:
        r->rax = wait_for_signal(f, r);
        return 1;
    case SYS_sched_yield:
        /* the others of this carrier run first; once a round, the CPU
         * goes to other threads too (another carrier's fiber may be the
         * one the fibers here wait for, and it may share this CPU) */
        if (agg_rq_empty(c) || !c->round_left)
            ferry_raw0(SYS_sched_yield);
        ferry_fiber_yield();
        r->rax = 0;
        return 1;
    case SYS_rseq:
        /* One carrier, one registered area: fiber 0 keeps the first thread's.
         * The others are told yes (glibc treats a refusal as fatal), and
         * their area says "no CPU known", so that sched_getcpu asks the
         * kernel instead of reading it. */
        if (f == fiber0) {
            c->rseq_cs = 0;  /* the program changes carrier 0's area: no more probe */
            return 0;
        }
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
    case SYS_sched_setaffinity:
        return affinity(f, r);
    case SYS_getpriority:
    case SYS_setpriority:
        return priority(f, r);
    case SYS_prctl:
        return thread_name(f, r);
    }
    return 0;
}

/* Calls the fiber world answers: they must reach ferry_slow. */
void agg_threads_watch(void)
{
    static const unsigned short calls[] = {SYS_clone, SYS_clone3, SYS_exit, SYS_gettid, SYS_tkill,
                                           SYS_tgkill, SYS_rt_sigprocmask, SYS_sched_yield,
                                           SYS_rseq, SYS_set_robust_list, SYS_sched_getaffinity,
                                           SYS_sched_setaffinity, SYS_getpriority, SYS_setpriority,
                                           SYS_futex, SYS_rt_sigsuspend, SYS_kill,
                                           SYS_rt_sigtimedwait, SYS_rt_sigaction, SYS_sigaltstack,
                                           SYS_clock_gettime, SYS_clock_getres, SYS_prctl,
                                           /* what may take a page away (agg_usermem.c) */
                                           SYS_mmap, SYS_munmap, SYS_mremap, SYS_mprotect,
                                           SYS_pkey_mprotect, SYS_madvise, SYS_brk, SYS_shmat,
                                           SYS_shmdt, SYS_remap_file_pages};
    for (unsigned i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        __atomic_store_n(&ferry_action[calls[i]], 1, __ATOMIC_RELAXED);
}

/* A signal for a parked fiber: its call ends early, as a blocked thread's
 * would. */
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
    if (f->req_pool < 0) {
        agg_worker_cancel(req);
        return;
    }
    struct agg_carrier *c = f->carrier;
    struct io_uring_sqe *sqe = agg_sqe(c, (unsigned)f->req_pool);
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)req | AGG_TAG_REQ, 0);
    io_uring_sqe_set_data64(sqe, AGG_TAG_IGNORE);
    c->pools[f->req_pool].misc++;
}
