/* The Windows aggregation engine (ferry.dll): ferry.h's groups, pools and
 * raw batches on threads of ferry.dll, as the Cluster Calls thesis had them.
 *
 * A pool is `concurrency` worker threads sharing one request ring (many
 * producers: every client thread; many consumers: the workers).  A client is
 * one thread of the program using one group: the calls it submits complete
 * into its own completion ring, which it reads from memory (no crossing);
 * it enters the kernel only to wake a sleeping worker (once per batch) or to
 * sleep on its ring.  Call numbers are ferry.dll's stub indices
 * (FERRY_WIN_MAX_STUBS == FERRY_NR_MAX), so ferry_group_config.route[] keeps
 * its meaning.  Shared by wagg_*.c (pools, raw batches) and the fiber side.
 */
#ifndef WAGG_H
#define WAGG_H

#include <errno.h>      /* the -errno values are the program's, mingw's numbers */
#include <stdint.h>

#include "ferry.h"
#include "ferry_dll.h"

#define WAGG_WORKER_POOL FERRY_MAX_POOLS    /* the pool behind FERRY_ROUTE_WORKER (cfg.workers threads) */
#define WAGG_NPOOLS (FERRY_MAX_POOLS + 1)
#define WAGG_DONE_CAP 4096                  /* a client's completion ring: its most calls in flight */
#define WAGG_MAX_CLIENTS 256                /* threads using one group at once */


/* A bounded ring of pointer pairs, safe for many producers and many
 * consumers (each cell's sequence number says whose turn it is). */
struct wagg_cell {
    uint64_t seq;
    void *a, *b;
};

struct wagg_ring {
    struct wagg_cell *cells;
    uint64_t mask;
    uint64_t head __attribute__((aligned(64)));     /* next to write */
    uint64_t tail __attribute__((aligned(64)));     /* next to read */
};

struct wagg_pool {
    struct ferry_group *group;
    unsigned index;
    struct ferry_pool_config cfg;
    struct wagg_ring req;           /* a: struct ferry_call *, b: struct wagg_client * */
    unsigned nworkers;
    void **threads;                 /* HANDLEs */
    uint32_t wake __attribute__((aligned(64)));     /* workers sleep on it (WaitOnAddress) */
    uint32_t sleepers;
    uint32_t up;                    /* its ring and workers exist */
    /* updated with atomic adds; a line of their own, as workers write
     * `completed` for every call */
    struct ferry_pool_stats st __attribute__((aligned(64)));
};

/* One thread's use of one group. */
struct wagg_client {
    struct ferry_group *g;
    uint32_t tid;
    struct wagg_ring done;          /* a: struct ferry_call *, b: pool index */
    uint32_t wake __attribute__((aligned(64)));     /* this thread sleeps on it */
    uint32_t sleeping;
    unsigned inflight;              /* submitted, not yet reaped (<= WAGG_DONE_CAP) */
    unsigned pool_inflight[WAGG_NPOOLS];
    uint64_t crossings;             /* times it slept on its ring */
};

struct ferry_group {
    struct ferry_group_config cfg;
    struct wagg_pool pools[WAGG_NPOOLS];    /* [WAGG_WORKER_POOL]: cfg.workers threads */
    long carriers;                  /* carriers running in the group: destroy says -EBUSY */
    struct ferry_group_stats st;    /* group counters (aggregated, native, worker, crossings,
                                       fibers, switches); pools' are in pools[i].st */
    uint32_t stop;
    uint32_t nclients;
    struct wagg_client *clients[WAGG_MAX_CLIENTS];
    long lock;
};

#define wagg_add(field, n) __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)

/* wagg_ring.c */
int wagg_ring_init(struct wagg_ring *r, unsigned cap);     /* cap: a power of two */
void wagg_ring_free(struct wagg_ring *r);
int wagg_ring_push(struct wagg_ring *r, void *a, void *b); /* 0, or -1 when full */
int wagg_ring_pop(struct wagg_ring *r, void **a, void **b); /* 0, or -1 when empty */
int wagg_ring_empty(const struct wagg_ring *r);

/* wagg_native.c: run ntdll call `index` (a stub index) with args[0..16) the
 * way its stub would, WITHOUT counting it (a routed call is counted once,
 * where the program made it).  FERRY_NR_NOP: 0.  Unknown: STATUS_INVALID_SYSTEM_SERVICE. */
