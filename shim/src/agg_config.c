/* Group configurations: the default routing table, validation, and the
 * profile's settings (FERRY_AGG, format in docs/aggregate.md). */
#define _GNU_SOURCE
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "sandbox.h"
#include "util.h"

struct ferry_group_config agg_profile;
int agg_profile_set;

/* Calls that must run on the calling thread, in its own context: thread and
 * process life, signals, memory map, the thread's own registers and state. */
static const unsigned short must_native[] = {
    SYS_clone, SYS_clone3, SYS_fork, SYS_vfork, SYS_exit, SYS_exit_group, SYS_execve,
    SYS_execveat, SYS_rt_sigreturn, SYS_rt_sigprocmask, SYS_rt_sigaction, SYS_sigaltstack,
    SYS_rt_sigsuspend, SYS_rt_sigtimedwait, SYS_rt_sigpending, SYS_pause, SYS_arch_prctl,
    SYS_prctl, SYS_mmap, SYS_munmap, SYS_mprotect, SYS_mremap, SYS_brk, SYS_madvise,
    SYS_set_tid_address, SYS_set_robust_list, SYS_rseq, SYS_gettid, SYS_getpid,
    SYS_unshare, SYS_setns, SYS_seccomp, SYS_ptrace, SYS_io_uring_setup, SYS_io_uring_enter,
    SYS_io_uring_register, SYS_sched_setaffinity, SYS_sched_getaffinity, SYS_setitimer,
    SYS_alarm, SYS_capset, SYS_setuid, SYS_setgid, SYS_setresuid, SYS_setresgid,
    SYS_setreuid, SYS_setregid, SYS_setgroups, SYS_chdir, SYS_fchdir, SYS_umask,
};

int agg_must_native(long nr)
{
    for (unsigned i = 0; i < sizeof(must_native) / sizeof(must_native[0]); i++)
        if (must_native[i] == nr)
            return 1;
    return 0;
}

/* What io_uring runs with the synchronous call's semantics (pool 0), and the
 * blocking calls it cannot run (workers).  Everything else is native.
 * Calls routed to a pool whose operation the kernel lacks, or whose
 * arguments ask for something the operation does not do, go to a worker
 * or run natively (agg_route.c decides per call). */
static const unsigned short to_pool[] = {
    SYS_read, SYS_write, SYS_pread64, SYS_pwrite64, SYS_readv, SYS_writev, SYS_preadv,
    SYS_pwritev, SYS_preadv2, SYS_pwritev2, SYS_open, SYS_openat, SYS_creat, SYS_close,
    SYS_statx, SYS_fstat, SYS_newfstatat, SYS_fsync, SYS_fdatasync, SYS_accept, SYS_accept4, SYS_connect, SYS_recvfrom,
    SYS_sendto, SYS_recvmsg, SYS_sendmsg, SYS_shutdown, SYS_socket, SYS_unlinkat, SYS_unlink,
    SYS_rmdir, SYS_renameat, SYS_renameat2, SYS_rename, SYS_mkdirat, SYS_mkdir, SYS_symlinkat,
    SYS_symlink, SYS_linkat, SYS_link, SYS_nanosleep, SYS_clock_nanosleep, SYS_poll,
    SYS_sched_yield, SYS_fallocate, SYS_ftruncate, SYS_bind, SYS_listen, SYS_sync_file_range,
    SYS_epoll_wait, SYS_epoll_pwait, SYS_epoll_pwait2,  /* a worker's where the kernel lacks the op */
};
static const unsigned short to_worker[] = {
    SYS_flock, SYS_getdents64, SYS_getdents, SYS_wait4, SYS_waitid, SYS_select, SYS_pselect6,
    SYS_ppoll, SYS_sendfile,
    SYS_copy_file_range, SYS_splice, SYS_tee, SYS_sync, SYS_syncfs, SYS_msync, SYS_truncate,
    SYS_recvmmsg, SYS_sendmmsg, SYS_msgrcv, SYS_msgsnd, SYS_semop, SYS_semtimedop,
    SYS_mq_timedreceive, SYS_mq_timedsend, SYS_futex, SYS_open_by_handle_at,
};

