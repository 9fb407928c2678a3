/* The catch-all (Syscall User Dispatch).
 *
 * Each armed thread registers the shim's own text as the range the kernel
 * always lets through, and a selector byte of its own.  While the selector
 * says BLOCK, a `syscall` anywhere else (a module without a plan, a site the
 * rewriter left alone, JIT code) is not executed: the kernel raises SIGSYS
 * with the registers as they were.  The handler points the interrupted
 * context at the shim's entry (entry.S, CAUGHT_RESUME) and returns: the
 * call then goes through ferry_slow() from the stack it was made on, exactly
 * as a patched site's would have, returns where the kernel would have, and
 * its site is recorded with its file and offset.  Only the calls that must
 * see the handler's frame (rt_sigreturn, sigprocmask, sigaltstack), those
 * that must run at the program's own instruction (a clone on another stack,
 * vfork) and those that never return (exit) are answered from the handler.
 *
 * The settings are per thread and not inherited across clone, fork or exec:
 * every new thread and child arms itself (post hook, fork path, or its first
 * slow call).  Costs: about 40 ns on every call the process makes, the
 * shim's own included, and a signal round trip per caught call; that is
 * why a profile chooses it (FERRY_CATCH_ALL=1).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>

#include "catchall.h"
#include "engine.h"
#include "plan.h"
#include "procfile.h"
#include "raw.h"
#include "shim.h"
#include "store.h"
#include "util.h"

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif
#define SELECTOR_ALLOW 0
#define SELECTOR_BLOCK 1
#define SI_USER_DISPATCH 2      /* si_code of a SIGSYS raised by dispatch */
#define SIGSYS_BIT (1UL << (SIGSYS - 1))
#define KSIGSET 8               /* the kernel's sigset_t, in bytes */
/* Room a vfork child's alternate stack keeps at least (vfork_here): a
 * SIGSYS frame (3.6 KiB with AVX-512's registers) and a caught call's
 * handler. */
#define CHILD_ALTSTACK_MIN 12288
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

int ferry_catchall_on;
static int detached;

/* The program's own SIGSYS disposition (it never reaches the kernel), and
 * the signals whose handler masks the program asked to include SIGSYS. */
static struct ferry_ksigaction program_sigsys;
static uint64_t mask_had_sigsys;

extern char __ehdr_start[] __attribute__((visibility("hidden")));
extern char __etext[] __attribute__((visibility("hidden")));
void ferry_sigreturn(void);          /* entry.S: the handlers' restorer */
void ferry_sigreturn_syscall(void);  /* entry.S: its `syscall` */
void ferry_caught_resume(void);      /* entry.S: a caught call's C path */
void ferry_caught_resume_own_stack(void);

void ferry_catchall_thread(void)
{
    if (!ferry_catchall_on || detached)
        return;
    if (!FERRY_THR->selector_at)
        FERRY_THR->selector_at = &FERRY_THR->selector;
    *FERRY_THR->selector_at = SELECTOR_BLOCK;
    unsigned long start = (unsigned long)__ehdr_start;
    long r = ferry_raw6(SYS_prctl, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, start,
                        (unsigned long)__etext - start, (long)FERRY_THR->selector_at, 0);
    FERRY_THR->armed = r == 0;
    /* a fork child's file is new: say again that it is caught (in the
     * header's first page, which every start writes: the area's own page
     * is touched only once a call is caught) */
    if (FERRY_THR->armed && ferry_hdr && !ferry_hdr->catchall_on)
        ferry_hdr->catchall_on = 1;
}

void ferry_catchall_fork_child(void)
{
    FERRY_THR->selector_at = &FERRY_THR->selector;  /* what it shared with a carrier stayed in the parent */
    ferry_catchall_thread();
}

#ifndef FERRY_STATIC
void ferry_catchall_adopt(unsigned long tp, unsigned long carrier_tp)
{
    if (!ferry_catchall_on)
        return;
    struct ferry_thread *t = FERRY_TLS_IN(tp, ferry_thr), *carrier = FERRY_TLS_IN(carrier_tp, ferry_thr);
    t->selector_at = carrier->selector_at ? carrier->selector_at : &carrier->selector;
    t->armed = carrier->armed;
}
#endif

