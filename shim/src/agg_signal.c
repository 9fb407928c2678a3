/* The engine's own signal, with the program's threads as fibers.
 *
 * Two things need a signal that the program never sees:
 *
 *  - Preemption.  The kernel gives every runnable thread its turn; fibers on
 *    a carrier only switch when one makes a call.  A thread that spins on a
 *    flag another thread of its carrier sets would spin for ever.  So each
 *    carrier that runs more than one fiber has a timer on its thread's CPU
 *    time (it does not run while the carrier waits or blocks); when it fires
 *    and the same fiber, in the program's own code, has had the carrier for
 *    a whole slice, or since the last tick while a completion, a post or a
 *    ready fiber waits, the handler parks that fiber behind the others and
 *    lets the scheduler run them (their completions are reaped first).
 *    The handler's frame stays on the fiber's stack until it runs again.
 *
 *  - Cutting a worker's call short.  A fiber whose call (select, poll,
 *    flock, wait4, ...) a worker thread runs gets a signal: natively its
 *    call would end with EINTR.  The worker is sent this signal; the call
 *    runs through ferry_cp_call (agg_cancel.S), whose layout lets the
 *    handler end it without a race.
 *
 * The signal is SIGRTMAX, as Go takes SIGURG: the program's own use of it
 * still works.  Its disposition is kept here (rt_sigaction answers from it);
 * a SIGRTMAX that is not the engine's goes where the program said; an
 * ignored SIGRTMAX is ignored again across exec.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <time.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

#define KSIGSET 8
#define EINTR_ 4
#define EFAULT_ 14
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif
#define SIGEV_THREAD_ID_ 4
#define SI_TIMER_ (-2)
#define AGG_SI_CANCEL (-0x46)           /* si_code of a worker's cancel signal */
#define AGG_SI_KICK (-0x47)             /* si_code of a carrier's "a signal was posted" */
#define TICK_NS 1000000L                /* how often a busy carrier looks (its CPU time;
                                           the kernel rounds it up to its own tick) */
#define SLICE_NS 10000000L              /* a fiber's slice when nothing else waits */
#define TICK_TAG 0x4652000000000000UL   /* sival of a tick: tag | slot */
#define MAX_TICKING 64
#define BIT(sig) (1ULL << ((sig) - 1))

/* in .data: every exec reads it, and a page of .bss the process never
 * touched is a fault to read (in each command a bash forks) */
int agg_signal_owned FERRY_HOT;
static struct ferry_ksigaction program_act;   /* what the program set for AGG_SIGNAL */
static struct agg_carrier *ticking[MAX_TICKING];
static unsigned nticking;

extern char __ehdr_start[] __attribute__((visibility("hidden")));
extern char __etext[] __attribute__((visibility("hidden")));
void ferry_sigreturn(void);  /* entry.S: the handlers' restorer */
extern char ferry_cp_begin[], ferry_cp_syscall[], ferry_cp_end[], ferry_cp_cancelled[];

/* ---- the program's disposition --------------------------------------------- */

int agg_signal_action(int sig, struct ferry_ksigaction *act)
{
    if (agg_signal_owned && sig == AGG_SIGNAL) {
        *act = program_act;
        return 0;
    }
    return (int)ferry_raw4(SYS_rt_sigaction, sig, 0, act, KSIGSET);
}

int agg_program_handlers;

/* rt_sigaction(SIGRTMAX): answered from the program's record.  A vfork
 * child has a table of its own (its changes must not reach the parent's
 * record), so its calls go to the kernel.  Every rt_sigaction comes here
 * first: the first handler the program sets is noted (agg_program_handlers). */
int agg_signal_call(struct ferry_regs *r)
{
    if (r->rax == SYS_rt_sigaction && r->rsi && !agg_program_handlers) {
        void *handler = 0;
        if (ferry_read_arg(r, &handler, (void *)r->rsi, sizeof(handler)) == sizeof(handler) &&
            handler != SIG_DFL && handler != SIG_IGN)
            __atomic_store_n(&agg_program_handlers, 1, __ATOMIC_RELAXED);
    }
    if (!agg_signal_owned || r->rax != SYS_rt_sigaction || r->rdi != AGG_SIGNAL || r->r10 != KSIGSET ||
        agg_in_vfork_child())
        return 0;
    struct ferry_ksigaction act, scratch;
    if (r->rsi && ferry_read_arg(r, &act, (void *)r->rsi, sizeof(act)) != sizeof(act)) {
        r->rax = -EFAULT_;
        return 1;
    }
    /* the kernel still sees the call, as a query, so that a tracer counts it */
    ferry_pass6(SYS_rt_sigaction, AGG_SIGNAL, 0, (long)&scratch, KSIGSET, 0, 0);
    if (r->rdx && ferry_write_arg(r, (void *)r->rdx, &program_act, sizeof(program_act))) {
        r->rax = -EFAULT_;
        return 1;
    }
    if (r->rsi) {
        act.mask &= ~(BIT(SIGKILL) | BIT(SIGSTOP));
        program_act = act;
    }
    r->rax = 0;
    return 1;
}