void agg_config_defaults(struct ferry_group_config *cfg)
{
    ferry_memset(cfg, 0, sizeof(*cfg));
    cfg->npools = 1;
    cfg->pools[0] = (struct ferry_pool_config){.entries = 256, .sqpoll_cpu = -1,
                                               .wait = FERRY_WAIT_ADAPTIVE};
    cfg->workers = 4;
    cfg->fiber_stack = 256 * 1024;
    ferry_memset(cfg->route, FERRY_ROUTE_NATIVE, sizeof(cfg->route));
    for (unsigned i = 0; i < sizeof(to_pool) / sizeof(to_pool[0]); i++)
        cfg->route[to_pool[i]] = 0;
    for (unsigned i = 0; i < sizeof(to_worker) / sizeof(to_worker[0]); i++)
        cfg->route[to_worker[i]] = FERRY_ROUTE_WORKER;
}

/* One more than the highest CPU online: /sys says it for the machine (the
 * calling thread may be pinned to fewer); the affinity mask is the fallback. */
unsigned agg_online_cpus(void)
{
    char buf[256];
    long fd = ferry_raw4(SYS_openat, -100, "/sys/devices/system/cpu/online", 0, 0);
    if (fd >= 0) {
        long n = ferry_raw3(SYS_read, fd, buf, sizeof(buf) - 1);
        ferry_raw1(SYS_close, fd);
        unsigned hi = 0, v = 0;
        int any = 0;
        for (long i = 0; i < n; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                v = v * 10 + (unsigned)(buf[i] - '0');
                any = 1;
            } else {
                if (any && v + 1 > hi)
                    hi = v + 1;
                v = 0;
                any = 0;
            }
        }
        if (any && v + 1 > hi)
            hi = v + 1;
        if (hi)
            return hi;
    }
    unsigned char mask[128];
    long n = ferry_raw3(SYS_sched_getaffinity, 0, sizeof(mask), mask);
    unsigned hi = 0;
    for (long i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            if (mask[i] & (1 << b))
                hi = (unsigned)(i * 8 + b + 1);
    return hi ? hi : 1;
}

int agg_config_validate(const struct ferry_group_config *cfg)
{
    if (!cfg || cfg->npools == 0 || cfg->npools > FERRY_MAX_POOLS)
        return -EINVAL;
    unsigned ncpu = agg_online_cpus();
    for (unsigned i = 0; i < cfg->npools; i++) {
        const struct ferry_pool_config *p = &cfg->pools[i];
        if (p->entries && ((p->entries & (p->entries - 1)) || p->entries > 32768))
            return -EINVAL;
        if (p->concurrency > 4096)
            return -EINVAL;
        if (ncpu < 64 && (p->cpus >> ncpu))
            return -EINVAL;
        if (p->sqpoll_cpu < -1 || (p->sqpoll_cpu >= 0 && (unsigned)p->sqpoll_cpu >= ncpu))
            return -EINVAL;
        if (p->priority < -20 || p->priority > 19)
            return -EINVAL;
        if ((unsigned)p->wait > FERRY_WAIT_ADAPTIVE)
            return -EINVAL;
        if (p->wait == FERRY_WAIT_SOME && (p->wait_limit == 0 || p->wait_timeout_ns == 0))
            return -EINVAL;
        if (p->wait_limit > (p->entries ? p->entries : 256) * 2)
            return -EINVAL;
    }
    for (long nr = 0; nr < FERRY_NR_MAX; nr++) {
        unsigned t = cfg->route[nr];
        if (t == FERRY_ROUTE_NATIVE)
            continue;
        if (t != FERRY_ROUTE_WORKER && t >= cfg->npools)
            return -EINVAL;
        if (agg_must_native(nr))
            return -EINVAL;
    }
    if (cfg->workers > 256)
        return -EINVAL;
    if (cfg->fiber_stack && (cfg->fiber_stack < 16384 || cfg->fiber_stack > (1UL << 30)))
        return -EINVAL;
    return 0;
}