/* A clone the catch-all caught runs bare, let through by the thread's
 * selector (caught_call), and the thread's own calls with it until it next
 * comes through the shim: so did a Go thread's blocking every signal
 * around its next forks, SIGSYS with it, in the kernel's mask.  Its child
 * shares the thread's memory and its thread block: a Go child's first
 * call through libc (its signal handlers reset, cgo's sigaction) set the
 * parent's selector back to catching while that mask stood, and the
 * parent's next call was a SIGSYS the kernel could not deliver: the
 * process was killed (Go's os/exec from several goroutines, 5 runs of 5).
 * So the selector goes back only in the thread's own process, and SIGSYS
 * is unblocked in the kernel's mask first (the program still sees it as
 * it asked). */
static int let_through_ends(void)
{
    struct ferry_proc_header *h = ferry_hdr;
    if (h && ferry_raw0(SYS_getpid) != h->pid)
        return 0;  /* a child on the thread's memory: the selector is its parent's */
    FERRY_THR->let_through = 0;
    uint64_t now = 0, bit = SIGSYS_BIT;
    if (ferry_raw4(SYS_rt_sigprocmask, SIG_BLOCK, 0, &now, KSIGSET) == 0 && (now & bit)) {
        ferry_raw4(SYS_rt_sigprocmask, SIG_UNBLOCK, &bit, 0, KSIGSET);
        FERRY_THR->sigsys_blocked = 1;
    }
    return 1;
}

void ferry_catchall_check(void)
{
    if (detached)  /* the selector stays as ferry_catchall_detach left it */
        return;
    if (!FERRY_THR->armed)
        ferry_catchall_thread();
    else if (*FERRY_THR->selector_at != SELECTOR_BLOCK && (!FERRY_THR->let_through || let_through_ends()))
        /* read first: after a fork the selector's page is the child's too,
         * and a store of what it holds already would copy it */
        *FERRY_THR->selector_at = SELECTOR_BLOCK;
}

void ferry_catchall_allow(void)
{
    if (ferry_catchall_on && FERRY_THR->selector_at)
        *FERRY_THR->selector_at = SELECTOR_ALLOW;
}

void ferry_catchall_block(void)
{
    if (ferry_catchall_on && !detached && FERRY_THR->selector_at)
        *FERRY_THR->selector_at = SELECTOR_BLOCK;
}

void ferry_catchall_detach(void)
{
    detached = 1;
    if (FERRY_THR->selector_at)
        *FERRY_THR->selector_at = SELECTOR_ALLOW;
}

/* ---- recording sites ---------------------------------------------------- */

static unsigned long parse_hex(const char **p, const char *end)
{
    unsigned long v = 0;
    for (; *p < end; (*p)++) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            break;
        v = v * 16 + (unsigned long)d;
    }
    return v;
}

static void describe_site_in_maps(uint64_t addr, struct ferry_catch_site *site);

/* One line of /proc/self/maps: if it maps `addr`, fill the site. */
static int maps_line(const char *s, const char *end, uint64_t addr, struct ferry_catch_site *site)
{
    const char *p = s;
    unsigned long lo = parse_hex(&p, end);
    if (p >= end || *p++ != '-')
        return 0;
    unsigned long hi = parse_hex(&p, end);
    if (addr < lo || addr >= hi)
        return 0;
    /* then: perms offset dev inode path, separated by runs of spaces */
    const char *f[5] = {0};
    int n = 0;
    p = s;
    while (p < end && *p != ' ')
        p++;
    while (p < end && n < 5) {
        while (p < end && *p == ' ')
            p++;
        f[n++] = p;
        if (n == 5)
            break;
        while (p < end && *p != ' ')
            p++;
    }
    if (n < 4)
        return 1;
    const char *q = f[1];
    unsigned long off = parse_hex(&q, end);
    site->offset = addr - lo + off;
    if (n == 5 && f[4] < end) {
        /* a file, or a name such as [heap], [stack], [vdso] */
        size_t len = (size_t)(end - f[4]);
        if (len >= sizeof(site->path))
            len = sizeof(site->path) - 1;
        ferry_memcpy(site->path, f[4], len);
        site->path[len] = 0;
        if (*f[4] == '/')
            site->flags |= FERRY_CATCH_OFFSET_VALID;
    }
    return 1;
}