/* exec resets a handled signal to SIG_DFL but keeps SIG_IGN: what the new
 * program inherits must be what the program set. */
FERRY_HOT_TEXT void agg_signal_before_exec(void)
{
    if (agg_signal_owned && program_act.handler == SIG_IGN)
        ferry_raw4(SYS_rt_sigaction, AGG_SIGNAL, &program_act, 0, KSIGSET);
}

static void on_signal(int sig, siginfo_t *si, void *ucv);

static int small_stacks;

static int install(void)
{
    unsigned long flags = SA_SIGINFO | SA_RESTART | SA_RESTORER;
    if (__atomic_load_n(&small_stacks, __ATOMIC_ACQUIRE))
        flags |= SA_ONSTACK;
    struct ferry_ksigaction act = {(void *)on_signal, flags, (void *)ferry_sigreturn, 0};
    return (int)ferry_raw4(SYS_rt_sigaction, AGG_SIGNAL, &act, 0, KSIGSET);
}

/* Elsewhere the handler's frame stays on the thread's stack: a program's
 * alternate stack is sized for its own handlers, not for the engine's. */
FERRY_HOT_TEXT void agg_signal_small_stacks(void)
{
    if (__atomic_exchange_n(&small_stacks, 1, __ATOMIC_ACQ_REL))
        return;
    if (__atomic_load_n(&agg_signal_owned, __ATOMIC_ACQUIRE))
        install();
}

FERRY_HOT_TEXT void agg_signal_exec_failed(void)
{
    if (agg_signal_owned && program_act.handler == SIG_IGN)
        install();
}

/* Taken only once the program has a second thread or a worker's call: a
 * single-threaded program (most of a shell script's commands) keeps its
 * SIGRTMAX exactly as it was, down to what /proc/self/status says. */
int agg_signal_start(void)
{
    static int lock;
    if (__atomic_load_n(&agg_signal_owned, __ATOMIC_ACQUIRE))
        return 0;
    agg_lock(&lock);
    int r = 0;
    if (!agg_signal_owned) {
        r = (int)ferry_raw4(SYS_rt_sigaction, AGG_SIGNAL, 0, &program_act, KSIGSET);
        if (r == 0)
            r = install();
        if (r == 0)
            __atomic_store_n(&agg_signal_owned, 1, __ATOMIC_RELEASE);
    }
    agg_unlock(&lock);
    return r;
}

/* A SIGRTMAX that is not the engine's: as the program's disposition says,
 * with the mask its handler asked for. */
static void forward(int sig, siginfo_t *si, ucontext_t *uc)
{
    struct ferry_ksigaction a = program_act;
    if (a.handler == SIG_IGN)
        return;
    if (a.handler == SIG_DFL) {
        /* a real-time signal's default ends the process: blocked while this
         * handler runs, it is delivered, and fatal, when it returns */
        struct ferry_ksigaction dfl = {SIG_DFL, 0, 0, 0};
        ferry_raw4(SYS_rt_sigaction, sig, &dfl, 0, KSIGSET);
        ferry_raw3(SYS_tgkill, ferry_raw0(SYS_getpid), ferry_raw0(SYS_gettid), sig);
        return;
    }
    if (a.flags & SA_RESETHAND) {
        program_act.handler = SIG_DFL;
        program_act.flags &= ~SA_SIGINFO;
    }
    uint64_t was;
    ferry_memcpy(&was, &uc->uc_sigmask, 8);
    uint64_t during = was | a.mask | ((a.flags & SA_NODEFER) ? 0 : BIT(sig));
    uint64_t now;
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &during, &now, KSIGSET);
    if (a.flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))a.handler)(sig, si, uc);
    else
        ((void (*)(int))a.handler)(sig);
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &now, 0, KSIGSET);
}

/* ---- preemption ------------------------------------------------------------ */

/* Each tick also delivers what was sent to the running fiber while it made
 * no call (agg_threads_raise): natively a running thread gets a signal at
 * once. */

