/* The shim: initialization, enabling rewritten modules, and the slow path.
 *
 * Every call is executed exactly as the program issued it.  Depending on the
 * mode (FERRY_MODE: off, count, trace, aggregate) the shim also counts it,
 * counts and times it, or routes it through the aggregation engine (agg.h).  The calls that cannot run inside a C frame are sent back to the
 * trampoline (FERRY_RAW): a clone that shares memory resumes its child on
 * another stack (or, for vfork, on this very stack while the parent waits),
 * and rt_sigreturn reads the signal frame at the program's rsp.
 *
 * Settings: the FERRY_* variables of settings.h, set by `ferry run` from a
 * profile and passed on to children by the exec hook (exec.c).
 */
#define _GNU_SOURCE
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "catchall.h"
#include "ctl.h"
#include "environ.h"
#include "exec.h"
#include "plan.h"
#include "ferry.h"
#include "raw.h"
#include "sandbox.h"
#include "selfexe.h"
#include "shim.h"
#include "store.h"
#include "trace.h"
#include "util.h"
#include "engine.h"  /* ferry-agg */

#define MAX_MODULES FERRY_MAX_MODULES

unsigned char ferry_action[FERRY_NR_MAX];

/* A module's entry: [mode off, which counts nothing][its code runs on
 * small stacks, so the C path takes the shim's (entry.S)]. */
static const struct ferry_vector vectors[2][2] = {
    {{(void *)ferry_entry, (void *)ferry_post_entry},
     {(void *)ferry_entry_own_stack, (void *)ferry_post_entry}},
    {{(void *)ferry_entry_nocount, (void *)ferry_post_entry},
     {(void *)ferry_entry_own_stack_nocount, (void *)ferry_post_entry}},
};


static struct ferry_ctl *modules[MAX_MODULES];
static int go_enabled;  /* Go modules whose sites call the shim */
static unsigned nmodules;
static int active;
static int mode = FERRY_MODE_COUNT;
/* FERRY_TRACE_SYSCALLS's list, when there is one; without, every call is
 * traced.  Written only for a list: filled at every start, its 512 bytes
 * had pushed the exec hook's kept settings (saved_buf) onto a page of
 * their own, a fault in every process. */
static int traced_all FERRY_HOT;
static unsigned char traced[FERRY_NR_MAX] FERRY_COLD;

/* Whether trace mode times call `nr` (below FERRY_NR_MAX). */
static inline int traced_nr(long nr)
{
    return traced_all || traced[nr];
}

/* Resolved from libc at load time when it is there; the shim links nothing. */
extern int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
    __attribute__((weak));

static const unsigned short special[] = {SYS_rt_sigreturn, SYS_clone, SYS_fork, SYS_vfork, SYS_exit,
                                         SYS_exit_group, SYS_clone3, SYS_execve, SYS_execveat,
                                         SYS_wait4, SYS_seccomp, SYS_prctl};

/* Calls that carry a signal mask, seen by the catch-all (catchall.h). */
static const unsigned short masked[] = {SYS_rt_sigprocmask, SYS_rt_sigaction, SYS_rt_sigsuspend,
                                        SYS_ppoll, SYS_pselect6, SYS_epoll_pwait,
                                        SYS_epoll_pwait2};

struct found {
    struct ferry_ctl *ctl;
    const char *name;
    uint64_t base;
    int own_stack;
};

static int module_known(const struct ferry_ctl *c)
{
    for (unsigned i = 0; i < nmodules; i++)
        if (modules[i] == c)
            return 1;
    return 0;
}

static int collect_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct found *found = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz < sizeof(struct ferry_ctl))
            continue;
        struct ferry_ctl *c = (struct ferry_ctl *)(info->dlpi_addr + ph->p_vaddr);
        if (!ferry_memeq(c->magic, FERRY_CTL_MAGIC, FERRY_CTL_MAGIC_LEN) ||
            c->version != FERRY_CTL_VERSION || module_known(c))
            continue;
        for (int k = 0; k < MAX_MODULES; k++) {
            if (found[k].ctl == c)
                break;
            if (!found[k].ctl) {
                found[k] = (struct found){c, info->dlpi_name, info->dlpi_addr,
                                          ferry_module_small_stacks(info->dlpi_phdr, info->dlpi_phnum,
                                                                    info->dlpi_addr)};
                break;
            }
        }
    }
    return 0;
}