static void describe_site(uint64_t addr, struct ferry_catch_site *site)
{
    /* Text mapped from a plan's patched copy: the copy is the module's file
     * byte for byte, at the same offsets, under another name. */
    const char *module = ferry_plans_module_at(addr);
    if (module && !module[0])
        return;  /* trampolines: their file is the cache's, no module to plan */
    if (module) {
        describe_site_in_maps(addr, site);
        size_t len = ferry_strlen(module);
        if (len >= sizeof(site->path))
            len = sizeof(site->path) - 1;
        ferry_memcpy(site->path, module, len);
        site->path[len] = 0;
        site->flags |= FERRY_CATCH_OFFSET_VALID;
        return;
    }
    describe_site_in_maps(addr, site);
}

static void describe_site_in_maps(uint64_t addr, struct ferry_catch_site *site)
{
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    char buf[4096];
    size_t have = 0;
    for (;;) {
        long n = ferry_raw3(SYS_read, fd, buf + have, sizeof(buf) - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            if (buf[i] != '\n')
                continue;
            if (maps_line(buf + start, buf + i, addr, site)) {
                ferry_raw1(SYS_close, fd);
                return;
            }
            start = i + 1;
        }
        if (start == 0)
            start = have;  /* a line longer than the buffer: drop it */
        ferry_memcpy(buf, buf + start, have - start);
        have -= start;
    }
    ferry_raw1(SYS_close, fd);
}

static void record_site(uint64_t addr, long nr)
{
    struct ferry_proc_header *h = ferry_hdr;
    if (!h)
        return;
    struct ferry_catch_area *a = (struct ferry_catch_area *)h->catchall;
    if (!a->enabled) {
        ferry_memcpy(a->magic, FERRY_CATCH_MAGIC, 8);
        a->enabled = 1;
    }
    __atomic_add_fetch(&a->caught, 1, __ATOMIC_RELAXED);
    uint32_t n = __atomic_load_n(&a->nsites, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < FERRY_CATCH_SITES; i++) {
        if (a->sites[i].addr == addr) {
            __atomic_add_fetch(&a->sites[i].count, 1, __ATOMIC_RELAXED);
            a->sites[i].nr = (uint32_t)nr;
            return;
        }
    }
    /* Two threads catching the same new site at once may both add it: the
     * reader merges entries by address. */
    struct ferry_catch_site s;
    ferry_memset(&s, 0, sizeof(s));
    s.addr = addr;
    s.count = 1;
    s.nr = (uint32_t)nr;
    describe_site(addr, &s);
    uint32_t slot = __atomic_fetch_add(&a->nsites, 1, __ATOMIC_ACQ_REL);
    if (slot >= FERRY_CATCH_SITES) {
        __atomic_store_n(&a->nsites, FERRY_CATCH_SITES, __ATOMIC_RELEASE);
        __atomic_add_fetch(&a->overflow, 1, __ATOMIC_RELAXED);
        return;
    }
    a->sites[slot] = s;
}

/* ---- calls that carry signal masks ---------------------------------------- */

static long pass(const struct ferry_regs *r)
{
    return ferry_pass6(r->rax, r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9);
}

/* rt_sigprocmask(how, set, oldset, size) against the kernel. */
static long sigprocmask_call(struct ferry_regs *r)
{
    uint64_t set = 0, filtered;
    if (r->r10 != KSIGSET || (r->rsi && ferry_read_arg(r, &set, (void *)r->rsi, KSIGSET) != KSIGSET))
        return pass(r);  /* the kernel gives the program its error */
    filtered = set & ~SIGSYS_BIT;
    long ret = ferry_pass6(SYS_rt_sigprocmask, r->rdi, r->rsi ? (long)&filtered : 0, r->rdx,
                           KSIGSET, 0, 0);
    if (ret != 0)
        return ret;
    if (r->rdx && FERRY_THR->sigsys_blocked) {
        uint64_t *old = (uint64_t *)r->rdx;  /* the kernel just wrote it */
        *old |= SIGSYS_BIT;
    }
    if (r->rsi) {
        int in = (set & SIGSYS_BIT) != 0;
        if (r->rdi == SIG_BLOCK)
            FERRY_THR->sigsys_blocked |= in;
        else if (r->rdi == SIG_UNBLOCK)
            FERRY_THR->sigsys_blocked &= !in;
        else
            FERRY_THR->sigsys_blocked = in;
    }
    return 0;
}

