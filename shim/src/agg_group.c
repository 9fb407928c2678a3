/* Groups and their pools: each pool is an io_uring instance with its
 * settings (io-wq worker limits and affinity, an optional SQPOLL thread
 * pinned to a core); what the kernel supports is probed once per group. */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

/* Kernel ABI values liburing 2.3's headers may lack. */
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif

/* ---- the engine's descriptors stay out of the program's way -------------- */

#define FD_ROOM 32       /* below the top of the region they go to */
#define FD_REGION 4096   /* ... which ends at the soft limit, or here */
#define USE_REGISTERED_RING_ (1U << 31)

/* A program finds its descriptors at the lowest free numbers (stdout closed:
 * its next open is fd 1) and hands ranges of them to children: one of the
 * engine's goes high, close-on-exec.  Where that fails it stays. */
static long region_start(void)
{
    struct {
        uint64_t cur, max;
    } lim;
    if (ferry_raw4(SYS_prlimit64, 0, 7 /* RLIMIT_NOFILE */, 0, &lim) != 0)
        return -1;
    uint64_t top = lim.cur < FD_REGION ? lim.cur : FD_REGION;
    return top <= FD_ROOM + 3 ? -1 : (long)(top - FD_ROOM);
}

int agg_fd_high(int fd)
{
    long start = region_start();
    if (fd < 0 || start < 0 || fd >= start)
        return fd;
    long n = ferry_raw3(SYS_fcntl, fd, 1030 /* F_DUPFD_CLOEXEC */, start);
    if (n < 0)
        return fd;
    ferry_raw1(SYS_close, fd);
    return (int)n;
}

/* The rings that keep a descriptor (a group's pools: raw batches come from
 * any thread, which a ring registered with one thread cannot serve) sit high
 * and close-on-exec, and the program's own descriptor calls go round them: a
 * dup2 onto one moves the ring away first, a close of one says EBADF (the
 * program never opened it), a close_range closes everything else. */
#define KEPT_MAX 32
static struct io_uring *kept[KEPT_MAX];
/* in .data: a fork child reads it (a page of .bss its parent never touched
 * is a fault to read) */
static int kept_lock FERRY_HOT;
static int kept_n FERRY_HOT;  /* entries that may be in use (atomic): 0, nothing to guard */

static const unsigned short guarded[] = {SYS_close, SYS_dup2, SYS_dup3, SYS_close_range};

static void ring_keep(struct io_uring *ring)
{
    ring->ring_fd = ring->enter_ring_fd = agg_fd_high(ring->ring_fd);
    agg_lock(&kept_lock);
    for (int i = 0; i < KEPT_MAX; i++)
        if (!kept[i]) {
            kept[i] = ring;
            if (i >= kept_n)
                __atomic_store_n(&kept_n, i + 1, __ATOMIC_RELEASE);
            break;
        }
    agg_unlock(&kept_lock);
    for (unsigned i = 0; i < sizeof(guarded) / sizeof(guarded[0]); i++)
        __atomic_store_n(&ferry_action[guarded[i]], 1, __ATOMIC_RELAXED);
}

static void ring_release(struct io_uring *ring)
{
    agg_lock(&kept_lock);
    for (int i = 0; i < KEPT_MAX; i++)
        if (kept[i] == ring)
            kept[i] = 0;
    agg_unlock(&kept_lock);
}