long long wagg_native(unsigned index, const uint64_t *args);
/* the call `c` describes, as wagg_native runs it (any nr: FERRY_NR_NOP gives
 * 0, a number no stub has STATUS_INVALID_SYSTEM_SERVICE, as the kernel would) */
long long wagg_run(const struct ferry_call *c);
/* non-zero if the call acts on the calling thread itself (its context, its
 * alerts, its windows: NtUser and NtGdi calls) and so cannot run on a worker */
int wagg_must_native(long long nr, const long long *args);
/* the stub index of the Nt call `name`, or -1 */
int wagg_index(const char *name);

/* wagg_pool.c */
int wagg_pool_start(struct ferry_group *g, unsigned pool, unsigned nworkers);
/* wagg_group.c: `pool`'s ring and workers made if not yet (WAGG_WORKER_POOL
 * starts on first use): 0 or -errno */
int wagg_pool_ensure(struct ferry_group *g, unsigned pool);
void wagg_pools_stop(struct ferry_group *g);
/* The wake protocol of workers and clients: a waker bumps `word` and wakes
 * one sleeper if `sleepers` says one may sleep; a sleeper sleeps on `word`
 * unless `ready` has something once it counted itself (or `also`).
 * wagg_sleep: -1 if it did not sleep, 0 woken, 1 on a timeout (100 ns
 * units, negative: relative; NULL: none).  Both keep their calls out of
 * the program's counts. */
int wagg_wake_one(uint32_t *word, const uint32_t *sleepers);       /* 1 if it woke one */
int wagg_sleep(uint32_t *word, uint32_t *sleepers, const struct wagg_ring *ready, int also,
               const void *timeout);
/* wagg_config.c */
int wagg_config_validate(const struct ferry_group_config *cfg);
extern unsigned wagg_carriers;      /* FERRY_AGG carriers= (fiber mode) */
extern int wagg_threads_fibers;     /* FERRY_AGG threads=fibers */

/* wagg_client.c: the calling thread's client of `g` (made on first use), NULL without memory */
struct wagg_client *wagg_client(struct ferry_group *g);
int wagg_clients_idle(struct ferry_group *g);      /* 0, or -EBUSY: calls still out */
void wagg_clients_free(struct ferry_group *g);
/* One completion of the client's ring (done set): 0, or -1 when none. */
int wagg_client_pop(struct wagg_client *cl, struct ferry_call **c, unsigned *pool);
/* Sleep until the client's ring has a completion (after a short spin) or
 * wagg_now_ns() reaches deadline_ns (UINT64_MAX: never): 0 or -ETIMEDOUT;
 * the sleep is a crossing of `pool`, its time the pool's wait_ns. */
int wagg_client_wait(struct ferry_group *g, struct wagg_client *cl, unsigned pool, uint64_t deadline_ns);
/* a batch of n calls handed to `pool`: submitted, and its size's bucket */
void wagg_batch(struct ferry_group *g, unsigned pool, unsigned n);
/* Queue `c` on `pool` for the calling thread (no wake): 0, or -EAGAIN when
 * the pool's ring or the client's completion ring has no room (kick, reap,
 * then push again). */
int wagg_push(struct ferry_group *g, unsigned pool, struct ferry_call *c);
/* The batch's one crossing: wake a sleeping worker of `pool`, if one sleeps
 * (the woken one wakes the next while work remains). */
int wagg_kick(struct ferry_group *g, unsigned pool);     /* 1 if it woke one (a crossing) */
/* The calling thread's completed calls, done and result set, into
 * out[0..cap): waits for at least `min` (0: none) or until timeout_ns
 * (UINT64_MAX: no limit).  Their number. */
int wagg_reap_calls(struct ferry_group *g, struct ferry_call **out, unsigned cap, unsigned min,
                    uint64_t timeout_ns);

/* wagg_group.c: FERRY_AGG / FERRY_MODE read at start-up, before ferry.dll
 * takes Ferry's settings out of the program's environment */
void wagg_configure(void);
const char *wagg_profile_text(void);
uint64_t wagg_now_ns(void);
uint64_t wagg_deadline(uint64_t timeout_ns);    /* now + timeout; UINT64_MAX for none or too far */

#endif