/* rt_sigaction(sig, act, oact, size): SIGSYS itself stays ours. */
static long sigaction_call(struct ferry_regs *r)
{
    struct ferry_ksigaction act;
    long sig = r->rdi;
    if (r->r10 != KSIGSET || sig <= 0 || sig > 64 ||
        (r->rsi && ferry_read_arg(r, &act, (void *)r->rsi, sizeof(act)) != sizeof(act)))
        return pass(r);
    if (sig == SIGSYS) {
        /* Answered from the program's own record, yet the kernel sees the
         * call as it would have (a query), so that a tracer counts it. */
        struct ferry_ksigaction scratch;
        ferry_pass6(SYS_rt_sigaction, SIGSYS, 0, (long)&scratch, KSIGSET, 0, 0);
        if (r->rdx && ferry_write_arg(r, (void *)r->rdx, &program_sigsys, sizeof(program_sigsys)))
            return -EFAULT;
        if (r->rsi)
            program_sigsys = act;
        return 0;
    }
    uint64_t bit = 1UL << (sig - 1);
    int had = (mask_had_sigsys & bit) != 0;
    long act_ptr = r->rsi;
    uint64_t asked = r->rsi ? act.mask : 0;
    if (asked & SIGSYS_BIT) {
        act.mask &= ~SIGSYS_BIT;
        act_ptr = (long)&act;
    }
    long ret = ferry_pass6(SYS_rt_sigaction, sig, act_ptr, r->rdx, KSIGSET, 0, 0);
    if (ret != 0)
        return ret;
    if (r->rdx && had)
        ((struct ferry_ksigaction *)r->rdx)->mask |= SIGSYS_BIT;
    /* stored only when it changes: after a fork the page is the child's
     * too, and a shell sets its handlers again for every command */
    if (r->rsi && had != ((asked & SIGSYS_BIT) != 0))
        mask_had_sigsys ^= bit;
    return 0;
}

/* A call that installs a temporary mask: the same call, with SIGSYS taken
 * out of a copy.  `slot` is the argument holding the mask's address. */
static long temporary_mask_call(struct ferry_regs *r, long *slot)
{
    uint64_t mask;
    long saved = *slot;
    if (!saved || ferry_read_arg(r, &mask, (void *)saved, KSIGSET) != KSIGSET ||
        !(mask & SIGSYS_BIT))
        return pass(r);
    mask &= ~SIGSYS_BIT;
    *slot = (long)&mask;
    long ret = pass(r);
    *slot = saved;  /* the entry gives the program back its own registers */
    return ret;
}

/* pselect6's sixth argument points at {mask pointer, size}. */
static long pselect_call(struct ferry_regs *r)
{
    struct {
        long mask;
        long size;
    } arg;
    uint64_t mask;
    long saved = r->r9;
    if (!saved || ferry_read_arg(r, &arg, (void *)saved, sizeof(arg)) != sizeof(arg) || !arg.mask ||
        ferry_read_arg(r, &mask, (void *)arg.mask, KSIGSET) != KSIGSET || !(mask & SIGSYS_BIT))
        return pass(r);
    mask &= ~SIGSYS_BIT;
    arg.mask = (long)&mask;
    r->r9 = (long)&arg;
    long ret = pass(r);
    r->r9 = saved;
    return ret;
}

int ferry_catchall_masked_call(struct ferry_regs *r)
{
    switch (r->rax) {
    case SYS_rt_sigprocmask:
        r->rax = sigprocmask_call(r);
        return 1;
    case SYS_rt_sigaction:
        r->rax = sigaction_call(r);
        return 1;
    case SYS_rt_sigsuspend:
        r->rax = temporary_mask_call(r, &r->rdi);
        return 1;
    case SYS_ppoll:
        r->rax = temporary_mask_call(r, &r->r10);
        return 1;
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2:
        r->rax = temporary_mask_call(r, &r->r8);
        return 1;
    case SYS_pselect6:
        r->rax = pselect_call(r);
        return 1;
    }
    return 0;
}

