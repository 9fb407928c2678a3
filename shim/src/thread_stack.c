/* The shim's own stack for a thread of a dynamic program, for the calls of
 * modules whose code runs on small stacks (entry.S's SLOW_ENTRY): made the
 * first time such a call comes, kept for the thread's life.
 *
 * Each stack is a mapping with its head at the bottom; the heads form one
 * list, and a stack whose thread is gone is taken again by the next thread
 * that needs one.  A kernel thread's stack is free once its tid is (tgkill
 * says ESRCH: it no longer runs, on that stack or any other).  A fiber
 * (agg_threads.c) has no tid of the kernel's: the engine gives its stack
 * back once the fiber is off it, as it frees the fiber.  Stacks made in
 * another process (before a fork, or by a vfork child) are never taken
 * again: their owners' tids mean nothing here.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>

#include "engine.h"
#include "raw.h"
#include "shim.h"
#include "thread.h"

#define STACK_SIZE (128 * 1024)  /* the exec hook's C path needs ~40 KiB */
#define HELD_BY_FIBER (-1)
#define ESRCH_ 3

struct stack_head {
    struct stack_head *next;
    int pid;
    int owner;   /* the thread's tid, HELD_BY_FIBER, or 0: free */
};

static struct stack_head *stacks;

static int take(struct stack_head *h, int pid, int owner)
{
    int old = __atomic_load_n(&h->owner, __ATOMIC_ACQUIRE);
    if (h->pid != pid || old == HELD_BY_FIBER)
        return 0;
    if (old != 0 && ferry_raw3(SYS_tgkill, pid, old, 0) != -ESRCH_)
        return 0;
    return __atomic_compare_exchange_n(&h->owner, &old, owner, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

static struct stack_head *fresh(int pid, int owner)
{
    long p = ferry_raw6(SYS_mmap, 0, STACK_SIZE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if ((unsigned long)p > -4096UL)
        return 0;
    struct stack_head *h = (struct stack_head *)p;
    h->pid = pid;
    h->owner = owner;
    struct stack_head *head = __atomic_load_n(&stacks, __ATOMIC_RELAXED);
    do
        h->next = head;
    while (!__atomic_compare_exchange_n(&stacks, &head, h, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    return h;
}

/* Out of memory: the thread's calls stay on the stack they come on, and it
 * tries again at its next call. */
void ferry_thread_stack_make(void)
{
    struct ferry_thread *t = FERRY_THR;
    if (t->stack_top)
        return;
    int pid = (int)ferry_raw0(SYS_getpid);
    int owner = agg_thread_fiber() ? HELD_BY_FIBER : (int)ferry_raw0(SYS_gettid);
    struct stack_head *h = 0;
    for (struct stack_head *s = __atomic_load_n(&stacks, __ATOMIC_ACQUIRE); s && !h; s = s->next)
        if (take(s, pid, owner))
            h = s;
    if (!h)
        h = fresh(pid, owner);
    if (h)
        t->stack_top = (char *)h + STACK_SIZE;
}

void ferry_thread_stack_release(struct ferry_thread *t)
{
    if (!t->stack_top)
        return;
    struct stack_head *h = (struct stack_head *)(t->stack_top - STACK_SIZE);
    t->stack_top = 0;
    __atomic_store_n(&h->owner, 0, __ATOMIC_RELEASE);
}
