/* Worker threads: the calls io_uring cannot run with their synchronous
 * semantics (flock, wait4, getdents64, epoll_wait, ...) run here, each on a
 * helper thread that blocks in the call instead of the carrier.
 *
 * The threads are raw clones with their own stacks and a minimal thread
 * block: they run only shim code (their calls leave from the shim's text,
 * so they are never intercepted again) and block every signal but the
 * engine's own (agg_signal.c), so that no handler of the program ever runs
 * on a thread without a real glibc TLS.
 * A finished call goes onto its carrier's done list; an eventfd write wakes
 * the carrier, whose read of it sits in its ring with the other calls.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "store.h"
#include "thread.h"
#include "util.h"

#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129
#define FUTEX_WAIT 0
#define STACK_SIZE (128 * 1024)
#define PAGE 4096UL

long ferry_agg_clone(unsigned long flags, void *stack_top, int *ptid, int *ctid, unsigned long tls,
                     void (*fn)(void *), void *arg);

struct agg_worker_set {
    unsigned n;
    int lock;
    struct agg_req *head, *tail;
    uint32_t seq;
    int stop;
    unsigned long tls_below;  /* bytes of each thread's block below its pointer (tls_below) */
    size_t size;              /* each thread's mapping: that block, the TCB's page, the stack */
    struct {
        char *mem;      /* its thread block (TLS, then the TCB's page), then the stack */
        int tid;        /* cleared by the kernel when the thread is gone */
        uint32_t creds_seen;  /* agg_creds_gen its credentials are of */
        int in_call;    /* running a call (taken on what changed before it) */
    } t[256];
};