/* ---- the handler ---------------------------------------------------------- */

/* A SIGSYS that dispatch did not raise (seccomp, kill) goes where the
 * program said. */
static void forward(int sig, siginfo_t *si, void *uc)
{
    void *h = program_sigsys.handler;
    if (h == SIG_IGN)
        return;
    if (h == SIG_DFL) {
        struct ferry_ksigaction dfl = {SIG_DFL, 0, 0, 0};
        ferry_raw4(SYS_rt_sigaction, SIGSYS, &dfl, 0, KSIGSET);
        ferry_raw2(SYS_tkill, ferry_raw0(SYS_gettid), SIGSYS);
        return;  /* delivered, and fatal, as soon as the handler returns */
    }
    if (program_sigsys.flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))h)(sig, si, uc);
    else
        ((void (*)(int))h)(sig);
}

/* rt_sigprocmask caught inside the handler: the mask the thread returns to
 * is the frame's, so that is the one to change. */
static long frame_sigprocmask(ucontext_t *uc, const struct ferry_regs *r)
{
    uint64_t *cur = (uint64_t *)&uc->uc_sigmask;
    uint64_t set = 0;
    if (r->r10 != KSIGSET)
        return -EINVAL;
    if (r->rsi && ferry_safe_read(&set, (void *)r->rsi, KSIGSET) != KSIGSET)
        return -EFAULT;
    uint64_t old = *cur | (FERRY_THR->sigsys_blocked ? SIGSYS_BIT : 0);
    uint64_t next = old;
    if (r->rsi) {
        if (r->rdi == SIG_BLOCK)
            next = old | set;
        else if (r->rdi == SIG_UNBLOCK)
            next = old & ~set;
        else if (r->rdi == SIG_SETMASK)
            next = set;
        else
            return -EINVAL;
    }
    next &= ~((1UL << (SIGKILL - 1)) | (1UL << (SIGSTOP - 1)));
    FERRY_THR->sigsys_blocked = (next & SIGSYS_BIT) != 0;
    *cur = next & ~SIGSYS_BIT;
    if (r->rdx && ferry_safe_write((void *)r->rdx, &old, KSIGSET))
        return -EFAULT;
    return 0;
}

/* sigaltstack caught inside the handler: the program asks about its own
 * stack pointer, the interrupted one, and about the alternate stack it had
 * then, which the kernel saved in the frame and rt_sigreturn installs
 * again.  Run from the handler, it said SS_ONSTACK and refused every
 * change (EPERM) while SIGSYS itself ran on the alternate stack, as it does
 * in a process with Go code, whose threads end by disabling the stack Go
 * gave them (and crash when that fails); nor may the handler change the
 * frame's copy instead: rt_sigreturn installs it only if the handler's own
 * stack pointer is not on the stack in force, and there it is.  So the
 * answer is the frame's (where the caller's stack pointer is: SS_ONSTACK;
 * a change while on the stack: EPERM), and a change is made by the kernel
 * (its checks: EINVAL, ENOMEM) from a stack pointer just below the
 * interrupted one's red zone, where the program's own call would have
 * been, and written into the frame too, which rt_sigreturn then installs
 * again or leaves. */
#define SS_AUTODISARM_ (1U << 31)  /* linux/signal.h; glibc does not define it */
#define SS_FLAG_BITS SS_AUTODISARM_

static long sigaltstack_below(uintptr_t sp, const stack_t *ss)
{
    long ret;
    uintptr_t at = (sp - 128 - 64) & ~15UL;  /* the syscall pushes nothing there */
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "mov %[at], %%rsp\n\t"
                     "syscall\n\t"
                     "mov %%r12, %%rsp"
                     : "=a"(ret)
                     : "a"((long)SYS_sigaltstack), "D"(ss), "S"(0L), [at] "r"(at)
                     : "rcx", "r11", "r12", "memory");
    return ret;
}

