/* The aggregation engine as the core of the shim sees it: exactly what
 * shim.c calls of it, and nothing else.  The engine's own files (agg_*.c)
 * share agg.h, which includes this one; no core file includes agg.h, so a
 * change inside the engine cannot reach the core unseen. */
#ifndef FERRY_ENGINE_H
#define FERRY_ENGINE_H

#include <stdint.h>

#include "shim.h"

struct agg_fiber;

/* Start-up in aggregate mode: FERRY_AGG read and checked (agg_config.c);
 * not 0 on a bad one (said on stderr): the process then runs in count mode. */
int ferry_agg_configure(char **envp);

/* The program's threads run as fibers (profile `threads = "fibers"`,
 * agg_threads.c): on when configured, cleared by the core if the start fails. */
extern int agg_threads_on;
int agg_threads_start(void);
/* The calls the fiber world answers are made to reach ferry_slow. */
void agg_threads_watch(void);
/* From ferry_slow, before anything else: 1 if this was a thread operation
 * the fiber world answers (result in r->rax). */
int ferry_agg_thread_call(struct ferry_regs *r);
/* Signals sent to the running fiber while it was away, raised now: 1 when
 * the call they cut short (`nr`, ended with `result`) is to run again. */
int agg_threads_deliver(long nr, long result);
/* What agg_threads_deliver will say, without raising anything. */
int agg_threads_will_restart(long nr, long result);

/* The calls of a fiber: non-null while one runs on this thread.  The static
 * build (FERRY_STATIC) has no engine (static_noagg.c): no thread is a fiber. */
#ifdef FERRY_STATIC
#define agg_self ((struct agg_fiber *)0)
#else
extern __thread struct agg_fiber *agg_self __attribute__((tls_model("initial-exec")));
/* The carrier this thread runs on (0: none): entry.S's rt_sigreturn clears
 * its rseq probe (AGG_CARRIER_RSEQ_CS, layout.h). */
extern __thread struct agg_carrier *agg_carrier __attribute__((tls_model("initial-exec")));
#endif
/* n bytes of the program's at src, as ferry_safe_read reads them: with
 * the program's threads as fibers (agg_usermem.c), pages the carrier
 * already read are not asked of the kernel again. */
long agg_safe_read(void *dst, const void *src, size_t n);
/* Whether the calling thread is a fiber the engine ends (a program's
 * thread under `threads = "fibers"`): what it holds is given back by the
 * engine once it has left its stacks, and its sigaltstack runs in the
 * trampoline, at the program's own stack pointer, after which the engine
 * learns what the kernel has (agg_altstack_changed, from ferry_post). */
int agg_thread_fiber(void);
void agg_altstack_changed(long result);
/* A sigaltstack the catch-all made and answered from the signal's frame
 * (catchall.c): the fiber's, and the kernel's for its carrier, now. */
void agg_altstack_set(void *sp, int flags, size_t size);
/* The calling thread confined itself (a seccomp filter, strict mode, a
 * TSC that faults), which binds its kernel thread and the threads it
 * starts, or every thread (TSYNC): a fiber stays on its carrier. */
void agg_threads_confined(int every_thread);
/* A call that changes credentials (agg_creds.c), and its success on the
 * calling thread: the engine's threads take them on. */
int agg_creds_call(long nr);
void agg_creds_changed(void);
/* A fiber's call: 1 if the engine ran it (result in r->rax; *done: when it
 * saw the call complete, 0: it ran at once), 0 to let the core run it. */
int ferry_agg_route_timed(struct ferry_regs *r, uint64_t *done);

/* A fiber's open or openat (`nr`) that failed ENOENT: another thread's
 * name file, /proc/self/task/VTID/comm, is opened after all (agg_names.c). */
void agg_name_file_open(long nr, struct ferry_regs *r);

/* The engine's own signal (SIGRTMAX, agg_signal.c), hidden from the
 * program: its rt_sigaction on it answered from the program's record (1 when
 * done here), and what an exec hands on of it is what the program set. */
int agg_signal_call(struct ferry_regs *r);
void agg_signal_before_exec(void);
void agg_signal_exec_failed(void);
/* A module whose code runs on small stacks is enabled: the engine's
 * signal then runs on the thread's alternate stack, as the program's own
 * handlers must (Go's goroutine stacks have no room for a signal frame). */
void agg_signal_small_stacks(void);

/* The program's close, dup2, dup3 or close_range on the engine's kept
 * descriptors: 1 when done here (result in r->rax). */
int agg_fd_guard(struct ferry_regs *r);

/* Process events: fork (in the child), vfork (in the child, then in the
 * parent once it runs again), exit_group (the figures flushed first). */
void agg_fd_guard_after_fork(void);
void agg_threads_after_fork(void);
void agg_vfork_child(void);
void agg_vfork_parent(void);
void agg_exit_flush(void);
/* exit_group: the calls in the process's rings are cancelled first (agg_exit.c). */
void agg_exit_cancel(void);
/* The program is about to forbid itself rt_sigreturn (sandbox.c): the
 * engine's carriers stop their preemption ticks first. */
void agg_tick_stop_all(void);
/* ... and to enter seccomp's strict mode: the engine's workers look for
 * work on their own, and can end the process for the carrier. */
void agg_workers_poll(void);

#endif