static void describe_module(struct ferry_ctl *c, const char *name, uint64_t base)
{
    struct ferry_proc_header *h = ferry_hdr;
    uint32_t site_base = h ? h->nsites : 0;
    /* Only a number that differs is written: the rewriter numbers a module's
     * sites as the process's first module's, so that the first module's
     * pages of site records stay the file's, clean and shared, instead of
     * a private copy of each in every process.  Nor are they read for it
     * (libc's ~1,700, ~1.5 us of every start), unless this process wrote
     * them before (a module first now that was not at an earlier attach). */
    if (site_base != 0 || c->renumbered) {
        int wrote = 0;
        for (uint32_t i = 0; i < c->nsites; i++) {
            uint64_t global = site_base + i < FERRY_MAX_SITES ? site_base + i + 1 : 0;
            if (c->sites[i].global != global) {
                c->sites[i].global = global;
                wrote = 1;
            }
        }
        if (wrote && !c->renumbered)
            c->renumbered = 1;
    }
    if (!h || h->nmodules >= FERRY_MAX_MODULES)
        return;
    struct ferry_module_entry *m = ferry_module_at(h, h->nmodules);
    const char *src = (name && *name) ? name : h->exe;
    size_t n = ferry_strlen(src);
    if (n >= sizeof(m->name))
        n = sizeof(m->name) - 1;
    ferry_memcpy(m->name, src, n);
    m->name[n] = 0;
    m->nsites = c->nsites;
    m->site_base = site_base;
    m->load_base = base;
    h->nsites = site_base + c->nsites;
    h->nmodules++;
}

void ferry_small_stacks_found(void)
{
    ferry_catchall_small_stacks();
    agg_signal_small_stacks();
}

/* Start intercepting the sites of module `c`: the last step, once the
 * process file knows the module. */
static int enable_module(struct ferry_ctl *c, const char *name, uint64_t base, int own_stack)
{
    if (nmodules >= MAX_MODULES)
        return 0;
    describe_module(c, name, base);
    modules[nmodules++] = c;
    if (own_stack) {
        go_enabled++;
        ferry_small_stacks_found();
    }
    __atomic_store_n(&c->vector, &vectors[mode == FERRY_MODE_OFF][own_stack], __ATOMIC_RELEASE);
    return 1;
}

/* A module patched in memory from its plan: enabled like a rewritten one. */
static void enable_planned(struct ferry_ctl *c, const char *name, uint64_t base, int own_stack)
{
    if (enable_module(c, name, base, own_stack) && ferry_hdr)
        ferry_hdr->load_patched++;
}

int ferry_modules_enable(void)
{
    if (!dl_iterate_phdr)
        return 0;
    struct found found[MAX_MODULES];
    ferry_memset(found, 0, sizeof(found));
    /* Collect first, enable after: dl_iterate_phdr may take a lock whose
     * futex call would otherwise already come through the shim. */
    dl_iterate_phdr(collect_module, found);
    int added = 0;
    for (int k = 0; k < MAX_MODULES && found[k].ctl; k++)
        added += enable_module(found[k].ctl, found[k].name, found[k].base, found[k].own_stack);
    return added;
}


static long parse_number(const char **p)
{
    long v = -1;
    while (**p >= '0' && **p <= '9') {
        v = (v < 0 ? 0 : v * 10) + (**p - '0');
        (*p)++;
    }
    return v;
}