struct ksigevent {
    void *value;
    int signo;
    int notify;
    int tid;
    int pad[11];
};


/* Set once the program's filters forbid the return from a handler
 * (agg_tick_stop_all): no carrier ticks from then on. */
static int ticks_forbidden;

void agg_tick_create(struct agg_carrier *c)
{
    if (!agg_signal_owned || c->tick_timer >= 0 || ticks_forbidden)
        return;
    unsigned slot = __atomic_fetch_add(&nticking, 1, __ATOMIC_ACQ_REL);
    if (slot >= MAX_TICKING)
        return;
    c->tick_slot = (int)slot;
    __atomic_store_n(&ticking[slot], c, __ATOMIC_RELEASE);
    struct ksigevent ev = {(void *)(TICK_TAG | slot), AGG_SIGNAL, SIGEV_THREAD_ID_, c->tid, {0}};
    int id;
    if (ferry_raw3(SYS_timer_create, agg_thread_clock(c->tid, 2 /* CPUCLOCK_SCHED */), &ev, &id) == 0) {
        c->tick_timer = id;
        agg_tick_update(c);
    }
}

/* Ticks only while the carrier has threads to share it between: counted
 * as they are placed, by whichever thread places them, so that a carrier
 * whose only fiber spins still takes in a new one (its inbox is read on a
 * tick) and preempts. */
void agg_tick_update(struct agg_carrier *c)
{
    if (c->tick_timer < 0 || !c->threads)
        return;
    agg_lock(&c->tick_lock);
    int want = __atomic_load_n(&c->placed, __ATOMIC_ACQUIRE) > 1;
    if (want != c->tick_armed) {
        struct __kernel_timespec spec[2] = {{0, want ? TICK_NS : 0}, {0, want ? TICK_NS : 0}};
        if (ferry_raw4(SYS_timer_settime, c->tick_timer, 0, spec, 0) == 0)
            c->tick_armed = want;
    }
    agg_unlock(&c->tick_lock);
}

void agg_tick_delete(struct agg_carrier *c)
{
    if (c->tick_timer >= 0)
        ferry_raw1(SYS_timer_delete, c->tick_timer);
    c->tick_timer = -1;
}

/* A program about to install a filter that refuses rt_sigreturn, which
 * natively gets no signal it did not ask for: each tick's handler would
 * end in a call the filter kills.  Its carriers stop ticking, before the
 * filter is in force (timer_delete may be refused after); their fibers
 * then change places only at their calls. */
void agg_tick_stop_all(void)
{
    __atomic_store_n(&ticks_forbidden, 1, __ATOMIC_RELEASE);
    unsigned n = __atomic_load_n(&nticking, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n && i < MAX_TICKING; i++) {
        struct agg_carrier *c = __atomic_load_n(&ticking[i], __ATOMIC_ACQUIRE);
        if (c) {
            agg_lock(&c->tick_lock);
            agg_tick_delete(c);
            c->tick_armed = 0;
            agg_unlock(&c->tick_lock);
        }
    }
}

/* A fork child has none of its parent's timers. */
void agg_tick_forget(void) { nticking = 0; }

/* `slice`: a tick of the carrier's timer, which may preempt; otherwise
 * another carrier posted a signal for the running fiber. */
static void tick(struct agg_carrier *c, ucontext_t *uc, int slice)
{
    struct agg_fiber *f = c->current;
    if (!f || f != agg_self || !f->thread || f->busy || f->state != AGG_RUNNING)
        return;
    /* only in the program's code: the shim's own may hold the carrier's state */
    unsigned long rip = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
    if (rip >= (unsigned long)__ehdr_start && rip < (unsigned long)__etext)
        return;
    /* not inside a handler of the program's (its mask is not the fiber's) */
    uint64_t m;
    ferry_memcpy(&m, &uc->uc_sigmask, 8);
    if (m != f->sigmask)
        return;
    c->kmask = m | BIT(AGG_SIGNAL);  /* what the kernel has while this handler runs */
    /* what other carriers posted (a signal for f among them) */
    if (__atomic_load_n(&c->inbox, __ATOMIC_ACQUIRE))
        agg_inbox_drain(c);
    if (slice) {
        uint64_t now = agg_now_ns();
        if (c->runs != c->tick_runs) {
            /* f began since the last look: it has its turn first */
            c->tick_runs = c->runs;
            c->slice_at = now;
        } else if (now - c->slice_at >= SLICE_NS || agg_others_waiting(c)) {
            /* Its slice is over, or what it keeps from the carrier would
             * natively run now on a CPU of its own (a sleeper's timeout, a
             * reply, a thread it woke): a computing thread must not hold
             * them for a whole slice.  The scheduler reaps before f goes
             * behind the others, so that what the reap wakes runs first. */
            agg_preempt(f);
            f->state = AGG_RUNNING;
            /* maybe on another carrier now, this handler's frame with it: the
             * kernel restores the program's registers and mask there */
            c = f->carrier;
            c->tick_runs = c->runs;
            c->slice_at = agg_now_ns();
        }
    }
    agg_threads_raise(f, m);
}

