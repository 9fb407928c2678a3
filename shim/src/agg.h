/* The aggregation engine (Cluster Calls on io_uring): internal interfaces,
 * shared by the engine's files only (what the core calls is engine.h's).
 *
 * Files: agg_alloc.c (calloc/free for liburing), agg_config.c (FERRY_AGG,
 * validation, the default routing table), agg_group.c (groups and pools,
 * probing), agg_fiber.c + agg_switch.S (fibers, stacks, TLS, switching),
 * agg_sched.c (carriers, scheduler, wait policies), agg_route.c (routing and
 * translation of calls to io_uring operations), agg_worker.c (helper threads
 * for the calls io_uring cannot run), agg_futex.c (private futexes between
 * fibers), agg_runq.c (run queues, work stealing between carriers),
 * agg_stats.c (figures), agg_api.c (the raw batch and the public entry
 * points).
 */
#ifndef FERRY_AGG_H
#define FERRY_AGG_H

#include <stddef.h>
#include <stdint.h>
#include <liburing.h>

#include "engine.h"
#include "ferry.h"
#include "raw.h"
#include "shim.h"

/* Opcodes newer than liburing 2.3's headers (kernel ABI, include/uapi/linux/io_uring.h). */
#define AGG_OP_WAITID 50
#define AGG_OP_FUTEX_WAIT 51
#define AGG_OP_FUTEX_WAKE 52
#define AGG_OP_FTRUNCATE 55
#define AGG_OP_BIND 56
#define AGG_OP_LISTEN 57
#define AGG_OP_EPOLL_WAIT 59
#define AGG_OP_MAX 64

/* user_data tags (low 3 bits; every tagged object is 8-aligned). */
#define AGG_TAG_REQ 0      /* struct agg_req of a parked fiber */
#define AGG_TAG_RAW 1      /* struct ferry_call of a raw batch */
#define AGG_TAG_WAKE 2     /* the carrier's futex wait on its kick word */
#define AGG_TAG_TIMER 3    /* struct agg_timer of a timed futex wait */
#define AGG_TAG_IGNORE 4   /* nothing to do (timeout removal) */
#define AGG_TAG_EFD 5      /* the carrier's eventfd read (other pools' completions) */
#define AGG_TAG_MASK 7UL

struct agg_ctx {
    void *rsp;
    unsigned long fsbase;  /* 0: leave fs alone */
    /* 1 once the switch away has saved the context and left the stack, 0
     * from the switch back: another carrier may run a fiber only at 1 */
    int saved;
};

/* A call on its way: on the parked fiber's stack. */
struct agg_req {
    long nr;
    long args[6];
    long result;
    uint64_t done_tsc;            /* when it completed (the CQE reaped, the worker done) */
    struct agg_fiber *fiber;
    struct agg_carrier *carrier;
    struct agg_req *next;         /* worker queue, then the carrier's done list */
    int done;
    unsigned cflags;              /* the CQE's flags (IORING_CQE_F_SOCK_NONEMPTY) */
    int urgent;                   /* submitted and reaped before the round goes on; its
                                     fiber runs first once it completes */
    int cancel;                   /* a signal for the fiber: a worker's call ends with EINTR */
    int worker_tid;               /* the worker running it (0: queued, -1: finished) */
    const struct ferry_regs *regs;  /* a fiber's call, whose arguments ferry_read_arg reads
                                       (0: the API's) */
    /* room for translations that need a kernel structure */
    struct {
        void *name;
        uint32_t namelen;
        void *iov;
        size_t iovlen;
        void *control;
        size_t controllen;
        int flags;
    } msg;                        /* layout of struct msghdr */
    struct {
        void *base;
        size_t len;
    } iov;
    struct __kernel_timespec ts;
    int timed;                    /* a linked timeout (in ts) follows its operation */
    struct statx stx;             /* fstat/newfstatat: the STATX result, made a struct stat after */
};

enum agg_fiber_state { AGG_READY = 1, AGG_RUNNING, AGG_PARKED, AGG_DONE };

/* A call the quiet path tries without waiting, on one descriptor: after a
 * try that found nothing, the next calls on it skip the try. */
struct agg_try {
    int miss;                     /* 1 + the descriptor whose last try found nothing */
    unsigned skips;               /* ... its calls that go to the ring without a try */
};

