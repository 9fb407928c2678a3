/* Per-thread blocks of the static build, reached through the %gs base.
 *
 * Each thread gets a mapping of its own: its struct ferry_thread at the
 * bottom, the shim's stack for that thread above it.  The main thread's is
 * made at start; a clone child inherits its parent's %gs base and gets its
 * own in ferry_static_post, before anything per-thread is touched.  A fork
 * child keeps its copy of the parent's; a vfork child shares its parent's,
 * as a dynamic program's vfork child shares its TLS.  A block whose thread
 * is gone (tgkill says so) is taken again by the next new thread.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "raw.h"
#include "shim.h"
#include "static.h"
#include "thread.h"
#include "util.h"

#define ARCH_SET_GS 0x1001
#define BLOCK_SIZE (128 * 1024)  /* the exec hook's C path needs ~40 KiB */
#define ESRCH 3

static struct ferry_thread *blocks;
/* For a thread that could not get a block (no memory): its C path stays on
 * its own stack, as a dynamic program's does: the depth never comes back
 * to 0 (its updates from several threads may be lost, but not 2^62 of them) */
static struct ferry_thread orphan = {.self = &orphan, .depth = 1UL << 62};

static void own(struct ferry_thread *t, int pid, int tid)
{
    struct ferry_thread *next = t->next;
    char *top = t->stack_top;
    ferry_memset(t, 0, sizeof(*t));
    t->self = t;
    t->next = next;
    t->stack_top = top;
    t->pid = pid;
    t->tid = tid;
}

static struct ferry_thread *reuse(int pid, int tid)
{
    for (struct ferry_thread *t = __atomic_load_n(&blocks, __ATOMIC_ACQUIRE); t; t = t->next) {
        int32_t old = __atomic_load_n(&t->tid, __ATOMIC_RELAXED);
        if (t->pid != pid || ferry_raw3(SYS_tgkill, pid, old, 0) != -ESRCH)
            continue;
        if (__atomic_compare_exchange_n(&t->tid, &old, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            own(t, pid, tid);
            return t;
        }
    }
    return 0;
}

static struct ferry_thread *block_for(int pid, int tid)
{
    struct ferry_thread *t = reuse(pid, tid);
    if (t)
        return t;
    long p = ferry_raw6(SYS_mmap, 0, BLOCK_SIZE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((unsigned long)p > -4096UL)
        return 0;
    t = (struct ferry_thread *)p;
    t->stack_top = (char *)p + BLOCK_SIZE;
    own(t, pid, tid);
    struct ferry_thread *head = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
    do
        t->next = head;
    while (!__atomic_compare_exchange_n(&blocks, &head, t, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    return t;
}

static int install(int pid, int tid)
{
    struct ferry_thread *t = block_for(pid, tid);
    return (int)ferry_raw2(SYS_arch_prctl, ARCH_SET_GS, t ? t : &orphan);
}

/* Every thread's block has its stack from the start. */
void ferry_thread_stack_make(void) {}

int ferry_static_thread_main(void)
{
    return install((int)ferry_raw0(SYS_getpid), (int)ferry_raw0(SYS_gettid));
}

/* Whether this clone child (result 0) runs on a block that is not its own:
 * a new thread of the same process, or a child that shares memory with its
 * parent without being a vfork child (whose parent waits). */
static int needs_block(struct ferry_thread *t, int pid, int tid)
{
    if (pid == t->pid)
        return tid != t->tid;
    unsigned long flags = t->pending_flags;
    return t->pending_nr && (flags & CLONE_VM) && !(flags & CLONE_VFORK);
}

void ferry_static_post(long result)
{
    struct ferry_thread *t = FERRY_THR;
    if (result == 0) {
        int pid = (int)ferry_raw0(SYS_getpid), tid = (int)ferry_raw0(SYS_gettid);
        if (needs_block(t, pid, tid)) {
            if (install(pid, tid) != 0)
                return;  /* its calls count in its parent's block; nothing else to do */
        } else if (!(t->pending_flags & CLONE_VM) && pid != t->pid) {
            t->pid = pid;  /* a fork child: its copy is its own */
            t->tid = tid;
        }
    }
    ferry_post(result);
}