static long frame_sigaltstack(ucontext_t *uc, const struct ferry_regs *r)
{
    stack_t cur = uc->uc_stack, want;
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP], lo = (uintptr_t)cur.ss_sp;
    int on = !(cur.ss_flags & SS_AUTODISARM_) && sp > lo && sp - lo <= cur.ss_size;
    if (r->rdi) {
        if (ferry_safe_read(&want, (void *)r->rdi, sizeof(want)) != sizeof(want))
            return -EFAULT;
        if (on)
            return -EPERM;
        long ret = sigaltstack_below(sp, &want);
        if (ret != 0)
            return ret;
        if ((want.ss_flags & ~SS_FLAG_BITS) == SS_DISABLE) {
            want.ss_sp = 0;
            want.ss_size = 0;
        }
        uc->uc_stack = want;
        agg_altstack_set(want.ss_sp, want.ss_flags, want.ss_size);
    }
    if (r->rsi) {
        stack_t old = {cur.ss_sp, (cur.ss_size ? (on ? SS_ONSTACK : 0) : SS_DISABLE) |
                                  (cur.ss_flags & SS_FLAG_BITS), cur.ss_size};
        if (ferry_safe_write((void *)r->rsi, &old, sizeof(old)))
            return -EFAULT;
    }
    return 0;
}

static void caught_call(int sig, siginfo_t *si, void *ucv);

/* A vfork on the caller's own stack (Go's os/exec: clone with CLONE_VM and
 * CLONE_VFORK, no stack for the child) runs here, in the handler, when
 * the handler's frame lies on an alternate stack (SIGSYS's, once a Go
 * module is found), and ends as a rewritten site's vfork does
 * (ferry_post): the parent's selector closed again the moment the child
 * has exec'd or ended, the child's calls served, its exec through the
 * hook.  Let through instead (the program's instruction run again, bare),
 * it left the thread's selector open once the parent was back, until its
 * next call through the shim: the child's calls were bare too, its exec
 * unseen, the program's children never enabled; and under fibers (which
 * such a process does not get yet: shim.c) the selector is the carrier's,
 * every fiber there then made its calls bare, on the carrier, and a futex
 * wait that another fiber of the carrier was to end hung the process
 * (os/exec from four goroutines: every run).
 *
 * The child runs on from this frame, which the parent reads again once
 * the child is gone: what the child calls from here lies below it, and
 * past its rt_sigreturn it runs on the program's stack.  But each of its
 * calls is then a SIGSYS on the alternate stack, whose frame would land
 * on this one: the child's alternate stack becomes the part of this one
 * below the frame (child_altstack), and the frame's uc_stack says so too
 * (sigaltstack_below: what rt_sigreturn may install again); the parent
 * puts uc_stack back.  `*child_top` is where the child's alternate stack
 * ends; returns 0 for every other call. */
__attribute__((noinline))  /* its frame, below the handler's, bounds the child's stack */
static int vfork_here(const siginfo_t *si, const ucontext_t *uc, uintptr_t *child_top)
{
#ifdef FERRY_STATIC
    (void)si, (void)uc, (void)child_top;
    return 0;
#else
    const greg_t *g = uc->uc_mcontext.gregs;
    long nr = g[REG_RAX], flags = g[REG_RDI];
    if (si->si_code != SI_USER_DISPATCH || detached ||
        !(nr == SYS_vfork || (nr == SYS_clone && !g[REG_RSI] &&
                              (flags & (CLONE_VM | CLONE_VFORK)) == (CLONE_VM | CLONE_VFORK))))
        return 0;
    uintptr_t alt = (uintptr_t)uc->uc_stack.ss_sp, end = alt + uc->uc_stack.ss_size,
              here = (uintptr_t)__builtin_frame_address(0), sp = (uintptr_t)g[REG_RSP];
    if (!(here >= alt && here < end) || (sp >= alt && sp <= end))
        return 0;
    *child_top = (here - 256) & ~(uintptr_t)63;
    if (*child_top < alt + CHILD_ALTSTACK_MIN)
        return 0;
    ferry_caught_first();
    ferry_blk_count(nr);
    ferry_tally_one(SYS_rt_sigreturn);
    ferry_clone_pending(nr, nr == SYS_vfork ? CLONE_VM | CLONE_VFORK : (unsigned long)flags);
    return 1;
#endif
}

/* The vfork child's alternate stack becomes [lo, top): it runs in the
 * handler, on that stack, so the change is made from below the program's
 * stack pointer (sigaltstack_below), every signal blocked meanwhile: one
 * taken there would go to the top of the alternate stack, onto the
 * parent's frame.  0 or -errno. */