/* ---- FERRY_AGG ---------------------------------------------------------- */

static int num(const char **p, long *out, int base)
{
    const char *s = *p;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (base == 16 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    long v = 0;
    int any = 0;
    for (;; s++) {
        int d;
        if (*s >= '0' && *s <= '9')
            d = *s - '0';
        else if (base == 16 && *s >= 'a' && *s <= 'f')
            d = *s - 'a' + 10;
        else if (base == 16 && *s >= 'A' && *s <= 'F')
            d = *s - 'A' + 10;
        else
            break;
        if (v > (0x7fffffffffffffffL - d) / base)
            return -1;
        v = v * base + d;
        any = 1;
    }
    if (!any)
        return -1;
    *out = neg ? -v : v;
    *p = s;
    return 0;
}

static int word(const char **p, const char *w)
{
    size_t n = ferry_strlen(w);
    if (!ferry_memeq(*p, w, n))
        return 0;
    *p += n;
    return 1;
}

static int expect(const char **p, char c)
{
    if (**p != c)
        return -1;
    (*p)++;
    return 0;
}

static int parse_pool(const char **p, struct ferry_pool_config *pc, const char **why)
{
    long v[5];
    *why = "pool= needs entries,concurrency,cpus_hex,sqpoll_cpu,priority,wait,limit,timeout_ns";
    if (num(p, &v[0], 10) || expect(p, ',') || num(p, &v[1], 10) || expect(p, ',') ||
        num(p, &v[2], 16) || expect(p, ',') || num(p, &v[3], 10) || expect(p, ',') ||
        num(p, &v[4], 10) || expect(p, ','))
        return -1;
    if (v[0] < 0 || v[0] > 32768 || v[1] < 0 || v[1] > 4096 || v[3] < -1 || v[3] > 4096 ||
        v[4] < -20 || v[4] > 19)
        return -1;
    pc->entries = (unsigned)v[0];
    pc->concurrency = (unsigned)v[1];
    pc->cpus = (uint64_t)v[2];
    pc->sqpoll_cpu = (int)v[3];
    pc->priority = (int)v[4];
    if (word(p, "none"))
        pc->wait = FERRY_WAIT_NONE;
    else if (word(p, "any"))
        pc->wait = FERRY_WAIT_ANY;
    else if (word(p, "some"))
        pc->wait = FERRY_WAIT_SOME;
    else if (word(p, "all"))
        pc->wait = FERRY_WAIT_ALL;
    else if (word(p, "adaptive"))
        pc->wait = FERRY_WAIT_ADAPTIVE;
    else {
        *why = "pool= wait must be none, any, some, all or adaptive";
        return -1;
    }
    long lim, to;
    if (expect(p, ',') || num(p, &lim, 10) || expect(p, ',') || num(p, &to, 10) || lim < 0 ||
        lim > 65536 || to < 0)
        return -1;
    pc->wait_limit = (unsigned)lim;
    pc->wait_timeout_ns = (uint64_t)to;
    return 0;
}

static int parse_routes(const char **p, struct ferry_group_config *cfg, const char **why)
{
    *why = "route= needs nr:target pairs (target 0..7, n or w)";
    for (;;) {
        long nr;
        if (num(p, &nr, 10) || nr < 0 || nr >= FERRY_NR_MAX || expect(p, ':'))
            return -1;
        if (**p == 'n')
            cfg->route[nr] = FERRY_ROUTE_NATIVE, (*p)++;
        else if (**p == 'w')
            cfg->route[nr] = FERRY_ROUTE_WORKER, (*p)++;
        else if (**p >= '0' && **p <= '7')
            cfg->route[nr] = (unsigned char)(**p - '0'), (*p)++;
        else
            return -1;
        if (**p != ',')
            return 0;
        (*p)++;
    }
}

int agg_config_parse(const char *s, struct ferry_group_config *cfg, const char **why)
{
    agg_config_defaults(cfg);
    unsigned npools = 0;
    const char *p = s;
    while (*p) {
        long v;
        if (word(&p, "workers=")) {
            *why = "workers= needs a number";
            if (num(&p, &v, 10) || v < 0 || v > 256)
                return -EINVAL;
            cfg->workers = (unsigned)v;
        } else if (word(&p, "stack=")) {
            *why = "stack= needs a byte count";
            if (num(&p, &v, 10) || v < 0)
                return -EINVAL;
            cfg->fiber_stack = (size_t)v;
        } else if (word(&p, "quiet=")) {
            *why = "quiet= is direct or ring";
            if (word(&p, "direct"))
                cfg->quiet = FERRY_QUIET_DIRECT;
            else if (word(&p, "ring"))
                cfg->quiet = FERRY_QUIET_RING;
            else
                return -EINVAL;
        } else if (word(&p, "threads=")) {
            *why = "threads= is fibers or native";
            if (word(&p, "fibers"))
                agg_threads_on = 1;
            else if (word(&p, "native"))
                agg_threads_on = 0;
            else
                return -EINVAL;
        } else if (word(&p, "carriers=")) {
            *why = "carriers= needs a number from 1 to 64";
            if (num(&p, &v, 10) || v < 1 || v > 64)
                return -EINVAL;
            agg_threads_carriers = (unsigned)v;
        } else if (word(&p, "pool=")) {
            if (npools >= FERRY_MAX_POOLS) {
                *why = "more than 8 pools";
                return -EINVAL;
            }
            if (parse_pool(&p, &cfg->pools[npools], why))
                return -EINVAL;
            npools++;
        } else if (word(&p, "route=")) {
            if (parse_routes(&p, cfg, why))
                return -EINVAL;
        } else {
            *why = "unknown item";
            return -EINVAL;
        }
        if (*p == ';')
            p++;
        else if (*p) {
            *why = "items are separated by ';'";
            return -EINVAL;
        }
    }
    if (npools)
        cfg->npools = npools;
    *why = "invalid settings (a route names a missing pool or a call that must stay native, "
           "or a pool setting is out of range)";
    return agg_config_validate(cfg);
}

/* Called by configure() in aggregate mode; on a bad FERRY_AGG the process
 * runs in count mode with one line on stderr. */
int ferry_agg_configure(char **envp)
{
    ferry_sandbox_look_inherited();
    const char *s = ferry_env_lookup(envp, "FERRY_AGG");
    if (!s || !*s) {
        agg_config_defaults(&agg_profile);
        agg_profile_set = 1;
        return 0;
    }
    const char *why = "";
    if (agg_config_parse(s, &agg_profile, &why) == 0) {
        agg_profile_set = 1;
        return 0;
    }
    struct ferry_buf b;
    char line[512];
    b = (struct ferry_buf){line, 0, sizeof(line) - 1, 0};
    ferry_buf_str(&b, "ferry: FERRY_AGG is malformed (");
    ferry_buf_str(&b, why);
    ferry_buf_str(&b, "); running in count mode\n");
    ferry_raw3(SYS_write, 2, line, b.len);
    agg_config_defaults(&agg_profile);
    return -EINVAL;
}

__attribute__((visibility("default"))) int ferry_group_config_default(struct ferry_group_config *cfg,
                                                                      int from_profile)
{
    if (!cfg)
        return -EINVAL;
    if (from_profile && agg_profile_set)
        ferry_memcpy(cfg, &agg_profile, sizeof(*cfg));
    else
        agg_config_defaults(cfg);
    return 0;
}
