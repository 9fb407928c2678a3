/* The catch-all: Syscall User Dispatch sends every system call made outside
 * the shim's own text and outside the patched sites' fast path to a SIGSYS
 * handler, which runs it through the shim like any other call and records
 * its site for the next rewrite. */
#ifndef FERRY_CATCHALL_H
#define FERRY_CATCHALL_H

struct ferry_regs;

/* Non-zero when FERRY_CATCH_ALL=1 asked for it and the kernel has it. */
extern int ferry_catchall_on;

/* Install the SIGSYS handler and arm the calling thread. */
void ferry_catchall_start(char **envp);
/* Arm the calling thread (a new thread, a vfork child). */
void ferry_catchall_thread(void);
/* Arm a fork child's only thread with a selector of its own. */
void ferry_catchall_fork_child(void);
/* A fiber's thread block at `tp` will run on the kernel thread whose block
 * is at `carrier_tp`: it shares that thread's selector and armed state. */
void ferry_catchall_adopt(unsigned long tp, unsigned long carrier_tp);
/* The calling thread's armed state is checked on every slow call: a thread
 * the shim never saw start (a clone from an unpatched site) is armed here. */
void ferry_catchall_check(void);
/* Around a call that must run in a trampoline (clone family): the trampoline
 * is outside the exempt text, so the selector lets it through; the post hook
 * blocks again. */
void ferry_catchall_allow(void);
void ferry_catchall_block(void);
/* A module whose code runs on small stacks (Go) is loaded: the SIGSYS
 * handler runs on the thread's alternate stack from now on. */
void ferry_catchall_small_stacks(void);
/* How many Go modules the process had when the catch-all started (their
 * code's own calls are caught unless a module is enabled). */
int ferry_catchall_go_modules(void);
/* `ferry detach`: caught calls from now on run bare. */
void ferry_catchall_detach(void);

/* Calls that take a signal mask or a handler: SIGSYS must never be blocked
 * while the catch-all is armed (the kernel would kill the process instead of
 * delivering it), so it is taken out of what the kernel gets and put back
 * into what the program reads.  Returns 1 and sets r->rax when it ran the
 * call, 0 when the call is not one of those. */
int ferry_catchall_masked_call(struct ferry_regs *r);
/* The C path of a call the catch-all caught, r->site the address of its
 * `syscall` (entry.S's CAUGHT_RESUME): recorded, then run as ferry_slow. */
long ferry_caught_slow(struct ferry_regs *r);

#endif
