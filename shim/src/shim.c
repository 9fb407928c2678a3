/* The shim: initialization, enabling rewritten modules, and the slow path.
 *
 * Pass-through: every call is executed exactly as the program issued it; the
 * shim only counts.  The calls that cannot run inside a C frame are sent back
 * to the trampoline (FERRY_RAW): a clone that shares memory resumes its child
 * on another stack (or, for vfork, on this very stack while the parent waits),
 * and rt_sigreturn reads the signal frame at the program's rsp.
 */
#define _GNU_SOURCE
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "counts.h"
#include "ctl.h"
#include "ferry.h"
#include "raw.h"
#include "shim.h"
#include "util.h"

#define MAX_MODULES 512
#define ENV_STATS "FERRY_STATS="

unsigned char ferry_action[FERRY_NR_MAX] = {
    [SYS_rt_sigreturn] = 1, [SYS_clone] = 1, [SYS_vfork] = 1,      [SYS_exit] = 1,
    [SYS_exit_group] = 1,   [SYS_clone3] = 1,
};

static const struct ferry_vector vector = {.entry = (void *)ferry_entry,
                                           .post = (void *)ferry_post_entry};

/* The clone-like call this thread handed to its trampoline, for ferry_post.
 * A vfork child shares these with its parent: the parent clears them. */
static __thread long pending_nr __attribute__((tls_model("initial-exec")));
static __thread unsigned long pending_flags __attribute__((tls_model("initial-exec")));

static struct ferry_ctl *modules[MAX_MODULES];
static unsigned nmodules;
static int active;
static char stats_path[4096];

/* Resolved from libc at load time when it is there; the shim links nothing. */
extern int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
    __attribute__((weak));

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
    (void)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz < sizeof(struct ferry_ctl))
            continue;
        struct ferry_ctl *c = (struct ferry_ctl *)(info->dlpi_addr + ph->p_vaddr);
        if (!ferry_memeq(c->magic, FERRY_CTL_MAGIC, FERRY_CTL_MAGIC_LEN) ||
            c->version != FERRY_CTL_VERSION || module_known(c))
            continue;
        if (nmodules < MAX_MODULES)
            modules[nmodules++] = c;
    }
    return 0;
}

int ferry_modules_enable(void)
{
    if (!dl_iterate_phdr)
        return 0;
    unsigned before = nmodules;
    /* Collect first, enable after: dl_iterate_phdr may take a lock whose
     * futex call would otherwise already come through the shim. */
    dl_iterate_phdr(collect_module, 0);
    for (unsigned i = before; i < nmodules; i++)
        __atomic_store_n(&modules[i]->vector, &vector, __ATOMIC_RELEASE);
    return (int)(nmodules - before);
}

static const char *env_lookup(char **envp, const char *key)
{
    size_t n = ferry_strlen(key);
    for (char **e = envp; e && *e; e++)
        if (ferry_memeq(*e, key, n))
            return *e + n;
    return 0;
}

__attribute__((constructor)) static void ferry_init(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)argv;
    const char *p = env_lookup(envp, ENV_STATS);
    if (p) {
        size_t n = ferry_strlen(p);
        if (n < sizeof(stats_path))
            ferry_memcpy(stats_path, p, n + 1);
    }
    ferry_modules_enable();
    active = 1;
}

static long do_syscall(const struct ferry_regs *r)
{
    return ferry_raw6(r->rax, r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9);
}

/* clone3's flags, read the way the kernel reads them: a bad pointer is the
 * kernel's EFAULT to report, not a crash in the shim. */
static unsigned long clone3_flags(const struct ferry_regs *r)
{
    unsigned long flags = 0;
    if ((unsigned long)r->rsi < sizeof(flags))
        return 0;
    struct iovec local = {&flags, sizeof(flags)}, remote = {(void *)r->rdi, sizeof(flags)};
    long n = ferry_raw6(SYS_process_vm_readv, ferry_raw0(SYS_getpid), (long)&local, 1, (long)&remote, 1, 0);
    return n == sizeof(flags) ? flags : 0;
}

static long hand_to_trampoline(long nr, unsigned long flags)
{
    pending_nr = nr;
    pending_flags = flags;
    if (flags & CLONE_VFORK)
        ferry_blk_spare_prepare();
    return FERRY_RAW;
}

void ferry_post(long result)
{
    long nr = pending_nr;
    unsigned long flags = pending_flags;
    if (!nr)
        return;  /* a new thread with its own TLS, or rt_sigreturn's path */
    if (result == 0) {
        if (!(flags & CLONE_VM)) {
            ferry_blk_reset_after_fork();
            pending_nr = 0;
        } else if (flags & CLONE_VFORK) {
            ferry_blk_enter_vfork_child();
        }
        return;
    }
    if (flags & CLONE_VFORK)
        ferry_blk_leave_vfork_child();
    pending_nr = 0;
}

long ferry_slow(struct ferry_regs *r)
{
    long nr = r->rax;
    ferry_blk_count(nr);
    switch (nr) {
    case SYS_rt_sigreturn:
        return FERRY_RAW;
    case SYS_vfork:
        return hand_to_trampoline(nr, CLONE_VM | CLONE_VFORK);
    case SYS_clone3:
        return hand_to_trampoline(nr, clone3_flags(r));
    case SYS_clone:
        /* Without CLONE_VM the child has its own copy of this stack frame and
         * can return through it; with it, the child runs on another stack. */
        if (r->rdi & CLONE_VM)
            return hand_to_trampoline(nr, (unsigned long)r->rdi);
        r->rax = do_syscall(r);
        if (r->rax == 0)
            ferry_blk_reset_after_fork();
        return FERRY_DONE;
    case SYS_exit:
        ferry_blk_retire();
        break;
    case SYS_exit_group:
        if (stats_path[0])
            ferry_stats_write(stats_path);
        break;
    }
    r->rax = do_syscall(r);
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
