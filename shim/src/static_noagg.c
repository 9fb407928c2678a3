/* The static build (FERRY_STATIC) has no aggregation engine: its io_uring
 * code (liburing) and its fibers depend on a TLS block and a thread pointer
 * of glibc's, which a static program does not give the shim.  `ferry run`
 * refuses aggregation profiles for static programs; should FERRY_MODE say
 * aggregate anyway, ferry_agg_configure's error makes the shim count. */
#include "engine.h"
#include "raw.h"
#include "util.h"

int agg_threads_on;

int ferry_agg_configure(char **envp)
{
    (void)envp;
    return -EOPNOTSUPP;
}

int agg_fd_guard(struct ferry_regs *r) { (void)r; return 0; }
void agg_fd_guard_after_fork(void) {}
void agg_exit_flush(void) {}
void agg_exit_cancel(void) {}
void agg_tick_stop_all(void) {}
void agg_workers_poll(void) {}
int ferry_agg_route_timed(struct ferry_regs *r, uint64_t *done) { (void)r; (void)done; return 0; }
int agg_threads_start(void) { return -EOPNOTSUPP; }
void agg_threads_after_fork(void) {}
void agg_threads_watch(void) {}
int ferry_agg_thread_call(struct ferry_regs *r) { (void)r; return 0; }
int agg_threads_deliver(long nr, long result) { (void)nr; (void)result; return 0; }
int agg_threads_will_restart(long nr, long result) { (void)nr; (void)result; return 0; }
void agg_vfork_child(void) {}
void agg_vfork_parent(void) {}
int agg_signal_call(struct ferry_regs *r) { (void)r; return 0; }
void agg_signal_before_exec(void) {}
void agg_signal_exec_failed(void) {}
void agg_signal_small_stacks(void) {}
int agg_thread_fiber(void) { return 0; }
void agg_name_file_open(long nr, struct ferry_regs *r) { (void)nr; (void)r; }
void agg_altstack_changed(long result) { (void)result; }
int agg_creds_call(long nr) { (void)nr; return 0; }
void agg_creds_changed(void) {}
void agg_altstack_set(void *sp, int flags, size_t size) { (void)sp; (void)flags; (void)size; }
void agg_threads_confined(int every_thread) { (void)every_thread; }
long agg_safe_read(void *dst, const void *src, size_t n) { return ferry_safe_read(dst, src, n); }