/* A thread's alternate signal stack, laid out as sigaltstack(2)'s stack_t. */
struct agg_altstack {
    void *sp;
    int flags;
    unsigned long size;
};

struct agg_fiber {
    struct agg_ctx ctx;
    struct agg_carrier *carrier;
    void (*fn)(void *);
    void *arg;
    char *stack;                  /* mapping: guard page, then the stack */
    size_t stack_size;            /* mapping size */
    char *stack_lo, *stack_top;   /* the stack it runs on, 0 if unknown: memory between
                                     its stack pointer and the top is mapped */
    void *tcb;                    /* this fiber's glibc thread control block (its fs base) */
    int state;
    int busy;                     /* inside the engine: its calls run natively */
    int joined;                   /* a joiner exists or ran */
    struct agg_fiber *next, *prev;   /* run queue or futex wait list */
    struct agg_fiber *joiner;     /* a fiber parked in ferry_fiber_join on this one */
    /* futex emulation */
    uint32_t *futex_addr;
    uint32_t futex_val;
    uint32_t futex_mask;
    long futex_result;
    struct agg_timer *timer;
    /* a program's thread run as a fiber (agg_threads.c) */
    int thread;
    int vtid;                     /* what gettid says */
    int *clear_tid;               /* CLONE_CHILD_CLEARTID */
    int interrupted;              /* a signal cut its parked call short */
    int suspended;                /* parked in rt_sigsuspend */
    uint64_t waitset;             /* the signals it waits for in rt_sigtimedwait */
    uint64_t sigmask;             /* its signal mask (the carrier's while it runs) */
    struct agg_altstack alt;      /* its alternate signal stack (the carrier's while it runs) */
    uint64_t sigpending;          /* signals sent to it while it was not running */
    char *siginfo;                /* 64 siginfos of 128 bytes, once one is kept (world_lock) */
    uint64_t siginfo_set;         /* ... which of them hold a sender's siginfo */
    uint64_t affinity;            /* what sched_setaffinity asked for it */
    int nice;                     /* its nice value: setpriority of its tid */
    struct agg_thread_start *start;
    struct agg_req *req;          /* the call it is parked in */
    int req_pool;                 /* ... and that ring's pool, -1: a worker's */
    /* what other carriers asked of this fiber's carrier (agg_post) */
    unsigned posted;              /* AGG_POST_* bits, atomic */
    struct agg_fiber *post_next;  /* in its carrier's inbox */
    int queued;                   /* in a futex bucket (under the bucket's lock) */
    /* run queue (agg_runq.c) */
    int computes;                 /* its last turn ended by its tick, not by a call */
    uint64_t computed_at;         /* when its tick last ended its turn (agg_now_ns) */
    uint64_t cpu_ns, cpu_seen;    /* its CPU time before its turn, the most a read said (agg_cputime.c) */
    char name[16];                /* its thread's name (PR_SET_NAME): the carrier's is the last one set */
    int movable;                  /* another carrier may run it (a program's thread, not the first) */
    int confined;                 /* a seccomp filter binds it: its carrier's (agg_threads_confined) */
    uint32_t rq_at;               /* a fiber that stays: the ring position it comes after */
    int accept_more;              /* 1 + the listening socket whose last accept said that
                                     more connections wait; 0: none */
    struct agg_try read_try;      /* the quiet path's reads of a socket (agg_route.c) */
    struct agg_try wait_try;      /* ... and its looks before an epoll_wait */
};

/* What another carrier (or a thread outside) asks of a fiber's own carrier:
 * only the carrier that runs a fiber changes its state. */
#define AGG_POST_NEW 1u           /* a new thread placed here: count it, run it */
#define AGG_POST_FUTEX 2u         /* its futex wait ended (result in futex_result) */
#define AGG_POST_SIGNAL 4u        /* a signal was sent to it (sigpending) */
#define AGG_POST_DEAD 8u          /* it ended while posts were pending: their reader frees it */
#define AGG_POST_HELD 16u         /* its carrier is reading its posts (agg_inbox_drain) */

#define AGG_RQ_SLOTS 256          /* a carrier's ring of fibers others may steal (power of two) */

struct agg_timer {
    struct agg_fiber *fiber;      /* NULL once the wait ended another way */
    uint32_t *addr;               /* the word waited on: its bucket */
    struct __kernel_timespec ts;
};