/* Another carrier posted a signal for the fiber c runs. */
void agg_signal_kick(struct agg_carrier *c)
{
    if (!agg_signal_owned)
        return;
    siginfo_t si;
    ferry_memset(&si, 0, sizeof(si));
    si.si_signo = AGG_SIGNAL;
    si.si_code = AGG_SI_KICK;
    si.si_pid = (int)ferry_raw0(SYS_getpid);
    ferry_raw4(SYS_rt_tgsigqueueinfo, si.si_pid, c->tid, AGG_SIGNAL, &si);
}

/* ---- workers --------------------------------------------------------------- */

/* On the carrier of the fiber whose call `req` a worker runs (or will). */
void agg_worker_cancel(struct agg_req *req)
{
    __atomic_store_n(&req->cancel, 1, __ATOMIC_SEQ_CST);
    int tid = __atomic_load_n(&req->worker_tid, __ATOMIC_SEQ_CST);
    if (tid <= 0)
        return;  /* queued: the worker sees the word before it starts */
    siginfo_t si;
    ferry_memset(&si, 0, sizeof(si));
    si.si_signo = AGG_SIGNAL;
    si.si_code = AGG_SI_CANCEL;
    si.si_pid = (int)ferry_raw0(SYS_getpid);
    si.si_value.sival_ptr = &req->cancel;
    ferry_raw4(SYS_rt_tgsigqueueinfo, si.si_pid, tid, AGG_SIGNAL, &si);
}

/* A worker lets only this signal through, once it is the engine's. */
void agg_worker_signals(void)
{
    uint64_t m = ~BIT(AGG_SIGNAL);
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, KSIGSET);
}

static int on_worker(int sig, siginfo_t *si, ucontext_t *uc)
{
    unsigned long *tcb = (unsigned long *)ferry_tp();
    if (tcb[AGG_WORKER_MAGIC_AT] != AGG_WORKER_MAGIC)
        return 0;
    greg_t *g = uc->uc_mcontext.gregs;
    unsigned long rip = (unsigned long)g[REG_RIP];
    if (rip >= (unsigned long)ferry_cp_begin && rip <= (unsigned long)ferry_cp_end) {
        int cancelled = __atomic_load_n((int *)g[REG_RBX], __ATOMIC_SEQ_CST);
        if (cancelled && rip <= (unsigned long)ferry_cp_syscall)
            g[REG_RIP] = (greg_t)ferry_cp_cancelled;  /* not run, or about to run again */
        else if (!cancelled && rip == (unsigned long)ferry_cp_end && g[REG_RAX] == -EINTR_)
            g[REG_RIP] = (greg_t)ferry_cp_begin;     /* cut short by a signal not for it */
    }
    long pid = ferry_raw0(SYS_getpid);
    if (si->si_code != AGG_SI_CANCEL || si->si_pid != pid) {
        /* the program's own SIGRTMAX, sent to the process, landed on a
         * worker, which has no thread block of the program's: its first
         * thread (carrier 0's) takes it */
        ferry_raw4(SYS_rt_tgsigqueueinfo, pid, pid, sig, si);
    }
    return 1;
}

static void on_signal(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    if (on_worker(sig, si, uc))
        return;
    if (si->si_code == SI_TIMER_) {
        unsigned long v = (unsigned long)si->si_value.sival_ptr;
        if ((v & ~0xffUL) == TICK_TAG && (v & 0xff) < MAX_TICKING) {
            struct agg_carrier *c = __atomic_load_n(&ticking[v & 0xff], __ATOMIC_ACQUIRE);
            if (c && c->tid == (int)ferry_raw0(SYS_gettid))
                tick(c, uc, 1);
            return;
        }
    }
    if (si->si_code == AGG_SI_KICK && si->si_pid == ferry_raw0(SYS_getpid)) {
        struct agg_carrier *c = agg_carrier;
        if (c && c->threads && c->tid == (int)ferry_raw0(SYS_gettid))
            tick(c, uc, 0);
        return;
    }
    forward(sig, si, uc);
}