__attribute__((noinline)) static long child_altstack(uintptr_t lo, uintptr_t top, uintptr_t program_sp)
{
    stack_t ss = {.ss_sp = (void *)lo, .ss_flags = 0, .ss_size = top - lo};
    uint64_t all = ~0ULL, was;
    if (ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &was, KSIGSET))
        return -EINVAL;
    long ret = sigaltstack_below(program_sp, &ss);
    ferry_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &was, 0, KSIGSET);
    return ret;
}

/* The handler leaves through rt_sigreturn (ferry_sigreturn), a call of the
 * shim's own that strace sees after every SIGSYS: tallied as such (before
 * it runs: nothing comes back from it). */
static void on_sigsys(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    uintptr_t child_top = 0;
    if (vfork_here(si, uc, &child_top)) {
        greg_t *g = uc->uc_mcontext.gregs;
        stack_t parents = uc->uc_stack;
        register long r10 __asm__("r10") = g[REG_R10];
        register long r8 __asm__("r8") = g[REG_R8];
        register long r9 __asm__("r9") = g[REG_R9];
        long ret;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "0"(g[REG_RAX]), "D"(g[REG_RDI]), "S"(g[REG_RSI]), "d"(g[REG_RDX]),
                           "r"(r10), "r"(r8), "r"(r9)
                         : "rcx", "r11", "memory");
        int served = 1;
        if (ret == 0) {
            served = child_altstack((uintptr_t)parents.ss_sp, child_top, (uintptr_t)g[REG_RSP]) == 0;
            if (served) {
                uc->uc_stack.ss_size = child_top - (uintptr_t)parents.ss_sp;
                uc->uc_stack.ss_flags = 0;
            }
        } else {
            uc->uc_stack = parents;
        }
        ferry_post(ret);
        if (!served)  /* its calls bare, as a let-through clone's child's */
            ferry_catchall_allow();
        g[REG_RAX] = ret;
        g[REG_RCX] = g[REG_RIP];
        g[REG_R11] = g[REG_EFL];
        return;
    }
    caught_call(sig, si, ucv);
    ferry_tally_one(SYS_rt_sigreturn);
}

/* Go's code runs on goroutine stacks of a few KiB, which nothing may write
 * below: a call it makes itself (its runtime calls the kernel directly)
 * is caught before any plan patches it, and the kernel's signal frame and
 * the shim's C path on that stack overran it into whatever lay below (Go's
 * runtime tests' programs, started by a shell, crashed with "found pointer
 * to free object", "traceback did not unwind completely"; `go tool pprof`
 * with a fault).  Go's own handlers all run on each thread's alternate
 * stack (32 KiB, Go's own): so does SIGSYS once a Go module is found (an
 * exec's hook, the deepest of the C path, moves to a stack of its own in a
 * vfork child: shim.c).  Elsewhere the handler's frame stays on the
 * thread's stack: a program's alternate stack is sized for its own
 * handlers. */
static int small_stacks;

static long install(struct ferry_ksigaction *old)
{
    struct ferry_ksigaction act = {(void *)on_sigsys, SA_SIGINFO | SA_NODEFER | SA_RESTORER,
                                   (void *)ferry_sigreturn, 0};
    if (__atomic_load_n(&small_stacks, __ATOMIC_ACQUIRE))
        act.flags |= SA_ONSTACK;
    return ferry_raw4(SYS_rt_sigaction, SIGSYS, &act, old, KSIGSET);
}

void ferry_catchall_small_stacks(void)
{
    if (__atomic_exchange_n(&small_stacks, 1, __ATOMIC_ACQ_REL))
        return;
    if (ferry_catchall_on && !detached)
        install(0);
}

#ifndef FERRY_STATIC
extern int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
    __attribute__((weak));

static int count_small_stacks(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(int *)data += ferry_module_small_stacks(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr);
    return 0;
}
#endif

/* Go modules loaded when the catch-all started, enabled or not. */
static int go_modules;

int ferry_catchall_go_modules(void)
{
    return go_modules;
}

/* A caught call's C path, once its handler is gone (entry.S). */
long ferry_caught_slow(struct ferry_regs *r)
{
    record_site((uintptr_t)r->site, r->rax);
    r->site = 0;
    return ferry_slow(r);
}