/* The scheduler of a carrier, replaceable (the thesis's future work): it
 * only decides which ready fiber runs next. */
struct agg_sched_ops {
    const char *name;
    void (*push)(struct agg_carrier *c, struct agg_fiber *f);   /* f became ready */
    struct agg_fiber *(*pick)(struct agg_carrier *c);           /* next to run, or NULL */
    void (*push_first)(struct agg_carrier *c, struct agg_fiber *f);  /* ready, runs next */
};
extern const struct agg_sched_ops agg_sched_round_robin;

struct agg_pool_run {              /* a carrier's view of one pool */
    struct io_uring ring;
    int up;
    unsigned inflight;            /* calls submitted or written, not completed */
    unsigned misc;                /* other operations in flight (timers, the wake read) */
    unsigned queued;              /* calls written since the last flush of the SQ */
    unsigned unentered;           /* calls flushed since the last io_uring_enter (SQPOLL) */
    uint64_t rate;                /* adaptive: completions per ms of wall time (EWMA) */
    uint64_t rate_at;             /* when the last sample of it ended (ns) */
    unsigned done;                /* completions reaped since then */
};

/* Fiber mappings a carrier keeps for reuse: a server's connections come and
 * go by the hundred, and each mapping made or unmapped is a crossing. */
#define AGG_STACK_CACHE 512
#define AGG_READ_PAGES 8

struct agg_carrier {
    /* rseq_cs of the area the kernel keeps for this thread (0: none known):
     * the engine's probe stays there until a signal is delivered (or the
     * thread preempted), which the kernel says by clearing it, and until a
     * handler returns (entry.S clears it); first, for entry.S */
    uint64_t *rseq_cs;
    unsigned char own_rseq[64];   /* the area of a carrier thread of the engine's, aligned within */
    /* pages of the program's read through the kernel since map generation
     * read_gen (agg_usermem.c) */
    uintptr_t read_pages[AGG_READ_PAGES];
    uint64_t read_gen;
    unsigned read_next;
    struct ferry_group *g;
    struct agg_ctx sched;         /* the scheduler's own context */
    unsigned long tp;             /* the carrier thread's own thread pointer */
    int tid;                      /* the carrier thread's real tid */
    uint64_t kmask;               /* the signal mask the kernel has for it now */
    struct agg_altstack kalt;     /* ... and the alternate signal stack */
    struct agg_fiber *current;
    struct agg_fiber *finished;   /* switched to the scheduler for the last time */
    const struct agg_sched_ops *ops;
    /* run queue (agg_runq.c): movable fibers in a ring that other carriers
     * take from (rq_h), the others in lists only this carrier touches */
    struct agg_fiber *rq_ring[AGG_RQ_SLOTS];
    uint32_t rq_h;                /* next to run: taken by CAS, here and by thieves */
    uint32_t rq_t;                /* next free slot: written here only */
    struct agg_fiber *over_head, *over_tail; /* movable fibers beyond a full ring */
    struct agg_fiber *pin_head, *pin_tail; /* fibers that stay on this carrier */
    struct agg_fiber *rq_next;    /* runs before the rest, never taken by a thief: a fiber
                                     whose urgent call completed (Go's runnext) */
    unsigned rq_over, npin;
    int steal_slot;               /* its index among the carriers that steal, -1: none */
    uint64_t steal_seed;
    uint64_t offered_ns;          /* when it last woke an idle carrier */
    struct agg_fiber *requeue;    /* yielded: queued once it is off its stack (it may move) */
    unsigned alive;               /* fibers not finished (atomic: a thief moves one) */
    unsigned round_left;          /* fibers left to run in this round */
    int urgent;                   /* a parked fiber's urgent call: submit and reap now */
    unsigned urgent_left;         /* urgent calls this round may still make */
    struct agg_pool_run pools[FERRY_MAX_POOLS];
    int efd;                      /* the other pools' rings (and, without IORING_OP_FUTEX_WAIT,
                                   * wakers) signal here; -1: none or only the fixed file */
    int has_efd;                  /* the eventfd is fixed file 0 of pool 0's ring */
    uint64_t efd_buf;
    int efd_armed;
    int kick_armed;               /* a futex wait on `kick` sits in pool 0's ring */
    uint32_t kick_seen;           /* `kick` when the carrier last looked for work */
    struct agg_req *done_list;    /* pushed by workers */
    unsigned worker_pending;
    unsigned nfwait;              /* its fibers parked on a private futex (atomic) */
    uint64_t words_seen_ns;       /* when it last looked at their words */
    struct agg_fiber *inbox;      /* fibers with posts from elsewhere (agg_post) */
    int sleeping;                 /* AGG_SLEEP_*: how to wake it when posting */
    uint32_t kick;                /* its futex word while it sleeps in futex_waitv */
    int threads;                  /* runs a program's threads: stays while any is alive */
    int raw;                      /* a carrier thread of the shim's own (no program thread) */
    uint32_t creds_seen;          /* agg_creds_gen its thread has the credentials of */
    int slot;                     /* its figures in the process file, -1: none */
    unsigned placed;              /* threads placed on it and not ended (atomic) */
    unsigned peak;                /* most fibers alive at once */
    struct agg_fiber *dead;       /* finished, joined or not yet */
    char *stack_cache[AGG_STACK_CACHE];
    size_t stack_cache_size[AGG_STACK_CACHE];
    unsigned nstack_cache;
    /* preemption (agg_signal.c): a timer on the carrier thread's CPU time */
    unsigned long runs;           /* fibers switched to, ever */
    unsigned long tick_runs;      /* `runs` at the last tick */
    uint64_t slice_at;            /* when the running fiber's slice began (about) */
    int preempted;                /* the fiber yielding now was preempted by its tick */
    int tick_timer;               /* its POSIX timer, -1: none */
    int tick_slot;                /* its index in the ticking carriers' table */
    int tick_armed;
    int tick_lock;                /* tick_armed and the timer's setting */
    uint64_t cpu_mark;            /* its thread's CPU time as the current turn began, 0: unknown */
    /* hot counters, added to the group's (shared, atomic) once per wait */
    uint64_t acc_switches, acc_aggregated, acc_crossings, acc_completed[FERRY_MAX_POOLS];
    /* calls per ring entry lately (a moving average, 1/16ths): the quiet
     * path is taken while batches stay near one call (agg_route.c) */
    unsigned batch_avg16;
    /* where the page-cache check of a sendfile reads to (agg_route.c): the
     * program's stack, where the call is made, may be a small one */
    char probe[4096];
};

