/* libferry: the runtime that rewritten programs call instead of the kernel.
 *
 * Every function returns 0 on success or a negative errno value, in the style
 * of liburing.  A program does not need this header to be intercepted: the
 * rewriter makes it load libferry.so by itself.  The header is for programs
 * and tools that want to read the shim's figures from inside the process.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Syscall numbers at or above this value are counted in `invalid`. */
#ifndef FERRY_NR_MAX
#define FERRY_NR_MAX 512
#endif

struct ferry_counts {
    uint64_t calls[FERRY_NR_MAX];   /* intercepted calls per syscall number */
    uint64_t invalid;               /* calls with a number outside the table */
    uint64_t modules;               /* rewritten modules the shim enabled */
};

/* Sum the calls intercepted so far by every thread of the process. */
int ferry_counts_snapshot(struct ferry_counts *out);

/* Non-zero once the shim has initialized and enabled the loaded modules. */
int ferry_is_active(void);

/* Non-zero when the profile runs the shim in aggregate mode (its settings
 * reach the shim, not the program's environment: ask here, not getenv). */
int ferry_is_aggregating(void);


/* ---- Aggregation: Cluster Calls on io_uring ------------------------------
 *
 * A group (one per process is the usual case) owns up to FERRY_MAX_POOLS
 * pools; each pool is one io_uring instance with its own settings.  A thread
 * becomes a carrier with ferry_carrier_run(): from then on it runs fibers.
 * A system call that a fiber makes through a rewritten site is routed by the
 * group's table: run at once (native), written to a pool's ring, or queued
 * for the group's worker threads (calls io_uring cannot run).  The fiber then
 * parks; when no fiber of the carrier is ready, every stored call leaves in
 * one io_uring_enter and the carrier waits as the pool's wait policy says.
 * Each fiber sees exactly the result the synchronous call would have given.
 */

#define FERRY_MAX_POOLS 8

/* Route targets besides a pool index (0 .. FERRY_MAX_POOLS-1). */
#define FERRY_ROUTE_NATIVE 0xff  /* executed at once by the carrier */
#define FERRY_ROUTE_WORKER 0xfe  /* executed by one of the group's worker threads */

enum ferry_wait {
    FERRY_WAIT_NONE = 0,   /* submit, do not wait: completions are reaped later */
    FERRY_WAIT_ANY,        /* wait for at least one completion */
    FERRY_WAIT_SOME,       /* wait for wait_limit completions or wait_timeout_ns */
    FERRY_WAIT_ALL,        /* wait until every submitted call completed */
    FERRY_WAIT_ADAPTIVE,   /* batch follows the measured completion rate */
};

struct ferry_pool_config {
    unsigned entries;          /* ring size (power of two); 0: 256 */
    unsigned concurrency;      /* io-wq worker limit (bounded and unbounded); 0: kernel default */
    uint64_t cpus;             /* io-wq worker affinity, bit n = CPU n; 0: any CPU */
    int sqpoll_cpu;            /* -1: no SQPOLL; else an SQPOLL thread pinned to this CPU */
    int priority;              /* nice of the pool's workers, -20 .. 19 (ioprio class BE level) */
    enum ferry_wait wait;
    unsigned wait_limit;       /* FERRY_WAIT_SOME: completions to wait for */
    uint64_t wait_timeout_ns;  /* FERRY_WAIT_SOME: the longest wait */
};

struct ferry_group_config {
    unsigned npools;
    struct ferry_pool_config pools[FERRY_MAX_POOLS];
    unsigned char route[FERRY_NR_MAX]; /* pool index, FERRY_ROUTE_NATIVE or FERRY_ROUTE_WORKER */
    unsigned workers;                  /* worker threads for FERRY_ROUTE_WORKER; 0: 4 */
    size_t fiber_stack;                /* bytes per fiber stack, plus a guard page; 0: 256 KiB */
    unsigned quiet;                    /* FERRY_QUIET_RING or FERRY_QUIET_DIRECT */
};

/* A fiber alone on its carrier (no other one ready) has no batch to join:
 * FERRY_QUIET_DIRECT makes its calls that cannot block at once, as system
 * calls (a socket's without waiting, a regular file's, fstat, close), and
 * sends to the pool only what would wait; FERRY_QUIET_RING routes every
 * call as the table says. */
#define FERRY_QUIET_RING 0
#define FERRY_QUIET_DIRECT 1

