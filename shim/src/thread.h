/* The shim's per-thread state, in one place, reached through FERRY_THR.
 *
 * A dynamic program's threads get it from ld.so as initial-exec TLS, next
 * to the program's own.  A static program has no ld.so to give the shim a
 * TLS block, and its thread pointer may be anything (Go's, musl's), so the
 * static build (FERRY_STATIC, static_*.c) keeps each thread's block in
 * memory of its own and points the %gs base at it: x86-64 Linux user code
 * does not use %gs.  The block's first word is the thread's counters, which
 * entry.S reads on the fast path (fs:[tpoff] or gs:[0]).
 */
#ifndef FERRY_THREAD_H
#define FERRY_THREAD_H

#include <stdint.h>

#include "layout.h"
#include "slots.h"

struct ferry_blk;

/* A vfork child that execs a program the shim serves leaves the writing of
 * its record to its parent (store.c): when, as whom and into what it
 * ended.  `set` while the record is still to be written. */
struct ferry_vfork_ended {
    int set;
    int32_t pid, ppid;
    uint32_t uid, kind;
    const char *exec_path;          /* on the child's hook stack, the parent's memory */
    uint64_t real_ns, mono_ns, tsc;
};

struct ferry_thread {
    struct ferry_blk *blk;          /* first: entry.S's COUNT_CALL */
    struct ferry_thread *self;      /* the block's address (gs-relative reads give offsets) */
    /* the shim's own stack for this thread, and how many calls of the
     * thread are in the shim's C path (entry.S): every thread's in the
     * static build (static_thread.c), made at a dynamic program's first
     * call from code on small stacks (thread_stack.c) */
    char *stack_top;
    unsigned long depth;
    /* store.c: the vfork child's counters and record */
    struct ferry_blk *spare;
    struct ferry_blk *vfork_saved;
    int in_vfork_child;
    int vfork_handed_back;          /* the child gave them back for its exit or exec */
    uint32_t vfork_file;
    struct ferry_slot vfork_slot;
    uint64_t vfork_start_tsc;       /* when a vfork child began (its record's start) */
    uint64_t vfork_hook_tsc;        /* when a vfork child's exec hook began */
    uint64_t vfork_steps[FERRY_HOOK_STEPS];     /* ...and after each of its steps */
    uint64_t *internal;             /* a vfork child's tally of the shim's own calls (raw.h) */
    uint64_t spare_used[2];         /* pages of the spare block the last child wrote, */
    int spare_used_known;           /* ...when it wrote its record last: zeroed by hand */
    uint32_t spare_packed;          /* ...or, not 0, the bytes of the runs it packed its
                                       block into, which say the words to zero */
    int spare_table_used;           /* its tally reached the table beyond own[] */
    const char *vfork_unseen;       /* the path of an exec the child made unrecorded (store.c) */
    uint32_t vfork_image;           /* 1 + the slot claimed for the program the child execs, or 0 */
    int32_t vfork_ppid;             /* the child's parent: its parent's record's pid (0: unknown) */
    struct ferry_vfork_ended vfork_ended;   /* a child's exec whose record its parent writes */
    struct ferry_slot fork_slot;    /* slots taken for the child of the fork being made, */
    int fork_slot_set;              /* ...two from its first, while the fork is made (store.c) */
    int no_block;                   /* every block was taken when this thread looked (store.c), */
    uint32_t no_block_at;           /* ...and how many had been given back then */
    /* shim.c: the clone-like call handed to the trampoline, for ferry_post
     * (a vfork child shares these with its parent: the parent clears them) */
    long pending_nr;
    unsigned long pending_flags;
    int restarted;                  /* the call is one a signal cut short, run again */
    /* catchall.c */
    volatile unsigned char selector;
    unsigned char armed;
    unsigned char sigsys_blocked;   /* whether the program believes SIGSYS is blocked */
    unsigned char let_through;      /* a caught clone ran bare: the selector lets calls by */
    /* the byte the kernel reads for this thread: its own `selector`, except
     * for fibers, which share their carrier's kernel thread and so its byte */
    volatile unsigned char *selector_at;
#ifdef FERRY_STATIC
    int32_t pid, tid;               /* whose block this is (a clone child inherits %gs) */
    struct ferry_thread *next;      /* every block made, for reuse once its thread is gone */
#endif
};

_Static_assert(__builtin_offsetof(struct ferry_thread, stack_top) == FERRY_THREAD_STACK_TOP, "");
_Static_assert(__builtin_offsetof(struct ferry_thread, depth) == FERRY_THREAD_DEPTH, "");

#ifdef FERRY_STATIC
static inline struct ferry_thread *ferry_thread(void)
{
    return *(struct ferry_thread *__seg_gs *)__builtin_offsetof(struct ferry_thread, self);
}
#else
extern __thread struct ferry_thread ferry_thr __attribute__((tls_model("initial-exec")));
static inline struct ferry_thread *ferry_thread(void)
{
    return &ferry_thr;
}
#endif

#define FERRY_THR (ferry_thread())

/* The calling thread's shim stack, if it has none (entry.S, on its way
 * there); a thread's stack given back once it has left it for good. */
void ferry_thread_stack_make(void);
void ferry_thread_stack_release(struct ferry_thread *t);

#endif