struct agg_counters {
    uint64_t aggregated, native, worker, crossings, fibers, switches, carriers;
    struct {
        uint64_t submitted, completed, enters, max_depth, wait_ns, depth_sum;
        uint64_t batches[FERRY_BATCH_BUCKETS];
    } pools[FERRY_MAX_POOLS];
};

struct agg_pool {
    struct ferry_pool_config cfg;
    struct io_uring ring;         /* the pool's own ring: raw batches; carriers attach to it */
    int up;
    int lock;                     /* raw batches from several threads */
    unsigned inflight;
};

struct agg_worker_set;

struct ferry_group {
    struct ferry_group_config cfg;
    struct agg_pool pools[FERRY_MAX_POOLS];
    unsigned char op_ok[AGG_OP_MAX];   /* probe: opcode supported */
    int probed;                   /* op_ok holds the kernel's answer */
    int ext_arg;                  /* IORING_FEAT_EXT_ARG */
    int carriers;                 /* running now */
    struct agg_counters st;
    struct agg_worker_set *workers;
};

/* agg_alloc.c */
void *agg_calloc(size_t n, size_t size);
void agg_free(void *p);

/* agg_config.c */
int agg_config_validate(const struct ferry_group_config *cfg);
void agg_config_defaults(struct ferry_group_config *cfg);
int agg_config_parse(const char *s, struct ferry_group_config *cfg, const char **why);
int agg_must_native(long nr);
extern struct ferry_group_config agg_profile;
extern int agg_profile_set;
unsigned agg_online_cpus(void);

/* agg_group.c */
#define INT_FLAG_REG_RING_ 1  /* liburing 2.3's mark of a registered ring */
int agg_ring_init(struct ferry_group *g, unsigned pool, struct io_uring *ring, int attach_fd);
/* ferry_group_create, its pools' own rings made only when `pool_rings` (or
 * for an SQPOLL pool, whose thread the carriers attach to). */
