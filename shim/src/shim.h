/* Internal interfaces of the shim. */
#ifndef FERRY_SHIM_H
#define FERRY_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

struct ferry_regs {
    long rax;   /* number on entry; result, or the number again for FERRY_RAW */
    long rdi, rsi, rdx, r10, r8, r9;
    const void *site;
    /* The whole register state of the call, for a thread created as a fiber
     * (it resumes from the same registers on its own stack); frame is NULL
     * when the call did not come through a trampoline (the catch-all). */
    long rbp, r12, r13, r14, r15;
    long *frame;                /* [0] rbx, [1] flags, [2] return address */
};

_Static_assert(__builtin_offsetof(struct ferry_regs, site) == FERRY_REGS_SITE, "regs layout");
_Static_assert(__builtin_offsetof(struct ferry_regs, rbp) == FERRY_REGS_RBP, "regs layout");
_Static_assert(__builtin_offsetof(struct ferry_regs, frame) == FERRY_REGS_FRAME, "regs layout");
_Static_assert(sizeof(struct ferry_regs) == FERRY_REGS_SIZE, "regs layout");

/* Per syscall number: 0 for the entry's fast path, else go to ferry_slow(). */
extern unsigned char ferry_action[FERRY_NR_MAX];

long ferry_slow(struct ferry_regs *r);

/* Copy `n` bytes the program passed by pointer to call `r`: a negative errno
 * for a bad pointer, as ferry_safe_read.  Bytes on the page of the program's
 * stack the call was made from (between the entry's frame and the end of the
 * page holding the program's rsp - 1: mapped, since the entry just wrote
 * below it) are read directly; anything else goes through the kernel, which
 * costs a call (ferry_safe_read, ~1.3 us) where a load costs nanoseconds. */
long ferry_read_arg(const struct ferry_regs *r, void *dst, const void *src, size_t n);
/* Write `n` bytes where call `r` asked for an answer: 0, or -EFAULT for a
 * bad pointer.  Directly on the same page as above, from the program's red
 * zone up (below it are the entry's own words); else through the kernel. */
long ferry_write_arg(const struct ferry_regs *r, void *dst, const void *src, size_t n);
/* A clone-like call `nr` (its CLONE_* `flags`) is about to run bare, from
 * a trampoline or the catch-all's handler: ferry_post ends it, in the
 * caller and in the child. */
void ferry_clone_pending(long nr, unsigned long flags);
void ferry_post(long result);
void ferry_entry(void);
void ferry_entry_nocount(void);
void ferry_entry_own_stack(void);
void ferry_entry_own_stack_nocount(void);
void ferry_post_entry(void);
void ferry_dl_hook(void);
void ferry_on_dl_change(void);
/* The catch-all caught a call: ld.so's hook is written the first time. */
void ferry_caught_first(void);
/* A module whose code runs on small stacks (Go's goroutines) is loaded or
 * found: every signal the shim takes (SIGSYS, the engine's) runs on the
 * thread's alternate stack from now on.  Wherever it was found (the
 * catch-all's look at the modules at start, a plan looked for, a module
 * enabled). */
void ferry_small_stacks_found(void);

/* Set the shim up for this process image, from its start's argc, argv, envp. */
void ferry_start(int argc, char **argv, char **envp);

/* Enable every rewritten module loaded now; returns how many were new. */
int ferry_modules_enable(void);

#endif