static void configure(char **envp)
{
    const char *m = ferry_env_lookup(envp, "FERRY_MODE");
    if (m && ferry_memeq(m, "off", 4))
        mode = FERRY_MODE_OFF;
    else if (m && ferry_memeq(m, "trace", 6))
        mode = FERRY_MODE_TRACE;
    /* ferry-agg begin: aggregate mode counts as count mode does; fibers'
     * calls are routed (agg_config.c); a bad FERRY_AGG falls back to count */
    else if (m && ferry_memeq(m, "aggregate", 10))
        mode = ferry_agg_configure(envp) == 0 ? FERRY_MODE_AGGREGATE : FERRY_MODE_COUNT;
    /* ferry-agg end */
    const char *list = ferry_env_lookup(envp, "FERRY_TRACE_SYSCALLS");
    traced_all = list == 0;
    for (const char *p = list; p && *p;) {
        long nr = parse_number(&p);
        if (nr >= 0 && nr < FERRY_NR_MAX)
            traced[nr] = 1;
        if (*p)
            p++;
    }
    for (unsigned i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        ferry_action[special[i]] = 1;
    if (mode == FERRY_MODE_TRACE)
        for (int i = 0; i < FERRY_NR_MAX; i++)
            ferry_action[i] |= traced_nr(i);
}

/* Modules loaded later (dlopen) are enabled as they appear: ld.so calls
 * _dl_debug_state, a bare `ret` for debuggers, whenever its list of modules
 * changes, before the new modules' constructors run.  Its first bytes become
 * a jump to ferry_dl_hook.  Done only when they are `ret` followed by
 * padding, so that nothing else is overwritten. */
extern struct r_debug _r_debug __attribute__((weak));

/* Whether ld.so's _dl_debug_state can jump to ferry_dl_hook: 1 when it
 * is a bare `ret` and padding that the jump may replace, 2 when it jumps
 * there already; `jmp` gets the jump's bytes. */
static int dl_hook_room(unsigned char jmp[5])
{
    if (!&_r_debug || !_r_debug.r_brk)
        return 0;
    unsigned char *p = (unsigned char *)_r_debug.r_brk;
    long rel = (long)((unsigned char *)ferry_dl_hook - (p + 5));
    if (rel != (int)rel)
        return 0;
    jmp[0] = 0xe9;
    int32_t rel32 = (int32_t)rel;
    ferry_memcpy(jmp + 1, &rel32, 4);
    if (ferry_memeq(p, jmp, 5))
        return 2;
    if (p[0] != 0xc3 || ((unsigned long)p & 15) != 0)
        return 0;
    for (int i = 1; i < 5; i++)
        if (p[i] != 0x66 && p[i] != 0x90 && p[i] != 0x2e && p[i] != 0x0f)
            return 0;
    return 1;
}

/* 1 when ld.so's _dl_debug_state jumps to ferry_dl_hook (now, or already:
 * a plan that maps ld.so's patched copy over its text takes the jump away,
 * and this puts it back). */
static int hook_dl_changes(void)
{
    unsigned char jmp[5];
    int room = dl_hook_room(jmp);
    if (room != 1)
        return room == 2;
    /* The five bytes in one aligned store: a thread running ld.so's code, or
     * a child forked meanwhile, finds the `ret` or the whole jump. */
    uint64_t *at = (uint64_t *)_r_debug.r_brk, word = *at;
    ferry_memcpy(&word, jmp, sizeof(jmp));
    unsigned long page = (unsigned long)at & ~4095UL;
    if (ferry_raw3(SYS_mprotect, page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC))
        return 0;
    __atomic_store_n(at, word, __ATOMIC_RELEASE);
    ferry_raw3(SYS_mprotect, page, 4096, PROT_READ | PROT_EXEC);
    return 1;
}

/* The jump itself is written when the catch-all first catches a call.
 * Writing it costs two mprotect, a private copy of ld.so's page and a split
 * of its mapping, ~14 us, in every process; yet ld.so announces a new
 * module only after it searched for, opened and mapped the file, calls from
 * its own text that the catch-all catches while its plan waits.  A process
 * that loads nothing more never pays for the jump.  HOOK_PENDING: to be
 * written; a thread: it writes the jump (another thread's caught call, which
 * may be ld.so's about to announce, waits for it); 0: written, or never. */
#define HOOK_PENDING ((struct ferry_thread *)1)
static struct ferry_thread *dl_hook_state FERRY_HOT;

void ferry_caught_first(void)
{
    struct ferry_thread *want = HOOK_PENDING, *self;
    if (!__atomic_load_n(&dl_hook_state, __ATOMIC_ACQUIRE))
        return;
    self = FERRY_THR;
    if (__atomic_compare_exchange_n(&dl_hook_state, &want, self, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        hook_dl_changes();
        __atomic_store_n(&dl_hook_state, (struct ferry_thread *)0, __ATOMIC_RELEASE);
        return;
    }
    /* Not when this thread is the writer, caught again from a signal
     * handler that interrupted it (a fork child whose parent had another
     * thread write finds the state put back to pending: after_fork). */
    for (unsigned spins = 1; want != HOOK_PENDING && want && want != self; spins++) {
        if (spins % 1024 == 0)
            ferry_raw0(SYS_sched_yield);
        __builtin_ia32_pause();
        want = __atomic_load_n(&dl_hook_state, __ATOMIC_ACQUIRE);
    }
}

/* Whether ld.so's calls reach the catch-all: not when ld.so is a rewritten
 * file (its sites jump to the shim like any enabled module's). */
static int holds_ld_with_ctl(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (!ferry_module_holds_code(info, (uint64_t)_r_debug.r_brk))
        return 0;
    *(int *)data = ferry_module_has_ctl(info);
    return 1;
}

static int ld_calls_caught(void)
{
    int enabled = 1;
    if (dl_iterate_phdr)
        dl_iterate_phdr(holds_ld_with_ctl, &enabled);
    return !enabled;
}

/* ld.so's own plan waits for the first change of the module list (a
 * dlopen, an NSS or iconv module): ld.so makes no call of its own before
 * one, and a process that loads nothing more is spared mapping its patched
 * copy, ~35 us of every start.  Until then its calls (the first load's
 * search for its file, before ld.so says it adds it) reach the catch-all,
 * which counts them as the plan would; so only with the catch-all on, or
 * in mode off, which counts nothing (those calls are opens, reads and maps,
 * none that the shim must see to keep the program's behaviour), and never
 * under attach, whose threads are stopped only while it starts. */
static int ld_plan_deferred;

static void apply_ld_plan(void)
{
    ld_plan_deferred = 0;
    ferry_plans_defer(0);
    ferry_plans_apply(ferry_cache_root(), enable_planned);
    hook_dl_changes();
}

void ferry_on_dl_change(void)
{
    if (!active)
        return;
    if (ld_plan_deferred)
        apply_ld_plan();  /* under ld.so's load lock: no other thread runs its calls */
    if (&_r_debug && _r_debug.r_state == RT_CONSISTENT) {
        ferry_modules_enable();
        ferry_plans_apply(ferry_cache_root(), enable_planned);
    }
}

/* `ferry attach` loads the shim into a running process whose environment it
 * cannot change: it leaves the settings in /tmp/ferry-attach.<pid>, one
 * VAR=value per line, which count only if written by this process's user
 * and by nobody else. */
static char attach_buf[8192] FERRY_COLD;
static char *attach_env[64] FERRY_COLD;

static char **attach_settings(void)
{
    char path[64];
    struct ferry_buf b = {path, 0, sizeof(path), 0};
    ferry_buf_str(&b, "/tmp/ferry-attach.");
    ferry_buf_i64(&b, ferry_raw0(SYS_getpid));
    path[b.len] = 0;
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0)
        return 0;
    struct stat st;
    long n = -1;
    if (ferry_raw2(SYS_fstat, fd, &st) == 0 && st.st_uid == (uid_t)ferry_raw0(SYS_getuid) &&
        !(st.st_mode & 022))
        n = ferry_raw3(SYS_read, fd, attach_buf, sizeof(attach_buf) - 1);
    ferry_raw1(SYS_close, fd);
    if (n <= 0)
        return 0;
    attach_buf[n] = 0;
    int k = 0;
    for (char *p = attach_buf; *p && k < 63;) {
        attach_env[k++] = p;
        while (*p && *p != '\n')
            p++;
        if (*p)
            *p++ = 0;
    }
    attach_env[k] = 0;
    return attach_env;
}

/* `ferry detach`: every module goes back to running its calls bare; the
 * process file says the process was detached. */
__attribute__((visibility("default"))) int ferry_detach(void)
{
    for (unsigned i = 0; i < nmodules; i++)
        __atomic_store_n(&modules[i]->vector, (const struct ferry_vector *)0, __ATOMIC_RELEASE);
    ferry_catchall_detach();
    ferry_store_detached();
    return 0;
}

void ferry_start(int argc, char **argv, char **envp)
{
    (void)argc;
    uint64_t t_ctor = ferry_rdtsc();
    char **own_env = envp;
    if (!ferry_env_lookup(envp, "FERRY_MODE")) {
        char **attached = attach_settings();
        if (attached)
            envp = attached;
    }
    configure(envp);
    const char *events = ferry_env_lookup(envp, "FERRY_EVENTS");
    long cap = events ? parse_number(&events) : 0;
    if (cap < 0 || cap > (1L << 24))
        cap = 0;
    const char *rate = ferry_env_lookup(envp, "FERRY_TSC");
    ferry_exec_configure(envp);  /* first: the cache root keeps this boot's TSC rate */
    ferry_store_open(ferry_env_lookup(envp, "FERRY_RUN_DIR"), mode, (uint32_t)cap, argv, rate,
                     ferry_env_lookup(envp, "FERRY_EXE"), ferry_env_lookup(envp, "FERRY_SLOT"));
    ferry_store_span(FERRY_SPAN_CTOR, t_ctor);
    /* after the store read AT_EXECFN for the record (the image's name, which
     * the reader knows); selfexe.c's text is not touched by other starts */
    const char *self = own_env == envp ? ferry_env_lookup(envp, "FERRY_SELF") : 0;
    if (self)
        ferry_self_configure(own_env, self);
    char rate_entry[64];
    if (!rate && ferry_store_rate(rate_entry, sizeof(rate_entry)) == 0)
        ferry_exec_keep(rate_entry);
    ferry_modules_enable();
    ferry_store_span(FERRY_SPAN_MODULES, ferry_rdtsc());
    ferry_plans_avoid(ferry_env_lookup(envp, "FERRY_AVOID"));
    const char *catch_all = ferry_env_lookup(envp, "FERRY_CATCH_ALL");
    int catching = catch_all && ferry_memeq(catch_all, "1", 2);
    unsigned char jmp[5];
    ld_plan_deferred = own_env == envp && (catching || mode == FERRY_MODE_OFF) &&
                       dl_hook_room(jmp) && ld_calls_caught();
    if (ld_plan_deferred)
        ferry_plans_defer(_r_debug.r_brk);
    ferry_plans_apply(ferry_cache_root(), enable_planned);
    ferry_store_span(FERRY_SPAN_PLANS, ferry_rdtsc());
    if (ld_plan_deferred && catching)
        dl_hook_state = HOOK_PENDING;
    else
        hook_dl_changes();  /* no caught call will write it */
    ferry_catchall_start(envp);
    if (ld_plan_deferred && catching && !ferry_catchall_on) {
        dl_hook_state = 0;
        apply_ld_plan();  /* no catch-all after all: nothing would count ld.so's calls */
    }
    ferry_store_span(FERRY_SPAN_CATCHALL, ferry_rdtsc());
    if (ferry_catchall_on)
        for (unsigned i = 0; i < sizeof(masked) / sizeof(masked[0]); i++)
            ferry_action[masked[i]] = 1;
    /* Go code whose own calls are caught (its module neither rewritten nor
     * patched from a plan: a Go program a shell starts before a run made
     * its image) keeps its threads under fibers, calls counted as under
     * the aggregate profile; the next run, with its image, has fibers.  Two
     * of the reasons are gone (a caught call's C path now runs after the
     * handler, and a vfork from the handler: catchall.c), but such a
     * program still hangs under fibers now and then (go_calls `calls`
     * under the test suite's load: 6 of 450 runs): a fiber of Go's
     * scheduler spins on a lock with every signal blocked, the engine's
     * own among them, so its carrier's tick cannot preempt it and the
     * fiber holding the lock never runs again.  That is the engine's
     * (any thread that blocks every signal and spins on another of its
     * carrier's: docs/aggregate.md), not Go's or the catch-all's. */
    if (agg_threads_on && ferry_catchall_on && ferry_catchall_go_modules() > go_enabled)
        agg_threads_on = 0;
    /* Under a filter older than the shim (sandbox.h) the engine may run the
     * program's calls only on its own threads, which the kernel filters:
     * fibers on them, with every blocking call a carrier's or a worker's,
     * hung in ways threads do not (200 threads in pipe ping-pong, 8
     * workers).  Its threads stay threads, calls counted. */
    if (agg_threads_on && ferry_sandbox_inherited)
        agg_threads_on = 0;
    if (mode == FERRY_MODE_AGGREGATE && agg_threads_on) {
        /* threads = fibers: from here on this thread is fiber 0 */
        agg_threads_watch();
        if (agg_threads_start() != 0)
            agg_threads_on = 0;
    }
    /* Last: everything above has read its settings (and exec.c kept copies). */
    ferry_environ_restore(own_env);
    active = 1;
    ferry_store_span(FERRY_SPAN_READY, ferry_rdtsc());
}

#ifndef FERRY_STATIC
/* ld.so runs it, once the program's libraries are loaded; a static program's
 * start stub calls ferry_start itself (static_init.c). */
__attribute__((constructor)) static void ferry_init(int argc, char **argv, char **envp)
{
    ferry_start(argc, argv, envp);
}
#endif

static long do_syscall(const struct ferry_regs *r)
{
    return ferry_pass6(r->rax, r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9);
}

static unsigned long clone3_flags(const struct ferry_regs *r)
{
    unsigned long flags = 0;
    if ((unsigned long)r->rsi < sizeof(flags))
        return 0;
    return ferry_safe_read(&flags, (void *)r->rdi, sizeof(flags)) == sizeof(flags) ? flags : 0;
}

void ferry_clone_pending(long nr, unsigned long flags)
{
    FERRY_THR->pending_nr = nr;
    FERRY_THR->pending_flags = flags;
    ferry_catchall_allow();
    if (flags & CLONE_VFORK)
        ferry_blk_spare_prepare();
}

static long hand_to_trampoline(long nr, unsigned long flags)
{
    ferry_clone_pending(nr, flags);
    return FERRY_RAW;
}

/* A fork child (a clone without CLONE_VM): what it cannot share with its
 * parent starts over, whichever way the fork went. */
static void after_fork(void)
{
    /* a thread of the parent was writing ld.so's jump: it is not here to
     * finish, and the next caught call finds the jump whole or writes it */
    struct ferry_thread *hook = __atomic_load_n(&dl_hook_state, __ATOMIC_ACQUIRE);
    if (hook && hook != HOOK_PENDING)
        dl_hook_state = HOOK_PENDING;
    ferry_store_after_fork();
    agg_fd_guard_after_fork();
    agg_threads_after_fork();
    ferry_catchall_fork_child();
}

void ferry_post(long result)
{
    long nr = FERRY_THR->pending_nr;
    unsigned long flags = FERRY_THR->pending_flags;
    if (nr == SYS_sigaltstack) {
        ferry_catchall_block();
        FERRY_THR->pending_nr = 0;
        agg_altstack_changed(result);
        return;
    }
    if (!nr) {
        /* a new thread, with TLS of its own */
        if (result == 0)
            ferry_catchall_thread();
        return;
    }
    if (result == 0) {
        if (!(flags & CLONE_VM)) {
            after_fork();
            FERRY_THR->pending_nr = 0;
        } else {
            if (flags & CLONE_VFORK) {
                ferry_blk_enter_vfork_child(flags);
                agg_vfork_child();
            }
            ferry_catchall_thread();
        }
        return;
    }
    ferry_catchall_block();
    if (flags & CLONE_VFORK) {
        /* the vfork child ran on this thread's shim stack and exec'd or
         * exited from within the C path, which it never left */
        FERRY_THR->depth = 0;
        if (result > 0)
            ferry_store_vfork_returned((int)result);
        ferry_blk_leave_vfork_child();
        agg_vfork_parent();
    }
    FERRY_THR->pending_nr = 0;
}

static uint32_t site_of(const struct ferry_regs *r)
{
    const struct ferry_site_rec *rec = r->site;
    return rec ? (uint32_t)rec->global : 0;
}

static long slow_call(struct ferry_regs *r);

/* Whether [p, p + n) lies on the page of the program's stack the call `r`
 * was made from, `from` bytes or more above the entry's frame: from there
 * up to the end of the page holding the program's rsp - 1, which the entry
 * just wrote (mapped and writable).  The catch-all's calls carry no frame:
 * their stack is the signal's. */
static int on_call_page(const struct ferry_regs *r, const void *p, size_t n, uintptr_t from)
{
    if (!r->frame)
        return 0;
    uintptr_t frame = (uintptr_t)r->frame, a = (uintptr_t)p;
    uintptr_t hi = ((frame + FERRY_FRAME_TO_RSP - 1) | 4095) + 1;
    return a >= frame + from && a < hi && n <= hi - a;
}

long ferry_read_arg(const struct ferry_regs *r, void *dst, const void *src, size_t n)
{
    if (on_call_page(r, src, n, 0)) {
        ferry_memcpy(dst, src, n);
        return (long)n;
    }
    return agg_safe_read(dst, src, n);
}

/* An answer written into the program's memory: directly when it lies where
 * ferry_read_arg reads directly, above the entry's own words (the red zone
 * up to the end of the page holding the program's rsp - 1, which the entry
 * just wrote: mapped and writable), where libc keeps what a call answers
 * into (a posix_spawn child asks SIGSYS's action into its stack: a
 * process_vm_writev, ~1.6 us, in every spawn); elsewhere through the
 * kernel, so that a bad pointer is EFAULT.  0, or -EFAULT. */
long ferry_write_arg(const struct ferry_regs *r, void *dst, const void *src, size_t n)
{
    if (on_call_page(r, dst, n, FERRY_FRAME_TO_RSP - FERRY_RED_ZONE)) {
        ferry_memcpy(dst, src, n);
        return 0;
    }
    return ferry_safe_write(dst, src, n);
}

/* With the program's threads as fibers, signals sent to a fiber are raised
 * here, once the shim is done with the call: a handler that never returns
 * (pthread_cancel's unwinding, siglongjmp) leaves nothing of the shim's
 * half done.  A call they interrupted runs again if every handler said
 * SA_RESTART, as the kernel would have restarted it. */
long ferry_slow(struct ferry_regs *r)
{
    if (!agg_threads_on)
        return slow_call(r);
    struct ferry_regs call = *r;
    for (;;) {
        long ret = slow_call(r);
        FERRY_THR->restarted = 0;
        if (ret != FERRY_DONE || !agg_threads_deliver(call.rax, r->rax))
            return ret;
        *r = call;
        FERRY_THR->restarted = 1;  /* the same call still: counted once, as the kernel's restart */
    }
}

/* A child's end, as its parent learns it: the run's record of the child
 * (how it ended, when it never recorded it itself) comes from here. */
static void note_wait(long nr, const struct ferry_regs *r)
{
    if (nr == SYS_wait4 && r->rax > 0 && r->rsi)
        ferry_store_wait((int)r->rax, *(const int *)r->rsi);
}

/* Which calls get their errors and times recorded: in trace mode the traced
 * ones; in aggregate mode every call that comes this way, the engine's above
 * all (the others of its syscall numbers with them, so that a syscall's
 * errors are all of them, as the trace mode's). */
static int recorded(long nr)
{
    if ((unsigned long)nr >= FERRY_NR_MAX)
        return 0;
    return mode == FERRY_MODE_AGGREGATE || (mode == FERRY_MODE_TRACE && traced_nr(nr));
}

static void record(const struct ferry_regs *r, long nr, uint64_t t0, uint64_t t1)
{
    ferry_trace_record(FERRY_THR->blk, nr, r->rax, t0, t1 ? t1 : ferry_rdtsc(), site_of(r));
}

/* A fiber's open that found no such file may have named another thread's
 * name file by its vtid (agg_names.c). */
static inline void name_file_after(long nr, struct ferry_regs *r)
{
    if (agg_self && (nr == SYS_openat || nr == SYS_open) && (long)r->rax == -ENOENT)
        agg_name_file_open(nr, r);
}

static long slow_call(struct ferry_regs *r)
{
    long nr = r->rax;
    if (mode != FERRY_MODE_OFF && !FERRY_THR->restarted)
        ferry_blk_count(nr);
    if (ferry_catchall_on)
        ferry_catchall_check();
    int timed = recorded(nr);
    if (agg_threads_on) {
        uint64_t t0 = timed ? ferry_rdtsc() : 0;
        if (agg_signal_call(r) || ferry_agg_thread_call(r)) {
            if (timed)
                record(r, nr, t0, 0);
            return FERRY_DONE;
        }
    }
    if (ferry_self_on && (nr == SYS_readlink || nr == SYS_readlinkat)) {
        int at = nr == SYS_readlinkat;
        uint64_t t0 = timed ? ferry_rdtsc() : 0;
        r->rax = do_syscall(r);
        ferry_self_readlink((char *)(at ? r->rdx : r->rsi), at ? r->r10 : r->rdx, &r->rax);
        if (timed)
            record(r, nr, t0, 0);
        return FERRY_DONE;
    }
    switch (nr) {
    case SYS_rt_sigreturn:
        return FERRY_RAW;  /* not reached from a trampoline: entry.S runs it */
    case SYS_vfork:
        return hand_to_trampoline(nr, CLONE_VM | CLONE_VFORK);
    case SYS_clone3:
        return hand_to_trampoline(nr, clone3_flags(r));
    case SYS_clone:
        /* Without CLONE_VM the child has its own copy of this stack frame and
         * can return through it; with it, the child runs on another stack. */
        if (r->rdi & CLONE_VM)
            return hand_to_trampoline(nr, (unsigned long)r->rdi);
        /* fall through */
    case SYS_fork:  /* musl's fork: its child must start a record of its own too */
        ferry_store_before_fork();
        r->rax = do_syscall(r);
        if (r->rax == 0)
            after_fork();
        else
            ferry_store_fork_returned();
        return FERRY_DONE;
    case SYS_sigaltstack:
        if (r->frame && agg_thread_fiber())
            return hand_to_trampoline(nr, 0);
        break;
    case SYS_exit:
        ferry_blk_retire();
        break;
    case SYS_exit_group:
        agg_exit_cancel();
        agg_exit_flush();
        ferry_store_exit((int)r->rdi);
        break;
    case SYS_execve:
    case SYS_execveat:
        agg_signal_before_exec();
        void *stack;
        /* returns only if the exec failed */
        if ((stack = ferry_vfork_stack()))
            r->rax = ferry_call_on_stack(ferry_exec, r, stack);
        else
            r->rax = ferry_exec(r);
        ferry_store_exec_failed();
        agg_signal_exec_failed();
        return FERRY_DONE;
    }
    /* ferry-agg begin: the engine's descriptors stay its own */
    if (agg_fd_guard(r)) {
        if (timed)
            record(r, nr, ferry_rdtsc(), 0);
        return FERRY_DONE;
    }
    /* a fiber's call goes to the aggregation engine; its
     * time runs from here to when the engine saw it complete */
    if (agg_self) {
        uint64_t t0 = timed ? ferry_rdtsc() : 0, done = 0;
        if (ferry_agg_route_timed(r, &done)) {
            if (timed && !agg_threads_will_restart(nr, r->rax))
                record(r, nr, t0, done);
            note_wait(nr, r);
            name_file_after(nr, r);
            return FERRY_DONE;
        }
    }
    /* ferry-agg end */
    void *filter = nr == SYS_seccomp || nr == SYS_prctl ? ferry_sandbox_before(r) : 0;
    uint64_t t0 = timed ? ferry_rdtsc() : 0;
    if (!(ferry_catchall_on && ferry_catchall_masked_call(r)))
        r->rax = do_syscall(r);
    if (timed)
        record(r, nr, t0, 0);
    note_wait(nr, r);
    name_file_after(nr, r);
    if ((r->rax == 0 || nr == SYS_setfsuid || nr == SYS_setfsgid) && agg_creds_call(nr))
        agg_creds_changed();
    ferry_sandbox_after(filter, nr, (unsigned long)r->rsi, r->rax);
    return FERRY_DONE;
}

__attribute__((visibility("default"))) int ferry_counts_snapshot(struct ferry_counts *out)
{
    if (!out)
        return -22;
    ferry_blk_sum(out->calls, &out->invalid);
    out->modules = nmodules;
    return 0;
}

__attribute__((visibility("default"))) int ferry_is_active(void)
{
    return active;
}

__attribute__((visibility("default"))) int ferry_is_aggregating(void)
{
    return active && mode == FERRY_MODE_AGGREGATE;
}