int agg_group_create(struct ferry_group **out, const struct ferry_group_config *cfg, int pool_rings);
/* Which opcodes the kernel has, asked of `ring` once per group. */
void agg_group_probe(struct ferry_group *g, struct io_uring *ring);
/* Submit what the SQ holds and wait for `min` completions (at most
 * `timeout_ns` with IORING_FEAT_EXT_ARG, 0: no limit); 1 when that took an
 * io_uring_enter, 0 when nothing needed one (agg_enter.c). */
int agg_ring_enter(struct io_uring *ring, unsigned min, uint64_t timeout_ns, int ext_arg);
int agg_fd_high(int fd);
void agg_ring_hide(struct io_uring *ring);
void agg_ring_exit(struct io_uring *ring, int own);
long agg_ring_register(struct io_uring *ring, unsigned op, void *arg, unsigned n);

/* agg_usermem.c: the program's memory read as the kernel would (-EFAULT
 * for a bad pointer), pages already read directly; the calls that may take
 * a page away, seen before they run, and the engine's own such unmapping. */
void agg_usermem_call(const struct ferry_regs *r);
void agg_usermem_changed(void);

/* agg_fiber.c + agg_switch.S */
void ferry_agg_switch(struct agg_ctx *from, struct agg_ctx *to);
void ferry_agg_fiber_entry(void);
extern int ferry_agg_fsgsbase;
void agg_fsgsbase_detect(void);
int agg_fiber_new(struct agg_carrier *c, struct agg_fiber **out, void (*fn)(void *), void *arg);
/* A context whose first switch runs fn(arg) on the stack below `top`. */
void agg_ctx_start(struct agg_ctx *ctx, void *top, void (*fn)(void *), void *arg);
void agg_fiber_free(struct agg_carrier *c, struct agg_fiber *f);
char *agg_thread_block(size_t stack, size_t *size, unsigned long *tp, char **stack_top);

/* agg_sched.c */
#define AGG_SLEEP_RING 1          /* in io_uring_enter, the eventfd read armed */
#define AGG_SLEEP_FUTEX 2         /* in futex_waitv, `kick` among the words */
/* Monotonic ns from the TSC (the process file's calibration), the clock otherwise. */
uint64_t agg_now_ns(void);
void agg_park(struct agg_fiber *f);
void agg_wake(struct agg_fiber *f);
/* f (running) lets the others of its carrier run first. */
void agg_yield(struct agg_fiber *f);
void agg_preempt(struct agg_fiber *f);
int agg_others_waiting(struct agg_carrier *c);
/* Ask f's carrier to act on f (AGG_POST_*), from any thread. */
void agg_post(struct agg_fiber *f, unsigned what);
/* The same without waking the carrier: 1 when agg_kick(carrier) is due
 * (called once a spin lock is released, so that the woken carrier does not
 * spin on it). */
int agg_post_quiet(struct agg_fiber *f, unsigned what);
void agg_kick(struct agg_carrier *c);
/* Wake c if it waits for events, whatever it waits in (workers, posts). */
void agg_rouse(struct agg_carrier *c);
void agg_inbox_drain(struct agg_carrier *c);
void agg_carrier_tls(struct agg_carrier *c);
void agg_count_fiber(struct agg_carrier *c);
struct io_uring_sqe *agg_sqe(struct agg_carrier *c, unsigned pool);
/* Room for n SQEs in a row (a linked pair must leave in one submission). */
void agg_sqe_room(struct agg_carrier *c, unsigned pool, unsigned n);
void agg_fiber_finish(struct agg_fiber *f) __attribute__((noreturn));
int agg_carrier_new(struct ferry_group *g, struct agg_carrier **out);
void agg_carrier_loop(struct agg_carrier *c);
void agg_carrier_forget(struct agg_carrier *c);
void agg_group_forget(struct ferry_group *g);

/* agg_runq.c */
void agg_rq_push(struct agg_carrier *c, struct agg_fiber *f);
struct agg_fiber *agg_rq_pick(struct agg_carrier *c);
/* f runs next, before every fiber queued (a fiber there before goes back in line). */
void agg_rq_push_first(struct agg_carrier *c, struct agg_fiber *f);
/* The CPU clock of kernel thread `tid` (0: the caller) of type `which`
 * (0 PROF, 1 VIRT, 2 SCHED): the kernel's MAKE_THREAD_CPUCLOCK. */
static inline long agg_thread_clock(int tid, int which)
{
    return (long)(((unsigned long)~(unsigned)tid << 3) | 4 | (unsigned)which);
}