static void caught_call(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    greg_t *g = uc->uc_mcontext.gregs;
    if (si->si_code != SI_USER_DISPATCH) {
        forward(sig, si, ucv);
        return;
    }
    uint64_t next = (uint64_t)g[REG_RIP];
    long nr = g[REG_RAX];
    if (detached) {
        *FERRY_THR->selector_at = SELECTOR_ALLOW;
        g[REG_RIP] = (greg_t)(next - 2);  /* run it again, bare */
        return;
    }
    ferry_caught_first();
    struct ferry_regs r = {.rax = nr, .rdi = g[REG_RDI], .rsi = g[REG_RSI], .rdx = g[REG_RDX],
                           .r10 = g[REG_R10], .r8 = g[REG_R8], .r9 = g[REG_R9]};
    switch (nr) {
    case SYS_rt_sigreturn:
        /* Return from the program's handler: run it from the shim's text
         * with the program's rsp, where its frame is. */
        ferry_blk_count(nr);
        g[REG_RIP] = (greg_t)ferry_sigreturn_syscall;
        return;
    case SYS_clone:
        if (!(r.rdi & CLONE_VM))
            break;
        /* fall through */
    case SYS_clone3:
    case SYS_vfork:
        /* A child on another stack cannot come back through this frame: the
         * program's own instruction runs again, let through once; the parent
         * blocks again on its next slow call, the child when it first comes
         * through the shim. */
        ferry_blk_count(nr);
        FERRY_THR->let_through = 1;
        *FERRY_THR->selector_at = SELECTOR_ALLOW;
        g[REG_RIP] = (greg_t)(next - 2);
        return;
    case SYS_sigaltstack:
        ferry_blk_count(nr);
        g[REG_RAX] = frame_sigaltstack(uc, &r);
        g[REG_RCX] = (greg_t)next;
        g[REG_R11] = g[REG_EFL];
        return;
    case SYS_rt_sigprocmask:
        ferry_blk_count(nr);
        g[REG_RAX] = frame_sigprocmask(uc, &r);
        g[REG_RCX] = (greg_t)next;
        g[REG_R11] = g[REG_EFL];
        return;
    case SYS_exit:
    case SYS_exit_group:
        /* never come back, and may come from a stack already gone (musl's
         * detached thread unmaps its own before its exit): run here */
        record_site(next - 2, nr);
        ferry_slow(&r);
        return;
    }
    /* Every other call runs once the handler is gone (entry.S,
     * CAUGHT_RESUME), from the stack it was made on: SIGSYS's frame on top of
     * a small alternate stack left too little for the C path below it. */
    uint64_t *sp = (uint64_t *)((uintptr_t)g[REG_RSP] - FERRY_RED_ZONE) - 1;
    *sp = next;
    g[REG_RSP] = (greg_t)sp;
    g[REG_R11] = (greg_t)(next - 2);
    g[REG_RIP] = (greg_t)(__atomic_load_n(&small_stacks, __ATOMIC_RELAXED) ? ferry_caught_resume_own_stack
                                                                         : ferry_caught_resume);
}

void ferry_catchall_start(char **envp)
{
    const char *v = ferry_env_lookup(envp, "FERRY_CATCH_ALL");
    if (!v || !ferry_memeq(v, "1", 2))
        return;
#ifndef FERRY_STATIC
    /* the program and the libraries it started with (a Go library a
     * dlopen loads later is found when its plan is looked for: plan.c) */
    int found = 0;  /* counted here: a store into .bss was a page of it written in every start */
    if (dl_iterate_phdr)
        dl_iterate_phdr(count_small_stacks, &found);
    if (found) {
        go_modules = found;
        ferry_small_stacks_found();
    }
#endif
    if (install(&program_sigsys) != 0)
        return;
    ferry_catchall_on = 1;
    ferry_catchall_thread();
    if (!FERRY_THR->armed) {
        /* no dispatch in this kernel: leave SIGSYS as it was */
        ferry_raw4(SYS_rt_sigaction, SIGSYS, &program_sigsys, 0, KSIGSET);
        ferry_catchall_on = 0;
        return;
    }
}