static void push_done(struct agg_carrier *c, struct agg_req *req)
{
    req->done_tsc = ferry_rdtsc();
    struct agg_req *old = __atomic_load_n(&c->done_list, __ATOMIC_RELAXED);
    do
        req->next = old;
    while (!__atomic_compare_exchange_n(&c->done_list, &old, req, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

/* Seccomp's strict mode on a carrier (sandbox.c) leaves it read, write,
 * exit and rt_sigreturn: it can neither wake a worker (futex) nor end the
 * process (exit_group).  The workers, whose calls no filter of the
 * carrier's binds, then look for work every 10 ms, and end the process
 * when the carrier asks (agg_workers_end_process). */
static int polling, ending, ending_code;

static void worker_main(void *arg)
{
    struct agg_worker_set *w = arg;
    int tid = (int)ferry_raw0(SYS_gettid);
    int open = 0;
    /* its entry: the kernel wrote its tid there before it ran (CLONE_PARENT_SETTID) */
    unsigned me = 0, slots = sizeof(w->t) / sizeof(w->t[0]);
    while (me < slots && __atomic_load_n(&w->t[me].tid, __ATOMIC_ACQUIRE) != tid)
        me++;
    uint32_t creds_seen = 0, *seen = me < slots ? &w->t[me].creds_seen : &creds_seen;
    for (;;) {
        uint32_t seq = __atomic_load_n(&w->seq, __ATOMIC_ACQUIRE);
        agg_lock(&w->lock);
        struct agg_req *req = w->head;
        if (req) {
            w->head = req->next;
            if (!w->head)
                w->tail = 0;
        }
        agg_unlock(&w->lock);
        if (!req) {
            if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
                return;
            agg_creds_follow(seen);  /* woken for it: agg_workers_take_on_creds */
            /* not put to the filters' copy: strict mode is the carrier's
             * alone, and no worker is made after it (clone is refused) */
            if (__atomic_load_n(&ending, __ATOMIC_ACQUIRE))
                ferry_pass6(SYS_exit_group, ending_code, 0, 0, 0, 0, 0);
            struct timespec poll = {0, 10000000};
            ferry_pass6(SYS_futex, (long)&w->seq, FUTEX_WAIT_PRIVATE, seq,
                        __atomic_load_n(&polling, __ATOMIC_ACQUIRE) ? (long)&poll : 0, 0, 0);
            continue;
        }
        if (!open && __atomic_load_n(&agg_signal_owned, __ATOMIC_ACQUIRE)) {
            agg_worker_signals();
            open = 1;
        }
        agg_creds_follow(seen);
        if (me < slots)
            __atomic_store_n(&w->t[me].in_call, 1, __ATOMIC_RELEASE);
        /* a signal for the fiber from here on reaches this thread */
        __atomic_store_n(&req->worker_tid, tid, __ATOMIC_SEQ_CST);
        req->result = ferry_cp_call(&req->cancel, &req->nr);
        __atomic_store_n(&req->worker_tid, -1, __ATOMIC_SEQ_CST);
        if (me < slots)
            __atomic_store_n(&w->t[me].in_call, 0, __ATOMIC_RELEASE);
        struct agg_carrier *c = req->carrier;
        push_done(c, req);  /* from here on req may be gone */
        agg_rouse(c);
    }
}

/* Every set's workers, for agg_workers_take_on_creds. */
static struct agg_worker_set *all_sets[64];
static int all_lock;

static void note_set(struct agg_worker_set *w, struct agg_worker_set *was)
{
    agg_lock(&all_lock);
    for (unsigned i = 0; i < sizeof(all_sets) / sizeof(all_sets[0]); i++)
        if (all_sets[i] == was) {
            all_sets[i] = w;
            break;
        }
    agg_unlock(&all_lock);
}

/* A fork child has none of them (only the thread that forked): waiting
 * for its parent's workers to take on its credentials spun for their
 * bounded while at every change.  Stored only when there is something to
 * forget: a store copies the page (a fault) in every fork child. */
void agg_workers_after_fork(void)
{
    if (__atomic_load_n(&all_lock, __ATOMIC_RELAXED))
        all_lock = 0;
    for (unsigned i = 0; i < sizeof(all_sets) / sizeof(all_sets[0]); i++)
        if (all_sets[i])
            all_sets[i] = 0;
}

static void rouse(struct agg_worker_set *w)
{
    __atomic_add_fetch(&w->seq, 1, __ATOMIC_RELEASE);
    ferry_raw6(SYS_futex, (long)&w->seq, FUTEX_WAKE_PRIVATE, 0x7fffffff, 0, 0, 0);
}

void agg_workers_poll(void)
{
    __atomic_store_n(&polling, 1, __ATOMIC_RELEASE);
    agg_lock(&all_lock);
    for (unsigned i = 0; i < sizeof(all_sets) / sizeof(all_sets[0]); i++)
        if (all_sets[i])
            rouse(all_sets[i]);  /* to wait again, with the timeout */
    agg_unlock(&all_lock);
}

void agg_workers_end_process(int code)
{
    ending_code = code;
    __atomic_store_n(&ending, 1, __ATOMIC_RELEASE);
}

static int took_on(struct agg_worker_set *w, uint32_t gen)
{
    for (unsigned i = 0; i < w->n; i++)
        if (__atomic_load_n(&w->t[i].tid, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(&w->t[i].creds_seen, __ATOMIC_ACQUIRE) != gen &&
            !__atomic_load_n(&w->t[i].in_call, __ATOMIC_ACQUIRE))
            return 0;
    return 1;
}

/* Idle workers take on the program's new credentials before the call that
 * changed them returns, as glibc's threads do (a worker in a call takes
 * them on before its next): woken for it and waited for, a bounded while.
 * Left for their next call, /proc showed them as root's tasks in a process
 * that had dropped root, until they woke. */
void agg_workers_take_on_creds(uint32_t gen)
{
    agg_lock(&all_lock);
    for (unsigned i = 0; i < sizeof(all_sets) / sizeof(all_sets[0]); i++)
        if (all_sets[i])
            rouse(all_sets[i]);
    /* each one that takes them on wakes this wait (agg_creds_follow_slow):
     * a loop of sched_yield took the CPUs of the 2-CPU machine from the
     * workers it waited for */
    struct timespec ms = {0, 1000000};
    for (unsigned i = 0; i < sizeof(all_sets) / sizeof(all_sets[0]); i++)
        for (int waits = 0; all_sets[i] && waits < 100; waits++) {
            uint32_t taken = __atomic_load_n(&agg_creds_taken, __ATOMIC_ACQUIRE);
            if (took_on(all_sets[i], gen))
                break;
            ferry_raw4(SYS_futex, &agg_creds_taken, FUTEX_WAIT_PRIVATE, taken, &ms);
        }
    agg_unlock(&all_lock);
}

/* The bytes a worker's thread block needs below its thread pointer: down
 * to the shim's own TLS block, which the shim's code reads (FERRY_THR), at
 * the same offset from the thread pointer in every thread.  It lies below
 * the program's TLS blocks and those of the libraries loaded before the
 * shim: 4 KiB was taken for granted, and haproxy's TLS alone is larger, so
 * its workers read and tallied into memory below their mapping (SIGSEGV
 * as the first worker started).  Zeroed by mmap: the worker's FERRY_THR
 * holds nothing, and it tallies into the process's count. */
static unsigned long tls_below(void)
{
    unsigned long below = ferry_tp() - (unsigned long)&ferry_thr;
    return (below + 64 + PAGE - 1) & ~(PAGE - 1);
}

int agg_workers_start(struct ferry_group *g)
{
    struct agg_worker_set *w = agg_calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    g->workers = w;
    uint64_t all = ~0ULL, old;
    ferry_raw4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, &all, &old, 8);
    int r = 0;
    w->tls_below = tls_below();
    size_t size = w->size = w->tls_below + PAGE + STACK_SIZE;
    for (unsigned i = 0; i < g->cfg.workers; i++) {
        long p = ferry_raw6(SYS_mmap, 0, size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if ((unsigned long)p > -4096UL) {
            r = (int)p;
            break;
        }
        char *mem = (char *)p;
        /* a thread pointer whose header points at itself, as the ABI wants */
        unsigned long tp = (unsigned long)mem + w->tls_below;
        ((unsigned long *)tp)[0] = tp;
        ((unsigned long *)tp)[2] = tp;
        ((unsigned long *)tp)[AGG_WORKER_MAGIC_AT] = AGG_WORKER_MAGIC;
        w->t[i].mem = mem;
        long tid = ferry_agg_clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                                       CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                                       CLONE_CHILD_CLEARTID,
                                   mem + size, &w->t[i].tid, &w->t[i].tid, tp, worker_main, w);
        if (tid < 0) {
            ferry_raw2(SYS_munmap, mem, size);
            w->t[i].mem = 0;
            r = (int)tid;
            break;
        }
        w->n++;
    }
    ferry_raw4(SYS_rt_sigprocmask, 2, &old, 0, 8);
    if (r < 0 && w->n == 0 && g->cfg.workers) {
        agg_free(w);
        g->workers = 0;
        return r;
    }
    note_set(w, 0);
    return 0;
}

void agg_workers_stop(struct ferry_group *g)
{
    struct agg_worker_set *w = g->workers;
    if (!w)
        return;
    note_set(0, w);
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
    rouse(w);
    for (unsigned i = 0; i < w->n; i++) {
        int tid;
        while ((tid = __atomic_load_n(&w->t[i].tid, __ATOMIC_ACQUIRE)) != 0)
            ferry_raw6(SYS_futex, (long)&w->t[i].tid, FUTEX_WAIT, tid, 0, 0, 0);
        ferry_raw2(SYS_munmap, w->t[i].mem, w->size);
    }
    agg_free(w);
    g->workers = 0;
}

void agg_worker_queue(struct ferry_group *g, struct agg_req *req)
{
    struct agg_worker_set *w = g->workers;
    /* a signal for the fiber must be able to cut the call short */
    if (agg_threads_on)
        agg_signal_start();
    agg_stat(g, AGG_ST(worker), 1);
    agg_stat(g, AGG_ST(crossings), 1);
    if (!w || !w->n) {
        /* no workers: run it here, still with its exact result */
        const long *a = req->args;
        req->result = ferry_pass6(req->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        push_done(req->carrier, req);
        agg_rouse(req->carrier);
        return;
    }
    req->next = 0;
    agg_lock(&w->lock);
    if (w->tail)
        w->tail->next = req;
    else
        w->head = req;
    w->tail = req;
    agg_unlock(&w->lock);
    __atomic_add_fetch(&w->seq, 1, __ATOMIC_RELEASE);
    ferry_raw6(SYS_futex, (long)&w->seq, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

/* The carrier's side: the calls its workers finished. */
void agg_carrier_drain(struct agg_carrier *c)
{
    struct agg_req *req = __atomic_exchange_n(&c->done_list, 0, __ATOMIC_ACQUIRE);
    while (req) {
        struct agg_req *next = req->next;
        req->done = 1;
        c->worker_pending--;
        agg_wake(req->fiber);
        req = next;
    }
}