/* per-fiber CPU clocks (agg_cputime.c) */
extern int agg_cputime_on;
uint64_t agg_cpu_thread_ns(int tid);
void agg_cpu_turn_charge(struct agg_carrier *c, struct agg_fiber *from);
void agg_cpu_start(struct agg_carrier *here, struct agg_fiber *first);
int agg_cpu_fiber_ns(struct agg_fiber *self, struct agg_fiber *t, uint64_t *out);

/* A fiber's turn on its carrier ends (`from`, 0: from the scheduler) and
 * the next begins: charged once a thread's clock was asked for. */
static inline void agg_cpu_turn(struct agg_carrier *c, struct agg_fiber *from)
{
    if (__builtin_expect(__atomic_load_n(&agg_cputime_on, __ATOMIC_RELAXED), 0))
        agg_cpu_turn_charge(c, from);
}

unsigned agg_rq_len(struct agg_carrier *c);
static inline int agg_rq_empty(struct agg_carrier *c)
{
    return !c->rq_next && !c->pin_head && !c->over_head &&
           __atomic_load_n(&c->rq_h, __ATOMIC_RELAXED) == c->rq_t;
}
/* c joins the carriers that steal from each other (the program's threads). */
void agg_steal_join(struct agg_carrier *c);
int agg_steal_on(void);
/* Take ready fibers from a busy carrier: how many. */
unsigned agg_steal(struct agg_carrier *c);
/* f (movable, parked on nothing of its carrier's) runs on c from now. */
void agg_adopt(struct agg_carrier *c, struct agg_fiber *f);
/* Some other carrier has fibers c could take. */
int agg_steal_ready(struct agg_carrier *c);
void agg_idle(struct agg_carrier *c, int idle);
void agg_steal_forget(void);

/* agg_route.c */
enum agg_tr { AGG_TR_RING, AGG_TR_NATIVE, AGG_TR_WORKER };
enum agg_tr agg_translate(const struct ferry_group *g, unsigned pool, long nr, const long *a,
                          struct agg_req *req, struct io_uring_sqe *sqe);
int agg_translatable(const struct ferry_group *g, long nr, const long *a, int with_storage);
long agg_fixup(long nr, const long *a, struct agg_req *req, long res);
int ferry_agg_route(struct ferry_regs *r);
void agg_route_watch(void);
/* What close_range(first, last, flags) closes, the engine knows nothing of
 * any more. */
#define CLOSE_RANGE_UNSHARE_ (1U << 1)
#define CLOSE_RANGE_CLOEXEC_ (1U << 2)
void agg_fds_forget(unsigned long first, unsigned long last, unsigned long flags);

/* agg_worker.c */
int agg_workers_start(struct ferry_group *g);
void agg_workers_stop(struct ferry_group *g);
void agg_worker_queue(struct ferry_group *g, struct agg_req *req);
void agg_carrier_drain(struct agg_carrier *c);

/* agg_futex.c */
int agg_futex(struct agg_fiber *f, struct ferry_regs *r);
void agg_futex_timer_done(struct agg_timer *t);
void agg_futex_idle(struct agg_carrier *c, uint64_t limit_ns);
void agg_futex_recheck(struct agg_carrier *c);
void agg_futex_wake_all(void *addr);
int agg_futex_interrupt(struct agg_fiber *f);
int agg_futex_abandon(struct agg_fiber *f);
void agg_futex_woken(struct agg_carrier *c, struct agg_fiber *f);
void agg_futex_forget(void);

/* glibc's "no thread but the first" (2.32+): pthread_create clears it */
extern char __libc_single_threaded __attribute__((weak));

/* agg_threads.c */
void agg_thread_resumed(struct agg_fiber *f);
void agg_thread_leaving(struct agg_fiber *f);
void agg_threads_idle(struct agg_carrier *c);
uint64_t agg_threads_wait_limit(const struct agg_carrier *c);
int agg_outside_wakers(const struct agg_carrier *c);
void agg_threads_take_signals(struct agg_carrier *c);
int agg_threads_signalled(struct agg_carrier *c, struct agg_fiber *f);
void agg_thread_free(struct agg_fiber *f);
void agg_threads_raise(struct agg_fiber *f, uint64_t frame_mask);
int agg_in_vfork_child(void);
extern int agg_threads_alive;
#define AGG_MAX_CARRIERS 64
unsigned agg_threads_world(struct agg_carrier **out, unsigned cap);
extern unsigned agg_threads_carriers;
void agg_thread_finished(struct agg_carrier *c, struct agg_fiber *f);
void agg_interrupt(struct agg_fiber *f);
/* The live fiber whose vtid is `tid` (0: none), world_lock held until
 * agg_thread_let_go in either case; its name set as the kernel's comm file
 * sets a thread's (with world_lock held). */