struct ferry_group;
struct ferry_fiber;

/* One pool with FERRY_WAIT_ADAPTIVE, every call io_uring can run routed to
 * it, the calls it cannot run to workers, clock reads and identity calls
 * native.  The profile's settings (FERRY_AGG, set by `ferry run`) when
 * `from_profile` is non-zero and the process has them. */
int ferry_group_config_default(struct ferry_group_config *cfg, int from_profile);

int ferry_group_create(struct ferry_group **out, const struct ferry_group_config *cfg);
/* -EBUSY while a carrier still runs in it. */
int ferry_group_destroy(struct ferry_group *g);

/* Make the calling thread a carrier of `g`: `main(arg)` runs as its first
 * fiber; returns once every fiber of this carrier has finished.  -EBUSY
 * when the caller is a carrier already or runs as a fiber: under a profile
 * with threads = "fibers" every thread of the program is one (a program
 * that makes its own carriers runs under `aggregate` or `net`). */
int ferry_carrier_run(struct ferry_group *g, void (*main)(void *), void *arg);

/* On a carrier: a new fiber, ready to run; `*out` (may be NULL) to join it. */
int ferry_fiber_spawn(struct ferry_fiber **out, void (*fn)(void *), void *arg);
int ferry_fiber_yield(void);
/* Wait for `f` to finish and release it (each fiber is joined at most once). */
int ferry_fiber_join(struct ferry_fiber *f);
/* The calling fiber, or NULL outside fiber mode. */
struct ferry_fiber *ferry_fiber_self(void);

/* A raw batch: `n` calls leave in one kernel crossing on pool `pool` and run
 * asynchronously; waits as `wait` says (FERRY_WAIT_SOME: `limit`, `timeout_ns`).
 * Results land in calls[i].result as the synchronous call would return them
 * (-errno on failure) once complete; calls[i].done says which are.  Returns
 * how many completed, or -errno when the batch could not be submitted. */
#define FERRY_NR_NOP (-1L)  /* an io_uring no-op (IORING_OP_NOP): result 0 */
#ifdef _WIN32
/* ferry.dll: `long` is 32 bits (LLP64) and an Nt* call takes up to 4 register
 * and 12 stack arguments; nr is ferry.dll's stub index, result the NTSTATUS
 * (sign-extended) */
typedef long long ferry_word;
#define FERRY_CALL_ARGS 16
#else
typedef long ferry_word;
#define FERRY_CALL_ARGS 6
#endif
struct ferry_call {
    ferry_word nr;
    ferry_word args[FERRY_CALL_ARGS];
    ferry_word result;
    int done;
};
#ifdef _WIN32
/* ferry.dll: the call number (stub index: ferry_call.nr, route[]) of the
 * ntdll or win32u call `name`, e.g. "NtReadFile"; -ENOENT if it has none. */
int ferry_call_number(const char *name);
#endif
int ferry_submit(struct ferry_group *g, unsigned pool, struct ferry_call *calls, unsigned n,
                 enum ferry_wait wait, unsigned limit, uint64_t timeout_ns);
/* Reap completions of earlier FERRY_WAIT_NONE / SOME batches on `pool`. */
int ferry_reap(struct ferry_group *g, unsigned pool, unsigned min_complete);

#define FERRY_BATCH_BUCKETS 12  /* batch sizes 1, 2-3, 4-7, ..., 1024-2047, >= 2048 */

struct ferry_pool_stats {
    uint64_t submitted;        /* calls written to the ring */
    uint64_t completed;
    uint64_t enters;           /* io_uring_enter calls (kernel crossings) */
    uint64_t batches[FERRY_BATCH_BUCKETS];
    uint64_t max_depth;        /* most calls in flight at once */
    uint64_t wait_ns;          /* time carriers spent waiting in io_uring_enter */
};

struct ferry_group_stats {
    uint64_t aggregated;       /* calls executed through a pool */
    uint64_t native;           /* calls executed at once */
    uint64_t worker;           /* calls executed by worker threads */
    uint64_t crossings;        /* kernel crossings the carriers made for them */
    uint64_t fibers;           /* fibers created */
    uint64_t switches;         /* fiber switches */
    unsigned npools;
    struct ferry_pool_stats pools[FERRY_MAX_POOLS];
};
int ferry_group_stats(struct ferry_group *g, struct ferry_group_stats *out);

#ifdef __cplusplus
}
#endif

#endif