/* The kept ring whose descriptor is fd, or NULL (under kept_lock). */
static struct io_uring *kept_ring(long fd)
{
    int n = __atomic_load_n(&kept_n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (kept[i] && kept[i]->ring_fd == fd && fd >= 0)
            return kept[i];
    return 0;
}

/* The program is about to put a descriptor of its own at fd: the ring there
 * moves to another high number (the program's call replaces the old one). */
static void ring_move(struct io_uring *ring)
{
    int fd = ring->ring_fd;
    long start = region_start();
    long n = start < 0 ? -1 : ferry_raw3(SYS_fcntl, fd, 1030 /* F_DUPFD_CLOEXEC */, start);
    if (n < 0)
        n = ferry_raw3(SYS_fcntl, fd, 1030, fd + 1);
    if (n >= 0)
        ring->ring_fd = ring->enter_ring_fd = (int)n;
}

/* close_range over [first, last] except the kept rings' descriptors. */
static long close_around(unsigned first, unsigned last, unsigned flags)
{
    if (flags & CLOSE_RANGE_UNSHARE_) {
        long r = ferry_pass6(SYS_unshare, 0x400 /* CLONE_FILES */, 0, 0, 0, 0, 0);
        if (r < 0)
            return r;
        flags &= ~CLOSE_RANGE_UNSHARE_;
    }
    unsigned from = first;
    for (;;) {
        /* the lowest kept descriptor in [from, last] */
        long next = -1;
        for (int i = 0; i < KEPT_MAX; i++) {
            long fd = kept[i] ? kept[i]->ring_fd : -1;
            if (fd >= (long)from && fd <= (long)last && (next < 0 || fd < next))
                next = fd;
        }
        unsigned end = next < 0 ? last : (unsigned)next - 1;
        if (next != (long)from) {
            long r = ferry_pass6(SYS_close_range, from, end, flags, 0, 0, 0);
            if (r < 0)
                return r;
        }
        if (next < 0 || (unsigned long)next >= last)
            return 0;
        from = (unsigned)next + 1;
    }
}

/* A fork child has only the forking thread: a lock another thread held
 * stays held for good.  Stored only when held: a store is a copy of its page
 * (a fault) in every fork child. */
FERRY_HOT_TEXT void agg_fd_guard_after_fork(void)
{
    if (__atomic_load_n(&kept_lock, __ATOMIC_RELAXED))
        __atomic_store_n(&kept_lock, 0, __ATOMIC_RELAXED);
}

FERRY_HOT_TEXT int agg_fd_guard(struct ferry_regs *r)
{
    long nr = r->rax;
    if ((nr != SYS_close && nr != SYS_dup2 && nr != SYS_dup3 && nr != SYS_close_range) ||
        !__atomic_load_n(&kept_n, __ATOMIC_ACQUIRE))
        return 0;
    int done = 0;
    agg_lock(&kept_lock);
    if (nr == SYS_close && kept_ring(r->rdi)) {
        r->rax = -EBADF;  /* not a descriptor of the program's */
        done = 1;
    } else if ((nr == SYS_dup2 || nr == SYS_dup3) && kept_ring(r->rdi)) {
        r->rax = -EBADF;
        done = 1;
    } else if (nr == SYS_dup2 || nr == SYS_dup3) {
        struct io_uring *ring = kept_ring(r->rsi);
        if (ring && r->rdi != r->rsi)
            ring_move(ring);
    } else if (nr == SYS_close_range && (unsigned)r->rdi <= (unsigned)r->rsi &&
               !(r->rdx & ~(long)(CLOSE_RANGE_UNSHARE_ | CLOSE_RANGE_CLOEXEC_))) {
        r->rax = close_around((unsigned)r->rdi, (unsigned)r->rsi, (unsigned)r->rdx);
        agg_fds_forget((unsigned)r->rdi, (unsigned)r->rsi, (unsigned)r->rdx);
        done = 1;
    }
    agg_unlock(&kept_lock);
    return done;
}

/* A carrier's ring is entered only by its own thread: registered with that
 * thread (IORING_ENTER_REGISTERED_RING), it needs no descriptor at all, so
 * none is left for the program to close, dup over or pass on.  Call once
 * every registration that needs the descriptor is done. */
void agg_ring_hide(struct io_uring *ring)
{
    if (io_uring_register_ring_fd(ring) == 1) {
        ferry_raw1(SYS_close, ring->ring_fd);
        ring->ring_fd = -1;
    } else {
        ring_keep(ring);
    }
}

/* io_uring_register on `ring`: by its descriptor, or once hidden by its
 * registered index, which names it on the registering thread only. */
long agg_ring_register(struct io_uring *ring, unsigned op, void *arg, unsigned n)
{
    if (ring->ring_fd >= 0)
        return ferry_raw4(SYS_io_uring_register, ring->ring_fd, op, arg, n);
    if (ring->int_flags & INT_FLAG_REG_RING_)
        return ferry_raw4(SYS_io_uring_register, ring->enter_ring_fd, op | USE_REGISTERED_RING_, arg, n);
    return -EBADF;
}

/* `own`: on the thread that registered it (not a fork child's copy). */
void agg_ring_exit(struct io_uring *ring, int own)
{
    ring_release(ring);
    if (ring->ring_fd < 0 && (ring->int_flags & INT_FLAG_REG_RING_)) {
        if (own) {
            struct io_uring_rsrc_update up = {.offset = (unsigned)ring->enter_ring_fd};
            agg_ring_register(ring, IORING_UNREGISTER_RING_FDS, &up, 1);
        }
        ring->int_flags &= ~INT_FLAG_REG_RING_;
    }
    io_uring_queue_exit(ring);
}

void agg_group_probe(struct ferry_group *g, struct io_uring *ring)
{
    if (g->probed)
        return;
    /* The probe answer has one entry per opcode the kernel knows; ask for
     * room beyond liburing's own list so newer opcodes are seen too. */
    struct {
        struct io_uring_probe p;
        struct io_uring_probe_op ops[256];
    } buf;
    ferry_memset(&buf, 0, sizeof(buf));
    int r = io_uring_register_probe(ring, &buf.p, 256);
    if (r < 0)
        return;
    for (unsigned i = 0; i < buf.p.ops_len && i < AGG_OP_MAX; i++)
        if (buf.ops[i].flags & IO_URING_OP_SUPPORTED)
            g->op_ok[buf.ops[i].op < AGG_OP_MAX ? buf.ops[i].op : 0] = 1;
    g->probed = 1;
}

int agg_ring_init(struct ferry_group *g, unsigned pool, struct io_uring *ring, int attach_fd)
{
    const struct ferry_pool_config *pc = &g->cfg.pools[pool];
    unsigned entries = pc->entries ? pc->entries : 256;
    struct io_uring_params p;
    ferry_memset(&p, 0, sizeof(p));
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    if (pc->sqpoll_cpu >= 0) {
        p.flags |= IORING_SETUP_SQPOLL | IORING_SETUP_SQ_AFF;
        p.sq_thread_cpu = (unsigned)pc->sqpoll_cpu;
        p.sq_thread_idle = 50;  /* ms: the thread sleeps after this much idleness */
    } else {
        p.flags |= IORING_SETUP_COOP_TASKRUN;
    }
    if (attach_fd >= 0) {
        /* carriers share the pool's SQPOLL thread */
        p.flags |= IORING_SETUP_ATTACH_WQ;
        p.wq_fd = (unsigned)attach_fd;
    }
    int r = io_uring_queue_init_params(entries, ring, &p);
    if (r == -EINVAL && (p.flags & IORING_SETUP_COOP_TASKRUN)) {
        unsigned flags = p.flags & ~IORING_SETUP_COOP_TASKRUN;
        ferry_memset(&p, 0, sizeof(p));
        p.flags = flags;
        p.cq_entries = entries * 4;
        p.wq_fd = attach_fd >= 0 ? (unsigned)attach_fd : 0;
        r = io_uring_queue_init_params(entries, ring, &p);
    }
    if (r < 0)
        return r;
    g->ext_arg = !!(p.features & IORING_FEAT_EXT_ARG);
    if (pc->concurrency) {
        unsigned v[2] = {pc->concurrency, pc->concurrency};  /* bounded, unbounded */
        io_uring_register_iowq_max_workers(ring, v);
    }
    if (pc->cpus) {
        uint64_t mask[16];
        ferry_memset(mask, 0, sizeof(mask));
        mask[0] = pc->cpus;
        r = io_uring_register_iowq_aff(ring, sizeof(mask), (void *)mask);
        if (r < 0) {
            io_uring_queue_exit(ring);
            return r;
        }
    }
    return 0;
}

__attribute__((visibility("default"))) int ferry_group_create(struct ferry_group **out,
                                                              const struct ferry_group_config *cfg)
{
    return agg_group_create(out, cfg, 1);
}

/* A ring closed makes the kernel interrupt its creator's next wait: the
 * blocking call that thread makes next, once the ring's exit work has run
 * (a kernel worker, some ms later), ends with EINTR though no signal came,
 * and one that is not restarted (epoll_wait, poll, select...) says so to
 * its caller.  The fibers profile made the pools' rings and closed them at
 * once (its carriers have rings of their own), and every process it
 * enabled saw its first such wait fail: nginx's workers logged it.  So
 * those rings are not made at all. */
int agg_group_create(struct ferry_group **out, const struct ferry_group_config *cfg, int pool_rings)
{
    if (!out)
        return -EINVAL;
    int r = agg_config_validate(cfg);
    if (r)
        return r;
    struct ferry_group *g = agg_calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    ferry_memcpy(&g->cfg, cfg, sizeof(*cfg));
    if (!g->cfg.workers)
        g->cfg.workers = 4;
    if (!g->cfg.fiber_stack)
        g->cfg.fiber_stack = 256 * 1024;
    for (unsigned i = 0; i < cfg->npools; i++) {
        g->pools[i].cfg = cfg->pools[i];
        if (!pool_rings && cfg->pools[i].sqpoll_cpu < 0)
            continue;  /* the carriers' rings serve the pool, and probe */
        r = agg_ring_init(g, i, &g->pools[i].ring, -1);
        if (r < 0)
            goto fail;
        /* raw batches come from any thread: this one keeps a descriptor */
        ring_keep(&g->pools[i].ring);
        g->pools[i].up = 1;
        agg_group_probe(g, &g->pools[i].ring);
    }
    r = agg_workers_start(g);
    if (r < 0)
        goto fail;
    /* Calls a fiber may route must reach ferry_slow; setsockopt too, so the
     * engine sees sockets given a receive or send timeout. */
    for (int nr = 0; nr < FERRY_NR_MAX; nr++)
        if (g->cfg.route[nr] != FERRY_ROUTE_NATIVE)
            __atomic_store_n(&ferry_action[nr], 1, __ATOMIC_RELAXED);
    agg_route_watch();
    agg_stats_group(g);
    *out = g;
    return 0;
fail:
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (g->pools[i].up)
            agg_ring_exit(&g->pools[i].ring, 1);
    agg_free(g);
    return r;
}

__attribute__((visibility("default"))) int ferry_group_destroy(struct ferry_group *g)
{
    if (!g)
        return -EINVAL;
    if (__atomic_load_n(&g->carriers, __ATOMIC_ACQUIRE))
        return -EBUSY;
    agg_workers_stop(g);
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (g->pools[i].up)
            agg_ring_exit(&g->pools[i].ring, 1);
    agg_free(g);
    return 0;
}

/* In a fork child: the pools' rings and SQPOLL threads are the parent's,
 * and the worker threads did not come along; the child makes a new group. */
void agg_group_forget(struct ferry_group *g)
{
    for (unsigned i = 0; i < FERRY_MAX_POOLS; i++)
        if (g->pools[i].up)
            agg_ring_exit(&g->pools[i].ring, 0);
}