struct agg_fiber *agg_thread_hold(long tid);
void agg_thread_let_go(void);
void agg_thread_rename(struct agg_fiber *t, const char name[16]);

/* agg_names.c: another thread's name file (/proc/self/task/VTID/comm) */
extern int agg_name_files;
int agg_name_file_io(struct ferry_regs *r);
void agg_name_file_closed(long fd);

/* agg_exit.c */
int agg_exiting(void);
void agg_exit_stop(struct agg_carrier *c) __attribute__((noreturn));

/* agg_signal.c: the engine's own signal (SIGRTMAX), hidden from the program */
#define AGG_SIGNAL 64
extern int agg_signal_owned;
extern int agg_program_handlers;   /* the program set a handler of its own */
int agg_signal_start(void);
int agg_signal_action(int sig, struct ferry_ksigaction *act);
void agg_tick_create(struct agg_carrier *c);
void agg_tick_update(struct agg_carrier *c);
void agg_tick_delete(struct agg_carrier *c);
void agg_tick_forget(void);
/* a worker's thread block says so (its TCB's word 8, unused by glibc's) */
#define AGG_WORKER_MAGIC_AT 8
#define AGG_WORKER_MAGIC 0x666572727977726bUL
void agg_worker_cancel(struct agg_req *req);
void agg_signal_kick(struct agg_carrier *c);
void agg_worker_signals(void);
/* agg_cancel.S: a worker's call that a signal for its fiber can cut short */
long ferry_cp_call(int *cancel, const long *call);

/* agg_stats.c */
void agg_stats_group(struct ferry_group *g);
void agg_stat(struct ferry_group *g, size_t field, uint64_t n);
void agg_stat_pool(struct ferry_group *g, unsigned pool, size_t field, uint64_t n);
void agg_stat_max_depth(struct ferry_group *g, unsigned pool, uint64_t depth);
void agg_stat_batch(struct ferry_group *g, unsigned pool, unsigned n);
int agg_stat_carrier_slot(void);
void agg_stat_carrier(struct agg_carrier *c, uint64_t fibers, uint64_t switches, uint64_t crossings,
                      uint64_t completed);
void agg_stat_carrier_peak(struct agg_carrier *c);
#define AGG_ST(name) __builtin_offsetof(struct agg_counters, name)
#define AGG_PST(name) __builtin_offsetof(struct agg_counters, pools[0].name)

/* small helpers */
/* Held for a few instructions, but its holder may lose its CPU (carriers
 * sharing one): after a short spin the waiter gives its CPU away. */
static inline void agg_lock(int *l)
{
    for (unsigned spins = 0; __atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE); spins++) {
        if (spins < 64)
            __asm__ volatile("pause");
        else
            ferry_raw0(24 /* SYS_sched_yield */);
    }
}
static inline void agg_unlock(int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }


/* ---- credentials (agg_creds.c) ---- */
extern uint32_t agg_creds_gen;
void agg_creds_watch(void);
void agg_creds_follow_slow(uint32_t *seen);
extern uint32_t agg_creds_taken;
/* The carrier cannot end the process (strict mode): a worker does (agg_workers_poll). */
void agg_workers_end_process(int code);
/* agg_sched.c: a program's filters refuse the engine its rings (sandbox.h) */
int agg_ring_refused(void);
void agg_workers_take_on_creds(uint32_t gen);
void agg_workers_after_fork(void);
void agg_creds_after_fork(void);
/* Before an engine thread runs a call of the program's: the credentials
 * the program changed to since, if it did. */
static inline void agg_creds_follow(uint32_t *seen)
{
    if (__builtin_expect(__atomic_load_n(&agg_creds_gen, __ATOMIC_ACQUIRE) != *seen, 0))
        agg_creds_follow_slow(seen);
}

#endif
