/* Routing a fiber's call, and translating it to the io_uring operation
 * that has the synchronous call's semantics.
 *
 * A call goes to a pool only when the operation returns exactly what the
 * system call would; when the arguments ask for something the operation
 * does differently (pread at a negative offset is EINVAL, not "the file
 * position"; poll with a timeout; a socket with SO_RCVTIMEO, which
 * io_uring ignores), the call goes to a worker thread or runs natively.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "agg.h"
#include "raw.h"
#include "sandbox.h"
#include "util.h"

#define MAX_RW 0x7ffff000L          /* the kernel's MAX_RW_COUNT */
#define POLLOUT_ 0x004
#define POLLERR 0x008
#define POLLHUP 0x010
#define POLLNVAL 0x020
#define TIMER_ABSTIME 1
#define SOL_SOCKET 1
#define RWF_HIPRI_ 1
#define ERESTARTSYS_ 512             /* the kernel's own, never a call's result */
#define ERESTART_RESTARTBLOCK_ 516
#define TCGETS_ 0x5401
#define TIOCGPGRP_ 0x540f

/* What the engine knows of a descriptor: a socket given a receive (1) or
 * send (2) timeout by a fiber (io_uring ignores SO_RCVTIMEO/SO_SNDTIMEO),
 * and whether it is non-blocking (io_uring waits on an O_NONBLOCK pipe or
 * socket where read(2) says EAGAIN, so such calls run natively: they cannot
 * block anyway).  The blocking mode is read once with F_GETFL and kept
 * until a fiber's call may have changed it. */
#define FD_TIMEO_R 1
#define FD_TIMEO_W 2
#define FD_KNOWN 4
#define FD_NONBLOCK 8
#define FD_SOCKET 16      /* known with FD_KNOWN */
#define FD_REGULAR 32     /* known with FD_KNOWN */
#define FD_PROC 64        /* known with FD_KNOWN: a file of /proc */
#define FD_FLAGS 128      /* FD_NONBLOCK is known (from the call that made the descriptor) */
#define FD_READ_WORKER 256   /* known with FD_KNOWN: reads run on a worker (see odd_file) */
#define FD_WRITE_WORKER 512  /* known with FD_KNOWN: writes run on a worker */
#define FD_TTY 1024          /* known with FD_KNOWN: a terminal */
#define FD_DISK 2048         /* known with FD_KNOWN: a regular file of a block device's filesystem */
#define FD_SYNC 4096         /* O_DIRECT, O_SYNC or O_DSYNC (known with FD_FLAGS or FD_KNOWN):
                                its writes wait for the device */
#define FD_EVENTFD 8192      /* known with FD_KNOWN: an eventfd (see eventfd_room) */
#define FD_MEMORY 16384      /* known with FD_KNOWN: a regular file in memory (tmpfs, ramfs, memfd) */
#define SYNC_FLAGS (O_DIRECT | O_SYNC | O_DSYNC)
/* a struct stat's st_dev holds the kernel's new_encode_dev(): major in bits 8..19 */
#define DEV_MAJOR(dev) ((unsigned)((dev) >> 8 & 0xfff))
#define PROC_SUPER_MAGIC 0x9fa0
#define TMPFS_MAGIC 0x01021994
#define RAMFS_MAGIC 0x858458f6
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#define FD_MAX 65536
typedef uint16_t fd_bits;
static fd_bits fd_state[FD_MAX];

struct kiovec {
    const char *base;
    size_t len;
};
struct kmsghdr {
    void *name;
    uint32_t namelen;
    struct kiovec *iov;
    size_t iovlen;
    void *control;
    size_t controllen;
    int flags;
};

/* SQEs are written and copied a word at a time */
typedef uint64_t __attribute__((may_alias)) sqe_word;

static void rw(struct io_uring_sqe *sqe, int op, long fd, const void *addr, unsigned len, uint64_t off);
static void rw(struct io_uring_sqe *sqe, int op, long fd, const void *addr, unsigned len, uint64_t off)
{
    /* every word written once: a byte-wise memset would cost more than the rest */
    sqe_word *w = (sqe_word *)sqe;
    w[0] = (uint64_t)(uint8_t)op | ((uint64_t)(uint32_t)(int)fd << 32);
    w[1] = off;
    w[2] = (uint64_t)(uintptr_t)addr;
    w[3] = len;
    w[4] = w[5] = w[6] = w[7] = 0;
}
static unsigned clamp_len(long n) { return (unsigned long)n > MAX_RW ? (unsigned)MAX_RW : (unsigned)n; }

static int read_ts(struct __kernel_timespec *out, long p)
{
    if (agg_safe_read(out, (const void *)p, sizeof(*out)) != sizeof(*out))
        return -1;
    return (out->tv_sec < 0 || out->tv_nsec < 0 || out->tv_nsec >= 1000000000L) ? -1 : 0;
}

static uint16_t rw_prio(const struct ferry_group *g, unsigned pool)
{
    int p = g->cfg.pools[pool].priority;
    if (!p)
        return 0;
    return (uint16_t)((2 << 13) | ((p + 20) / 5));  /* IOPRIO_CLASS_BE, level 0..7 */
}

static int timeo(long fd, int dir)
{
    return fd >= 0 && fd < FD_MAX && (__atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED) & dir);
}

/* The engine's own question about a fiber's descriptor: a system call its
 * carrier makes, so a crossing like any other. */
static long ask6(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    /* the engine's question, not the program's call: a program that
     * confined its calls may kill for it (sandbox.h) */
    if (ferry_sandbox_on && !ferry_sandbox_lets(nr, a0, a1, a2, a3, a4, a5))
        return -EPERM;
    struct agg_fiber *f = agg_self;
    if (f && f->carrier)
        agg_stat(f->carrier->g, AGG_ST(crossings), 1);
    return ferry_pass6(nr, a0, a1, a2, a3, a4, a5);
}

static long ask(long nr, long fd, void *buf, long n) { return ask6(nr, fd, (long)buf, n, 0, 0, 0); }

/* io_uring reads a file that cannot say EAGAIN (no FMODE_NOWAIT) once it
 * polls readable.  That is the call's own meaning only where the read
 * waits for exactly that.  It is not so for a file without read at all (an
 * epoll or pid descriptor: read says EINVAL at once) nor for a terminal in
 * raw mode with VMIN 0 (read returns 0 at once, or when VTIME ends): the
 * call waited for a readiness that may never come, and hung.  Such calls
 * run on a worker, as the program's thread would run them.  So do those of
 * every anonymous inode whose calls have not been checked to wait as the
 * ring waits (a perf counter, an io_uring, a driver's), and every write but
 * an eventfd's.  Which anonymous inode a descriptor is, is the name its
 * /proc link gives; without /proc, it is one not checked. */
static fd_bits odd_file(long fd, unsigned mode)
{
    if (S_ISCHR(mode)) {
        char tio[60];  /* struct termios */
        return ask(SYS_ioctl, fd, (void *)TCGETS_, (long)tio) == 0 ? FD_TTY | FD_READ_WORKER : 0;
    }
    if (mode & S_IFMT)
        return 0;
    /* the kinds checked, and what of theirs still goes to a worker: an
     * eventfd's write that may wait (eventfd_room); the others' writes,
     * where they have one, were not checked */
    static const struct {
        const char *name;
        fd_bits st;
    } checked[] = {
        {"anon_inode:[eventfd]", FD_EVENTFD | FD_WRITE_WORKER},
        {"anon_inode:[timerfd]", FD_WRITE_WORKER},
        {"anon_inode:[signalfd]", FD_WRITE_WORKER},
        {"anon_inode:inotify", FD_WRITE_WORKER},
        {"anon_inode:[fanotify]", FD_WRITE_WORKER},
        {"anon_inode:[userfaultfd]", FD_WRITE_WORKER},
    };
    char path[32], name[64];
    struct ferry_buf b = {path, 0, sizeof(path) - 1, 0};
    ferry_buf_str(&b, "/proc/self/fd/");
    ferry_buf_u64(&b, (uint64_t)fd);
    path[b.len] = 0;
    long n = ask(SYS_readlink, (long)path, name, sizeof(name));  /* a path in fd's place */
    for (unsigned i = 0; i < sizeof(checked) / sizeof(checked[0]); i++)
        if (n > 0 && (size_t)n == ferry_strlen(checked[i].name) &&
            ferry_memeq(name, checked[i].name, (size_t)n))
            return checked[i].st;
    return FD_READ_WORKER | FD_WRITE_WORKER;
}

/* What the engine knows of fd, asked of the kernel the first time: its
 * blocking mode, kind and filesystem (0: out of range, or a descriptor the
 * kernel does not know). */
static fd_bits known(long fd)
{
    if (fd < 0 || fd >= FD_MAX)
        return 0;
    fd_bits st = __atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED);
    if (!(st & FD_KNOWN)) {
        long fl = (st & FD_NONBLOCK) ? O_NONBLOCK : 0;
        if (!(st & FD_FLAGS) && (fl = ask(SYS_fcntl, fd, (void *)F_GETFL, 0)) < 0)
            return 0;  /* EBADF and the like: the operation says it too */
        struct stat sb;
        int stat_ok = ask(SYS_fstat, fd, &sb, 0) == 0;
        int sock = stat_ok && S_ISSOCK(sb.st_mode);
        int reg = stat_ok && S_ISREG(sb.st_mode);
        /* /proc describes the thread that reads it: read on an io_uring
         * worker, or while the carrier waits with every signal blocked, it
         * would tell of them, not of the fiber's thread.  procfs has no
         * device (major 0), as tmpfs and overlayfs: only those are asked.
         * overlayfs keeps what is written on its upper layer, a local
         * disk's filesystem; NFS and FUSE (major 0 too) may wait on
         * another party. */
        long sfs[15];  /* struct statfs: f_type first */
        long fs = reg && DEV_MAJOR(sb.st_dev) == 0 && ask(SYS_fstatfs, fd, sfs, 0) == 0 ? sfs[0] : 0;
        int disk = reg && (DEV_MAJOR(sb.st_dev) != 0 || fs == OVERLAYFS_SUPER_MAGIC);
        st = FD_KNOWN | ((fl & O_NONBLOCK) ? FD_NONBLOCK : 0) | (sock ? FD_SOCKET : 0) |
             (reg ? FD_REGULAR : 0) | (fs == PROC_SUPER_MAGIC ? FD_PROC : 0) |
             (disk ? FD_DISK : 0) | (fs == TMPFS_MAGIC || fs == RAMFS_MAGIC ? FD_MEMORY : 0) |
             ((fl & SYNC_FLAGS) ? FD_SYNC : 0) | (stat_ok ? odd_file(fd, sb.st_mode) : 0);
        st = __atomic_or_fetch(&fd_state[fd], st, __ATOMIC_RELAXED);
    }
    return st;
}

static int nonblocking(long fd) { return !!(known(fd) & FD_NONBLOCK); }

static int blocking_socket(long fd)
{
    return (known(fd) & (FD_SOCKET | FD_NONBLOCK)) == FD_SOCKET && !timeo(fd, FD_TIMEO_W);
}

/* A terminal of which the process is in the background: reading it stops
 * the process (SIGTTIN), as may writing (SIGTTOU, with TOSTOP).  The kernel
 * sends these only to a thread that has them unblocked, and io_uring's
 * threads and the engine's workers block every signal: there the call
 * would fail EIO, or write, where natively the process stops. */
static int background_tty(long fd)
{
    int pgrp;
    return ask(SYS_ioctl, fd, (void *)TIOCGPGRP_, (long)&pgrp) == 0 &&
           pgrp != ask(SYS_getpgrp, 0, 0, 0);
}

/* The call may wait on fd: io_uring must wait as the call would. */
static enum agg_tr blocking_io(long fd, int dir)
{
    if (timeo(fd, dir))
        return AGG_TR_WORKER;
    fd_bits st = known(fd);
    if (st & (FD_NONBLOCK | FD_PROC))
        return AGG_TR_NATIVE;
    if ((st & FD_TTY) && background_tty(fd))
        return AGG_TR_NATIVE;
    if (st & (dir == FD_TIMEO_R ? FD_READ_WORKER : FD_WRITE_WORKER))
        return AGG_TR_WORKER;
    return AGG_TR_RING;
}

/* A small buffered write to a local file, or a small read of a file in
 * memory (after blocking_io, which learns the file): made natively, on the
 * carrier.  io_uring cannot make these without perhaps waiting (ext4 has
 * no RWF_NOWAIT for a buffered write; tmpfs and overlayfs none at all on
 * Linux 6.18), so it hands each to an io-wq thread, and queues one file's
 * writes behind each other there: 20-50 us a call, where copying a few KiB
 * to or from the page cache costs well under one.  nginx's access log
 * under -p fibers took 126 us a line.
 *   - A write of a regular file of a block device's filesystem (ext4, xfs),
 *     of overlayfs (whose upper layer is such a one) or of tmpfs, ramfs or
 *     a memfd, not O_DIRECT, O_SYNC or O_DSYNC (they wait for the device).
 *     Not NFS or FUSE, whose writes may wait on another party.
 *   - A read of a file in memory.  A local disk's file stays on the ring,
 *     which reads what is cached at once and waits for the rest.
 *   - At most 64 KiB: the kernel may pause a writer that dirties much, and
 *     the carrier's other fibers would wait with it. */
#define LOCAL_IO_MAX (64 * 1024)

static int local_io(long fd, long len, int write)
{
    if (fd < 0 || fd >= FD_MAX || (unsigned long)len > LOCAL_IO_MAX)
        return 0;
    fd_bits st = __atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED);
    return !(st & FD_SYNC) && (st & (write ? FD_DISK | FD_MEMORY : FD_MEMORY));
}

/* Whether n bytes at p lie in the calling fiber's live stack (between the
 * request, a local of the call's own frame, and the top of the stack that
 * frame is on): memory the engine can read, and write after the call,
 * without a fault.  Memory elsewhere (the heap, another thread's), or a
 * frame on a stack the engine does not know (the program's own makecontext
 * stacks, a thread made by clone(2), which gives no size), is not. */
static int on_live_stack(const struct agg_req *req, const void *p, size_t n)
{
    const struct agg_fiber *f = req->fiber;
    const char *b = p, *here = (const char *)req;
    if (!f || !f->stack_lo || here < f->stack_lo || here >= f->stack_top)
        return 0;
    return b >= here && b + n <= f->stack_top && b + n > b;
}

/* A call's argument in memory: read with a load where it lies on the live
 * stack, else by the kernel (which says so of a bad pointer: ~1.5 us). */
static long read_arg(const struct agg_req *req, void *dst, long src, size_t n)
{
    if (req && on_live_stack(req, (const void *)src, n)) {
        ferry_memcpy(dst, (const void *)src, n);
        return (long)n;
    }
    if (req && req->regs)
        return ferry_read_arg(req->regs, dst, (const void *)src, n);
    return agg_safe_read(dst, (const void *)src, n);
}

/* local_io of a vector of n entries at iov: summed from a copy, only for a
 * local file, and only up to 16 entries (a bad pointer: the ring says so). */
static int local_io_vector(const struct agg_req *req, long fd, long iov, long n, int write)
{
    struct kiovec v[16];
    if (!local_io(fd, 0, write) || n < 0 || n > 16 ||
        read_arg(req, v, iov, (size_t)n * sizeof(v[0])) != n * (long)sizeof(v[0]))
        return 0;
    long len = 0;
    for (long i = 0; i < n; i++) {
        if (v[i].len > LOCAL_IO_MAX)
            return 0;
        len += (long)v[i].len;
    }
    return local_io(fd, len, write);
}

/* A sendfile that cannot wait long: made natively, on the carrier, and not
 * handed to a worker and back (two thread wakes, 20 us, where sending a
 * page-cache page costs 1-2).  nginx with `aio threads` sends each file
 * from its thread pool so, and spent half its time under -p fibers in the
 * hand-over.  A sendfile waits only for room in its output and for its
 * input's pages.  Here the output is nonblocking (it says EAGAIN when
 * full), the input a regular file, and the range at most 64 KiB, every
 * page of which the page cache holds: a read of the range with RWF_NOWAIT
 * (into one page of the carrier's, again and again) goes through whole.  The
 * read is the check cachestat(2) would be, but cachestat wants write
 * access to the file, which a server's worker seldom has (EPERM), and says
 * "cached" of a page still being read in, which RWF_NOWAIT does not.
 * A file in memory (tmpfs, which has no RWF_NOWAIT) needs no check.
 * Anything else, a file that cannot read so (FUSE, overlayfs), or a short
 * read, goes to a worker as before.  The read is an access of the file as
 * the send is (atime; inotify's IN_ACCESS, merged with the send's). */
#define SENDFILE_NOW_MAX (64 * 1024)
#define PROBE sizeof(((struct agg_carrier *)0)->probe)

static int sendfile_cached(const struct agg_req *req)
{
    long out = (int)req->args[0], in = (int)req->args[1], count = req->args[3];
    if (count <= 0 || count > SENDFILE_NOW_MAX || !nonblocking(out))
        return 0;
    fd_bits st = known(in);   /* O_NONBLOCK means nothing to a regular file's read */
    if ((st & (FD_REGULAR | FD_PROC)) != FD_REGULAR)
        return 0;
    if (st & FD_MEMORY)
        return 1;       /* a file in memory: nothing to wait for (nor a RWF_NOWAIT read) */
    int64_t off;
    if (req->args[2]) {
        if (read_arg(req, &off, req->args[2], sizeof(off)) != sizeof(off))
            return 1;   /* EFAULT, at once */
    } else {
        off = ask(SYS_lseek, in, 0, SEEK_CUR);
    }
    if (off < 0)
        return 0;       /* EINVAL, where the call says it */
    struct kiovec v[SENDFILE_NOW_MAX / PROBE];
    long n = 0, left = count;
    for (; left > 0; n++, left -= (long)PROBE)
        v[n] = (struct kiovec){req->carrier->probe, left < (long)PROBE ? (size_t)left : PROBE};
    return ask6(SYS_preadv2, in, (long)v, n, off, 0, RWF_NOWAIT) == count;
}

/* An eventfd's write that cannot wait: made natively, on the carrier.
 * io_uring cannot write an eventfd without perhaps waiting (it has no
 * FMODE_NOWAIT write): its write polls writable, fails to write without
 * waiting again, and ends on an io-wq thread, 100 us a write on Linux 6.18
 * against 0.2 natively.  A thread pool that tells its event loop of each
 * finished job so (nginx's `aio threads`, libuv's) paid that once per job.
 * The write of v waits only while the count would pass 2^64 - 2; poll says
 * writable while the count is below 2^64 - 2, so a write of 0 or 1 then
 * goes through at once.  A larger value, or a count at its top, goes to a
 * worker, where the write may wait as a thread's.  (Between the poll and
 * the write another thread may fill the count to its top; the write then
 * waits on the carrier until a read.  That needs a program that writes
 * within one of 2^64 at the same moment.) */
static int eventfd_room(const struct agg_req *req, long fd, long buf, long len)
{
    if (len < 8 || (known(fd) & (FD_EVENTFD | FD_NONBLOCK)) != FD_EVENTFD)
        return 0;
    uint64_t v;
    if (read_arg(req, &v, buf, 8) != 8)
        return 1;   /* EFAULT, at once */
    if (v == ~0ULL)
        return 1;   /* EINVAL, at once */
    if (v > 1)
        return 0;
    struct {
        int fd;
        short events, revents;
    } p = {(int)fd, POLLOUT_, 0};
    return ask(SYS_poll, (long)&p, (void *)1, 0) == 1 && (p.revents & POLLOUT_);
}

#define CHECK_IO(fd, dir)                         \
    do {                                          \
        enum agg_tr t_ = blocking_io((fd), (dir)); \
        if (t_ != AGG_TR_RING)                    \
            return t_;                            \
    } while (0)

/* The struct stat fstat would have written, from a statx of the same file
 * (the kernel's cp_new_stat: devices in new_encode_dev's 32-bit form). */
static void stat_from_statx(struct stat *st, const struct statx *x)
{
    ferry_memset(st, 0, sizeof(*st));
    st->st_dev = (x->stx_dev_minor & 0xff) | ((unsigned long)x->stx_dev_major << 8) |
                 ((unsigned long)(x->stx_dev_minor & ~0xffu) << 12);
    st->st_rdev = (x->stx_rdev_minor & 0xff) | ((unsigned long)x->stx_rdev_major << 8) |
                  ((unsigned long)(x->stx_rdev_minor & ~0xffu) << 12);
    st->st_ino = x->stx_ino;
    st->st_nlink = x->stx_nlink;
    st->st_mode = x->stx_mode;
    st->st_uid = x->stx_uid;
    st->st_gid = x->stx_gid;
    st->st_size = (long)x->stx_size;
    st->st_blksize = x->stx_blksize;
    st->st_blocks = (long)x->stx_blocks;
    st->st_atim.tv_sec = x->stx_atime.tv_sec;
    st->st_atim.tv_nsec = x->stx_atime.tv_nsec;
    st->st_mtim.tv_sec = x->stx_mtime.tv_sec;
    st->st_mtim.tv_nsec = x->stx_mtime.tv_nsec;
    st->st_ctim.tv_sec = x->stx_ctime.tv_sec;
    st->st_ctim.tv_nsec = x->stx_ctime.tv_nsec;
}

/* io_uring first tries an open inline with O_NONBLOCK added, and gives
 * that try's answer unless it is EAGAIN.  For a FIFO (or a device whose
 * open minds O_NONBLOCK) that answer is not the blocking open's: a writer
 * gets ENXIO where it would wait for a reader, a reader returns at once
 * where it would wait for a writer.  An open that may wait therefore goes
 * straight to io_uring's workers, where it runs as open(2) does; one that
 * cannot (O_NONBLOCK, O_PATH, O_DIRECTORY) keeps the inline try.  Opens
 * that create or truncate were sent to the workers by the kernel anyway. */
static void open_sqe(struct io_uring_sqe *s, long dirfd, long path, long mode, long flags)
{
    rw(s, IORING_OP_OPENAT, dirfd, (void *)path, (unsigned)mode, 0);
    s->open_flags = (uint32_t)flags;
    if (!(flags & (O_NONBLOCK | O_PATH | O_DIRECTORY)))
        s->flags = IOSQE_ASYNC;
}

/* An epoll_wait's, epoll_pwait's or epoll_pwait2's timeout (a[3]). */
enum epoll_timeout { EPOLL_BAD, EPOLL_LOOK, EPOLL_TIMED, EPOLL_FOREVER };

static enum epoll_timeout epoll_timeout(long nr, const long *a, struct __kernel_timespec *ts)
{
    ts->tv_sec = ts->tv_nsec = 0;
    if (nr == SYS_epoll_pwait2) {
        if (!a[3])
            return EPOLL_FOREVER;
        if (read_ts(ts, a[3]))
            return EPOLL_BAD;
    } else {
        int ms = (int)a[3];
        if (ms < 0)
            return EPOLL_FOREVER;
        ts->tv_sec = ms / 1000;
        ts->tv_nsec = (long long)(ms % 1000) * 1000000LL;
    }
    return ts->tv_sec || ts->tv_nsec ? EPOLL_TIMED : EPOLL_LOOK;
}

/* Decide (sqe NULL) or fill (sqe given).  `req` NULL: a raw batch, which has
 * no room for the structures some translations need. */
enum agg_tr agg_translate(const struct ferry_group *g, unsigned pool, long nr, const long *a,
                          struct agg_req *req, struct io_uring_sqe *sqe)
{
    struct io_uring_sqe dummy;
    struct io_uring_sqe *s = sqe ? sqe : &dummy;
    const unsigned char *ok = g->op_ok;
    int prio = 0;
    switch (nr) {
    case SYS_read:
        CHECK_IO(a[0], FD_TIMEO_R);
        if (local_io(a[0], a[2], 0))
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_READ, a[0], (void *)a[1], clamp_len(a[2]), (uint64_t)-1);
        prio = 1;
        break;
    case SYS_write:
        if (eventfd_room(req, a[0], a[1], a[2]))
            return AGG_TR_NATIVE;
        CHECK_IO(a[0], FD_TIMEO_W);
        if (local_io(a[0], a[2], 1))
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_WRITE, a[0], (void *)a[1], clamp_len(a[2]), (uint64_t)-1);
        prio = 1;
        break;
    case SYS_pread64:
    case SYS_pwrite64:
        if (a[3] < 0)
            return AGG_TR_NATIVE;  /* EINVAL; -1 would mean "file position" to io_uring */
        CHECK_IO(a[0], nr == SYS_pread64 ? FD_TIMEO_R : FD_TIMEO_W);
        if (local_io(a[0], a[2], nr == SYS_pwrite64))
            return AGG_TR_NATIVE;
        rw(s, nr == SYS_pread64 ? IORING_OP_READ : IORING_OP_WRITE, a[0], (void *)a[1],
           clamp_len(a[2]), (uint64_t)a[3]);
        prio = 1;
        break;
    case SYS_readv:
    case SYS_writev:
        if (a[2] < 0 || a[2] > 1024)
            return AGG_TR_NATIVE;
        CHECK_IO(a[0], nr == SYS_readv ? FD_TIMEO_R : FD_TIMEO_W);
        if (local_io_vector(req, a[0], a[1], a[2], nr == SYS_writev))
            return AGG_TR_NATIVE;
        rw(s, nr == SYS_readv ? IORING_OP_READV : IORING_OP_WRITEV, a[0], (void *)a[1],
           (unsigned)a[2], (uint64_t)-1);
        prio = 1;
        break;
    case SYS_preadv:
    case SYS_pwritev:
    case SYS_preadv2:
    case SYS_pwritev2: {
        int v2 = nr == SYS_preadv2 || nr == SYS_pwritev2;
        if (a[2] < 0 || a[2] > 1024 || a[3] < (v2 ? -1 : 0))
            return AGG_TR_NATIVE;
        int rd = nr == SYS_preadv || nr == SYS_preadv2;
        CHECK_IO(a[0], rd ? FD_TIMEO_R : FD_TIMEO_W);
        /* RWF_DSYNC and RWF_SYNC wait for the device, as O_DSYNC does */
        if (!(v2 && (a[5] & (RWF_DSYNC | RWF_SYNC))) &&
            local_io_vector(req, a[0], a[1], a[2], !rd))
            return AGG_TR_NATIVE;
        rw(s, rd ? IORING_OP_READV : IORING_OP_WRITEV, a[0], (void *)a[1], (unsigned)a[2],
           (uint64_t)a[3]);
        /* RWF_HIPRI asks for polled completion, which a ring not made with
         * IORING_SETUP_IOPOLL refuses (EINVAL); preadv2 takes it as a hint */
        if (v2)
            s->rw_flags = (int)a[5] & ~RWF_HIPRI_;
        prio = 1;
        break;
    }
    case SYS_open:
        open_sqe(s, AT_FDCWD, a[0], a[2], a[1]);
        break;
    case SYS_creat:
        open_sqe(s, AT_FDCWD, a[0], a[1], O_CREAT | O_WRONLY | O_TRUNC);
        break;
    case SYS_openat:
        open_sqe(s, a[0], a[1], a[3], a[2]);
        break;
    case SYS_close:
        rw(s, IORING_OP_CLOSE, a[0], 0, 0, 0);
        break;
    case SYS_statx:
        rw(s, IORING_OP_STATX, a[0], (void *)a[1], (unsigned)a[3], (uint64_t)a[4]);
        s->statx_flags = (uint32_t)a[2];
        break;
    case SYS_fstat:
    case SYS_newfstatat: {
        /* STATX into the request, a struct stat made of it after: only
         * where that copy cannot fault (fstat would say EFAULT), and for
         * the flags newfstatat takes (it says EINVAL to the rest) */
        long at = a[0], flags = nr == SYS_fstat ? AT_EMPTY_PATH : a[3];
        const char *path = nr == SYS_fstat ? "" : (const char *)a[1];
        void *buf = (void *)(nr == SYS_fstat ? a[1] : a[2]);
        if (!req || !on_live_stack(req, buf, sizeof(struct stat)) ||
            (flags & ~(long)(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)))
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_STATX, at, path, STATX_BASIC_STATS, (uint64_t)(uintptr_t)&req->stx);
        s->statx_flags = (uint32_t)flags;
        break;
    }
    case SYS_fsync:
    case SYS_fdatasync:
        rw(s, IORING_OP_FSYNC, a[0], 0, 0, 0);
        s->fsync_flags = nr == SYS_fdatasync ? IORING_FSYNC_DATASYNC : 0;
        break;
    case SYS_accept:
    case SYS_accept4:
        CHECK_IO(a[0], FD_TIMEO_R);
        rw(s, IORING_OP_ACCEPT, a[0], (void *)a[1], 0, (uint64_t)a[2]);
        s->accept_flags = nr == SYS_accept4 ? (uint32_t)a[3] : 0;
        break;
    case SYS_connect:
        CHECK_IO(a[0], FD_TIMEO_W);
        rw(s, IORING_OP_CONNECT, a[0], (void *)a[1], 0, (uint64_t)a[2]);
        break;
    case SYS_recvfrom:
        CHECK_IO(a[0], FD_TIMEO_R);
        if (!a[4]) {
            rw(s, IORING_OP_RECV, a[0], (void *)a[1], clamp_len(a[2]), 0);
            s->msg_flags = (uint32_t)a[3];
            break;
        }
        if (!req || !a[5])
            return AGG_TR_WORKER;
        if (sqe) {
            uint32_t len;
            if (agg_safe_read(&len, (void *)a[5], 4) != 4)
                return AGG_TR_WORKER;
            req->iov.base = (void *)a[1];
            req->iov.len = (size_t)a[2];
            ferry_memset(&req->msg, 0, sizeof(req->msg));
            req->msg.name = (void *)a[4];
            req->msg.namelen = len;
            req->msg.iov = &req->iov;
            req->msg.iovlen = 1;
        }
        rw(s, IORING_OP_RECVMSG, a[0], req ? &req->msg : 0, 1, 0);
        s->msg_flags = (uint32_t)a[3];
        break;
    case SYS_sendto:
        CHECK_IO(a[0], FD_TIMEO_W);
        if (!a[4]) {
            rw(s, IORING_OP_SEND, a[0], (void *)a[1], clamp_len(a[2]), 0);
            s->msg_flags = (uint32_t)a[3];
            break;
        }
        if (!req)
            return AGG_TR_WORKER;
        if (sqe) {
            req->iov.base = (void *)a[1];
            req->iov.len = (size_t)a[2];
            ferry_memset(&req->msg, 0, sizeof(req->msg));
            req->msg.name = (void *)a[4];
            req->msg.namelen = (uint32_t)a[5];
            req->msg.iov = &req->iov;
            req->msg.iovlen = 1;
        }
        rw(s, IORING_OP_SENDMSG, a[0], req ? &req->msg : 0, 1, 0);
        s->msg_flags = (uint32_t)a[3];
        break;
    case SYS_recvmsg:
    case SYS_sendmsg:
        CHECK_IO(a[0], nr == SYS_recvmsg ? FD_TIMEO_R : FD_TIMEO_W);
        rw(s, nr == SYS_recvmsg ? IORING_OP_RECVMSG : IORING_OP_SENDMSG, a[0], (void *)a[1], 1, 0);
        s->msg_flags = (uint32_t)a[2];
        break;
    case SYS_shutdown:
        if (!ok[IORING_OP_SHUTDOWN])
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_SHUTDOWN, a[0], 0, (unsigned)a[1], 0);
        break;
    case SYS_socket:
        if (!ok[IORING_OP_SOCKET])
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_SOCKET, a[0], 0, (unsigned)a[2], (uint64_t)a[1]);
        break;
    case SYS_unlinkat:
    case SYS_unlink:
    case SYS_rmdir:
        if (nr == SYS_unlinkat)
            rw(s, IORING_OP_UNLINKAT, a[0], (void *)a[1], 0, 0);
        else
            rw(s, IORING_OP_UNLINKAT, AT_FDCWD, (void *)a[0], 0, 0);
        s->unlink_flags = nr == SYS_unlinkat ? (uint32_t)a[2] : nr == SYS_rmdir ? AT_REMOVEDIR : 0;
        break;
    case SYS_renameat:
    case SYS_renameat2:
        rw(s, IORING_OP_RENAMEAT, a[0], (void *)a[1], (unsigned)a[2], (uint64_t)a[3]);
        s->rename_flags = nr == SYS_renameat2 ? (uint32_t)a[4] : 0;
        break;
    case SYS_rename:
        rw(s, IORING_OP_RENAMEAT, AT_FDCWD, (void *)a[0], (unsigned)AT_FDCWD, (uint64_t)a[1]);
        break;
    case SYS_mkdirat:
        rw(s, IORING_OP_MKDIRAT, a[0], (void *)a[1], (unsigned)a[2], 0);
        break;
    case SYS_mkdir:
        rw(s, IORING_OP_MKDIRAT, AT_FDCWD, (void *)a[0], (unsigned)a[1], 0);
        break;
    case SYS_symlinkat:
        rw(s, IORING_OP_SYMLINKAT, a[1], (void *)a[0], 0, (uint64_t)a[2]);
        break;
    case SYS_symlink:
        rw(s, IORING_OP_SYMLINKAT, AT_FDCWD, (void *)a[0], 0, (uint64_t)a[1]);
        break;
    case SYS_linkat:
        rw(s, IORING_OP_LINKAT, a[0], (void *)a[1], (unsigned)a[2], (uint64_t)a[3]);
        s->hardlink_flags = (uint32_t)a[4];
        break;
    case SYS_link:
        rw(s, IORING_OP_LINKAT, AT_FDCWD, (void *)a[0], (unsigned)AT_FDCWD, (uint64_t)a[1]);
        break;
    case SYS_nanosleep:
    case SYS_clock_nanosleep: {
        long tsp = nr == SYS_nanosleep ? a[0] : a[2];
        unsigned flags = 0;
        if (nr == SYS_clock_nanosleep) {
            if (a[0] == CLOCK_REALTIME)
                flags = IORING_TIMEOUT_REALTIME;
            else if (a[0] == CLOCK_BOOTTIME)
                flags = IORING_TIMEOUT_BOOTTIME;
            else if (a[0] != CLOCK_MONOTONIC)
                return AGG_TR_WORKER;
            if (a[1] & ~TIMER_ABSTIME)
                return AGG_TR_NATIVE;
            if (a[1] & TIMER_ABSTIME)
                flags |= IORING_TIMEOUT_ABS;
        }
        if (!req)
            return AGG_TR_WORKER;
        struct __kernel_timespec ts;
        if (read_ts(&ts, tsp))
            return AGG_TR_NATIVE;  /* EFAULT or EINVAL, at once */
        if (sqe)
            req->ts = ts;
        rw(s, IORING_OP_TIMEOUT, -1, &req->ts, 1, 0);
        s->timeout_flags = flags;
        break;
    }
    case SYS_poll: {
        if (a[1] != 1)
            return a[1] == 0 && a[2] == 0 ? AGG_TR_NATIVE : AGG_TR_WORKER;
        int ms = (int)a[2];
        if (ms == 0)
            return AGG_TR_NATIVE;
        if (ms > 0 && !req)
            return AGG_TR_WORKER;  /* a raw batch has no room for the timeout */
        struct {
            int fd;
            short events, revents;
        } pfd;
        if (agg_safe_read(&pfd, (void *)a[0], sizeof(pfd)) != sizeof(pfd) || pfd.fd < 0)
            return AGG_TR_WORKER;
        /* a timeout is linked to the poll, as for epoll_wait: a server's
         * wait for its client's next bytes (apache's) stays in the batch */
        if (ms > 0) {
            req->timed = 1;
            if (sqe) {
                req->ts.tv_sec = ms / 1000;
                req->ts.tv_nsec = (long long)(ms % 1000) * 1000000LL;
            }
        }
        rw(s, IORING_OP_POLL_ADD, pfd.fd, 0, 0, 0);
        s->poll32_events = (uint16_t)pfd.events | POLLERR | POLLHUP;
        break;
    }
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2: {
        /* IORING_OP_EPOLL_WAIT (Linux 6.15) waits as epoll_wait does; a
         * signal mask to wait with, or an older kernel: a worker's */
        if (!ok[AGG_OP_EPOLL_WAIT] || (nr != SYS_epoll_wait && a[4]))
            return AGG_TR_WORKER;
        struct __kernel_timespec ts;
        enum epoll_timeout how = epoll_timeout(nr, a, &ts);
        int forever = how == EPOLL_FOREVER;
        if (how == EPOLL_BAD || how == EPOLL_LOOK)
            return AGG_TR_NATIVE;  /* EFAULT or EINVAL at once; a look, not a wait */
        if (!forever && !req)
            return AGG_TR_WORKER;  /* a raw batch has no room for the timeout */
        if (req) {
            req->timed = !forever;
            if (sqe)
                req->ts = ts;
        }
        rw(s, AGG_OP_EPOLL_WAIT, a[0], (void *)a[1], (unsigned)(int)a[2], 0);
        break;
    }
    case SYS_sched_yield:
        rw(s, IORING_OP_NOP, -1, 0, 0, 0);
        break;
    case SYS_fallocate:
        rw(s, IORING_OP_FALLOCATE, a[0], (void *)a[3], (unsigned)a[1], (uint64_t)a[2]);
        break;
    case SYS_sync_file_range:
        if (a[1] < 0 || a[2] < 0 || a[2] > 0xffffffffL)
            return AGG_TR_NATIVE;
        rw(s, IORING_OP_SYNC_FILE_RANGE, a[0], 0, (unsigned)a[2], (uint64_t)a[1]);
        s->sync_range_flags = (uint32_t)a[3];
        break;
    case SYS_ftruncate:
        if (!ok[AGG_OP_FTRUNCATE] || a[1] < 0)
            return AGG_TR_NATIVE;
        rw(s, AGG_OP_FTRUNCATE, a[0], 0, 0, (uint64_t)a[1]);
        break;
    case SYS_bind:
        if (!ok[AGG_OP_BIND])
            return AGG_TR_NATIVE;
        rw(s, AGG_OP_BIND, a[0], (void *)a[1], 0, (uint64_t)a[2]);
        break;
    case SYS_listen:
        if (!ok[AGG_OP_LISTEN])
            return AGG_TR_NATIVE;
        rw(s, AGG_OP_LISTEN, a[0], 0, (unsigned)a[1], 0);
        break;
    default:
        return AGG_TR_WORKER;
    }
    if (prio)
        s->ioprio = rw_prio(g, pool);
    if (!ok[s->opcode < AGG_OP_MAX ? s->opcode : 0])
        return AGG_TR_WORKER;
    return AGG_TR_RING;
}

/* The synchronous call's result, from the operation's. */
long agg_fixup(long nr, const long *a, struct agg_req *req, long res)
{
    switch (nr) {
    case SYS_nanosleep:
    case SYS_clock_nanosleep:
        return res == -ETIME ? 0 : res;
    case SYS_sched_yield:
        return 0;
    case SYS_poll: {
        short *revents = (short *)((char *)a[0] + 6);
        short events = *(short *)((char *)a[0] + 4);
        if (res == -EBADF) {
            *revents = POLLNVAL;
            return 1;
        }
        if (res == -ECANCELED)
            *revents = 0;  /* its timeout, or a signal: poll(2) writes revents all the same */
        if (res < 0)
            return res;
        *revents = (short)(res & ((uint16_t)events | POLLERR | POLLHUP | POLLNVAL));
        return 1;
    }
    case SYS_recvfrom:
        if (req && a[4] && res >= 0)
            *(uint32_t *)a[5] = req->msg.namelen;
        return res;
    default:
        return res;
    }
}

static void note_setsockopt(const long *a, long res)
{
    if (res != 0 || a[1] != SOL_SOCKET || a[0] < 0 || a[0] >= FD_MAX)
        return;
    int dir = 0;
    if (a[2] == 20 || a[2] == 66)  /* SO_RCVTIMEO_OLD, SO_RCVTIMEO_NEW */
        dir = 1;
    else if (a[2] == 21 || a[2] == 67)  /* SO_SNDTIMEO */
        dir = 2;
    if (!dir)
        return;
    long tv[2] = {0, 0};
    agg_safe_read(tv, (void *)a[3], sizeof(tv));
    if (tv[0] || tv[1])
        __atomic_or_fetch(&fd_state[a[0]], dir, __ATOMIC_RELAXED);
    else
        __atomic_and_fetch(&fd_state[a[0]], ~dir, __ATOMIC_RELAXED);
}

/* A call made here, by the carrier, counted as one native call and crossing. */
static long direct(struct ferry_group *g, long nr, long a, long b, long c, long d, long e, long f)
{
    agg_stat(g, AGG_ST(native), 1);
    agg_stat(g, AGG_ST(crossings), 1);
    return ferry_pass6(nr, a, b, c, d, e, f);
}

static long native(struct ferry_group *g, struct ferry_regs *r)
{
    return direct(g, r->rax, r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9);
}

/* The descriptor a successful fstat or newfstatat(fd, "", AT_EMPTY_PATH)
 * looked at (its kind can be learnt from the answer), else -1. */
static long stat_of_fd(long nr, const long *a)
{
    if (nr == SYS_fstat)
        return a[0];
    return nr == SYS_newfstatat && (a[3] & AT_EMPTY_PATH) && !*(const char *)a[1] ? a[0] : -1;
}

static void forget_fd(long fd)
{
    if (fd >= 0 && fd < FD_MAX)
        __atomic_store_n(&fd_state[fd], 0, __ATOMIC_RELAXED);
}

/* close_range(first, last, flags): what it closes is forgotten, as close's
 * is (a number closed and made again by a call the engine does not see,
 * inotify_init or pidfd_open, kept what the engine knew of the closed one:
 * a read of it was tried as a socket's, and failed ENOTSOCK). */
void agg_fds_forget(unsigned long first, unsigned long last, unsigned long flags)
{
    if (flags & CLOSE_RANGE_CLOEXEC_)  /* closes nothing now */
        return;
    for (unsigned long fd = first; fd <= last && fd < FD_MAX; fd++)
        __atomic_store_n(&fd_state[fd], 0, __ATOMIC_RELAXED);
}

/* A program's only thread, with no other fiber in the process: no fiber
 * could run while its call waits, nor join it in a batch, so the ring
 * would only add a crossing and two switches to each call (postgres's
 * backends, single-threaded, ran a third fewer transactions).  Its calls
 * run natively until it makes a thread or a fiber.  Its carrier's count
 * is enough for fibers of the API: in the fiber world they are made only
 * by ferry_fiber_spawn, on the spawning fiber's carrier, and never move. */
static int alone(const struct agg_fiber *f, struct agg_carrier *c)
{
    return f->thread && __atomic_load_n(&agg_threads_alive, __ATOMIC_ACQUIRE) == 1 &&
           __atomic_load_n(&c->alive, __ATOMIC_ACQUIRE) == 1;
}

/* A descriptor a fiber's call just made: what the call itself says of it,
 * so that learning it later (nonblocking()) asks the kernel less, or
 * nothing: a socket's kind and blocking mode are its flags'. */
static void new_fd(long nr, const long *a, long fd)
{
    if (fd < 0 || fd >= FD_MAX)
        return;
    fd_bits st;
    switch (nr) {
    case SYS_socket:
        st = FD_KNOWN | FD_FLAGS | FD_SOCKET | ((a[1] & SOCK_NONBLOCK) ? FD_NONBLOCK : 0);
        break;
    case SYS_accept4:   /* an accepted socket does not inherit O_NONBLOCK */
        st = FD_KNOWN | FD_FLAGS | FD_SOCKET | ((a[3] & SOCK_NONBLOCK) ? FD_NONBLOCK : 0);
        break;
    case SYS_accept:
        st = FD_KNOWN | FD_FLAGS | FD_SOCKET;
        break;
    case SYS_open:
        st = FD_FLAGS | ((a[1] & O_NONBLOCK) ? FD_NONBLOCK : 0) | ((a[1] & SYNC_FLAGS) ? FD_SYNC : 0);
        break;
    case SYS_openat:
        st = FD_FLAGS | ((a[2] & O_NONBLOCK) ? FD_NONBLOCK : 0) | ((a[2] & SYNC_FLAGS) ? FD_SYNC : 0);
        break;
    default:            /* creat: O_WRONLY, blocking */
        st = FD_FLAGS;
        break;
    }
    __atomic_store_n(&fd_state[fd], st, __ATOMIC_RELAXED);
}

/* A fiber's own fstat of a descriptor whose kind is not known yet says it:
 * a regular file with a device is no /proc file, and one of a block
 * device's filesystem; one without, an anonymous inode's (which may have no
 * read or write) and a device (a terminal?) are left to learn. */
static void learn_from_stat(long fd, unsigned mode, unsigned dev_major)
{
    if (fd < 0 || fd >= FD_MAX)
        return;
    fd_bits st = __atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED);
    if ((st & FD_KNOWN) || !(st & FD_FLAGS))
        return;
    int reg = S_ISREG(mode), sock = S_ISSOCK(mode);
    if ((reg && dev_major == 0) || !(mode & S_IFMT) || S_ISCHR(mode))
        return;
    __atomic_or_fetch(&fd_state[fd], FD_KNOWN | (reg ? FD_REGULAR | FD_DISK : 0) | (sock ? FD_SOCKET : 0),
                      __ATOMIC_RELAXED);
}

/* Calls of a fiber that make or change descriptors: run here, natively,
 * so that what the engine knows of the descriptors stays true. */
static int fd_call(struct ferry_group *g, struct ferry_regs *r)
{
    long nr = r->rax, res;
    switch (nr) {
    case SYS_fcntl:
    case SYS_ioctl:
    case SYS_dup:
    case SYS_dup2:
    case SYS_dup3:
    case SYS_pipe:
    case SYS_pipe2:
    case SYS_socketpair:
    case SYS_eventfd:
    case SYS_eventfd2:
    case SYS_timerfd_create:
    case SYS_signalfd4:
    case SYS_memfd_create:
    case SYS_epoll_create1:
    case SYS_inotify_init1:
        break;
    default:
        return 0;
    }
    res = native(g, r);
    r->rax = res;
    if (res < 0)
        return 1;
    if (nr == SYS_fcntl || nr == SYS_ioctl) {
        forget_fd(r->rdi);
        if (nr == SYS_fcntl && (r->rsi == F_DUPFD || r->rsi == F_DUPFD_CLOEXEC))
            forget_fd(res);
    } else if (nr == SYS_dup2 || nr == SYS_dup3) {
        forget_fd(r->rsi);
    } else if (nr == SYS_pipe || nr == SYS_pipe2 || nr == SYS_socketpair) {
        int fds[2];
        if (agg_safe_read(fds, (void *)(nr == SYS_socketpair ? r->r10 : r->rdi), sizeof(fds)) ==
            sizeof(fds)) {
            forget_fd(fds[0]);
            forget_fd(fds[1]);
        }
    } else {
        forget_fd(res);
    }
    return 1;
}

static int route(struct ferry_regs *r, int complete, uint64_t *done_at);

/* The program's own io_uring_enter that only waits for completions of its
 * ring (liburing's io_uring_wait_cqe: nothing to submit, GETEVENTS, one or
 * more to wait for).  Made natively it blocked the carrier and every fiber
 * on it: MariaDB's InnoDB waits so for its disk reads and writes on a
 * thread of its own, and mariadb-install-db hung at once under -p fibers.
 * It goes to a worker, as a blocking call.  Not a ring registered with its
 * thread (IORING_ENTER_REGISTERED_RING: the index means nothing on
 * another), nor one that submits: its requests would belong to the worker
 * (their task work, their io-wq), and natively they are the thread's.  A
 * ring that only its creator may enter (SINGLE_ISSUER) refuses the worker
 * with EEXIST before doing anything; that wait is then made natively, as
 * before. */
static int ring_wait(const struct ferry_regs *r)
{
    return r->rsi == 0 && r->rdx > 0 &&
           (r->r10 & (IORING_ENTER_GETEVENTS | IORING_ENTER_REGISTERED_RING)) == IORING_ENTER_GETEVENTS;
}

/* Calls that reach the router even where no route takes them: those that
 * make, change or end descriptors (fd_call; a close or close_range makes
 * the engine forget what it knew of a number, which they reached through
 * the guard of the group's kept rings until the fiber world kept none),
 * setsockopt (a socket's timeouts) and io_uring_enter (ring_wait). */
static const unsigned short watched[] = {
    SYS_close, SYS_close_range,
    SYS_fcntl, SYS_ioctl, SYS_dup, SYS_dup2, SYS_dup3, SYS_pipe, SYS_pipe2, SYS_socketpair,
    SYS_eventfd, SYS_eventfd2, SYS_timerfd_create, SYS_signalfd4, SYS_memfd_create,
    SYS_epoll_create1, SYS_inotify_init1, SYS_setsockopt, SYS_io_uring_enter,
};

/* At group creation: these reach ferry_slow so the engine sees fibers' calls. */
void agg_route_watch(void)
{
    agg_creds_watch();
    for (unsigned i = 0; i < sizeof(watched) / sizeof(watched[0]); i++)
        __atomic_store_n(&ferry_action[watched[i]], 1, __ATOMIC_RELAXED);
}

/* A write(2) or sendto(2) that would wait for room on a stream socket. */
static int blocking_send(const struct ferry_regs *r)
{
    return (r->rax == SYS_write || r->rax == SYS_sendto) && r->rdx > 0 && blocking_socket(r->rdi);
}

/* A descriptor that a blocking write may fill only in part: a pipe, FIFO,
 * socket or terminal without O_NONBLOCK.  A regular file's short write is
 * the kernel's own answer (no space, RLIMIT_FSIZE), as it would be natively. */
static int blocking_stream(long fd)
{
    if (fd < 0 || fd >= FD_MAX || nonblocking(fd))
        return 0;
    return !(__atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED) & FD_REGULAR);
}

/* The vector a write-like call writes from (NULL: one buffer). */
static int call_vector(const struct ferry_regs *r, const struct kiovec **iov, long *n,
                       const struct kmsghdr **msg)
{
    *iov = 0;
    *n = 0;
    *msg = 0;
    switch (r->rax) {
    case SYS_write:
    case SYS_pwrite64:
    case SYS_sendto:
        return 1;
    case SYS_writev:
    case SYS_pwritev:
    case SYS_pwritev2:
        *iov = (const struct kiovec *)r->rsi;
        *n = r->rdx;
        return 1;
    case SYS_sendmsg: {
        const struct kmsghdr *m = (const struct kmsghdr *)r->rsi;
        *msg = m;
        *iov = m->iov;
        *n = (long)m->iovlen;
        return 1;
    }
    }
    return 0;
}

/* What the call asked to write, as the kernel caps it (MAX_RW_COUNT). */
static long call_total(const struct ferry_regs *r, const struct kiovec *iov, long n)
{
    if (!iov && !n)
        return r->rdx < MAX_RW ? r->rdx : MAX_RW;
    unsigned long t = 0;
    for (long i = 0; i < n && t < (unsigned long)MAX_RW; i++)
        t += iov[i].len;
    return t < (unsigned long)MAX_RW ? (long)t : MAX_RW;
}

#define REST_IOV 64

/* io_uring may end a blocking write to a pipe, socket or terminal with part
 * of it written (what the buffer took); the system call waits for room and
 * writes it all unless a signal cuts it short.  The rest goes the same way
 * as the call did, a piece at a time; an error after some bytes went, or a
 * signal for the fiber, leaves their count, as natively. */
static long write_rest(const struct ferry_regs *r, long done, uint64_t *done_at)
{
    const struct kiovec *iov;
    const struct kmsghdr *msg;
    long n;
    if (done <= 0 || !call_vector(r, &iov, &n, &msg) || !blocking_stream(r->rdi))
        return done;
    long total = call_total(r, iov, n);
    struct agg_fiber *f = agg_self;
    while (done < total && f && !f->interrupted) {
        struct ferry_regs rest = *r;
        struct kiovec piece[REST_IOV];
        struct kmsghdr m;
        if (!iov) {
            rest.rsi += done;
            rest.rdx = total - done;
        } else {
            /* the iovecs past `done`, the first one cut */
            long skip = done, i = 0, k = 0;
            while (i < n && skip >= (long)iov[i].len)
                skip -= (long)iov[i++].len;
            for (; i < n && k < REST_IOV; i++, skip = 0)
                if (iov[i].len > (size_t)skip)
                    piece[k++] = (struct kiovec){iov[i].base + skip, iov[i].len - (size_t)skip};
            if (msg) {
                /* ancillary data went with the first bytes */
                m = *msg;
                m.iov = piece;
                m.iovlen = (size_t)k;
                m.control = 0;
                m.controllen = 0;
                rest.rsi = (long)&m;
            } else {
                rest.rsi = (long)piece;
                rest.rdx = k;
            }
        }
        if (!route(&rest, 0, done_at)) {
            rest.rax = ferry_pass6(rest.rax, rest.rdi, rest.rsi, rest.rdx, rest.r10, rest.r8, rest.r9);
            *done_at = 0;  /* written here: the call ends when it returns */
        }
        if (rest.rax <= 0)
            break;
        done += rest.rax;
    }
    return done;
}

/* A program's thread (not a fiber made through the API, whose calls its
 * author routed on purpose) writes to a blocking socket while no other
 * fiber of its carrier is ready: there is no batch for the write to join,
 * and the socket usually takes it at once, so it is tried as the system
 * call itself (without waiting), which costs less than a ring operation
 * and two fiber switches.  1 when that did it all; a socket that takes only
 * part (or nothing) leaves the rest to the ring, as a blocking write waits
 * for room. */
static int send_now(struct ferry_group *g, struct ferry_regs *r, uint64_t *done_at)
{
    long nr = r->rax;
    if (!blocking_send(r))
        return 0;
    long flags = nr == SYS_sendto ? r->r10 : 0;
    long addr = nr == SYS_sendto ? r->r8 : 0, alen = nr == SYS_sendto ? r->r9 : 0;
    long n = direct(g, SYS_sendto, r->rdi, r->rsi, r->rdx, flags | MSG_DONTWAIT, addr, alen);
    if (n == -EAGAIN)
        return 0;
    r->rax = write_rest(r, n, done_at);  /* the rest, if any, waits for room on the ring */
    return 1;
}

/* A regular file's read at the file position, in a fiber alone on its
 * carrier: what the page cache holds now (RWF_NOWAIT), the rest as the
 * blocking read it stands for (a regular file's read is never short but
 * at its end).  1 when done here; 0 to route it (the data is not cached,
 * or the file cannot be read without waiting). */
static int read_file_now(struct ferry_group *g, struct ferry_regs *r)
{
    long fd = (int)r->rdi;
    struct kiovec v = {(const char *)r->rsi, (size_t)r->rdx};
    long n = direct(g, SYS_preadv2, fd, (long)&v, 1, -1, 0, RWF_NOWAIT);
    if (n < 0)
        return 0;   /* EAGAIN, EOPNOTSUPP; any other error the routed call tells */
    while (n > 0 && n < r->rdx) {
        long k = direct(g, SYS_read, fd, r->rsi + n, r->rdx - n, 0, 0, 0);
        if (k <= 0)
            break;  /* the end, or an error after some bytes: those bytes */
        n += k;
    }
    r->rax = n;
    return 1;
}

/* An open alone on its carrier, made here when the path names a regular
 * file or a directory.  On the ring it goes to an io-wq thread (IOSQE_ASYNC:
 * a FIFO's open waits for its other end, which must not happen on the
 * carrier) and back: two thread wakes for each file a server opens, half of
 * apache2's time at one connection.
 *   - A look first, newfstatat (run at once on this path anyway): a FIFO,
 *     device, socket or symlink goes to the ring, and no open of theirs
 *     runs here.  ENOENT and ENOTDIR are the open's own answer.
 *   - The open adds O_NONBLOCK, so that a path swapped for a FIFO meanwhile
 *     cannot wait (ENXIO, a FIFO without a writer: routed), and F_SETFL
 *     takes it off again.
 *   - O_CREAT, O_TRUNC and O_TMPFILE write, and O_ASYNC is left in the
 *     flags by open where F_SETFL would take it off: routed.  A lease
 *     another process holds says EAGAIN to O_NONBLOCK where the open would
 *     wait for its break: routed.
 * 1 when made here (result in r->rax), 0 to route it. */
#define O_TMPFILE_ (020000000 | O_DIRECTORY)
#define F_SETFL_KEEPS (O_APPEND | O_DIRECT | O_NOATIME)

static int open_now(struct ferry_group *g, struct ferry_regs *r)
{
    long nr = r->rax;
    long a[4] = {r->rdi, r->rsi, r->rdx, r->r10};
    long dirfd = nr == SYS_open ? AT_FDCWD : (int)a[0];
    long path = nr == SYS_open ? a[0] : a[1];
    long flags = nr == SYS_open ? a[1] : a[2];
    if ((flags & (O_CREAT | O_TRUNC | O_PATH | O_ASYNC)) || (flags & O_TMPFILE_) == O_TMPFILE_)
        return 0;
    struct stat sb;
    long k = direct(g, SYS_newfstatat, dirfd, path, (long)&sb,
                    (flags & O_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0, 0, 0);
    if (k == -ENOENT || k == -ENOTDIR) {
        r->rax = k;
        return 1;
    }
    if (k < 0 || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode)))
        return 0;
    long fd = direct(g, SYS_openat, dirfd, path, flags | O_NONBLOCK, 0, 0, 0);
    if (fd == -EAGAIN || fd == -ENXIO)
        return 0;
    if (fd >= 0) {
        if (!(flags & O_NONBLOCK))
            direct(g, SYS_fcntl, fd, F_SETFL, flags & F_SETFL_KEEPS, 0, 0, 0);
        new_fd(nr, a, fd);
        learn_from_stat(fd, sb.st_mode, DEV_MAJOR(sb.st_dev));
    }
    r->rax = fd;
    return 1;
}

/* After a try that found nothing, the next calls on that descriptor skip
 * the try: 8, then a try again. */
#define TRY_SKIPS 8

/* Whether a call on fd skips its try; else the try is made, and
 * tried() says what it found. */
static int skip_try(struct agg_try *t, long fd)
{
    if (t->miss == fd + 1 && t->skips) {
        t->skips--;
        return 1;
    }
    return 0;
}

static void tried(struct agg_try *t, long fd, int found)
{
    t->miss = found ? 0 : (int)fd + 1;
    t->skips = found ? 0 : TRY_SKIPS;
}

/* A read of a blocking socket, tried without waiting.  A request-response
 * peer has sent nothing yet when its server reads right after answering:
 * after a try that found nothing, the next reads of that socket go to the
 * ring at once (8, then the try again), so that such a connection costs one
 * failed try in 9 reads and not one in each. */
static int recv_now(struct ferry_group *g, struct ferry_regs *r, long fd)
{
    struct agg_fiber *f = agg_self;
    if (skip_try(&f->read_try, fd))
        return 0;
    long n = direct(g, SYS_recvfrom, fd, r->rsi, r->rdx,
                    (r->rax == SYS_recvfrom ? r->r10 : 0) | MSG_DONTWAIT, 0, 0);
    tried(&f->read_try, fd, n != -EAGAIN);
    if (n == -EAGAIN)
        return 0;
    r->rax = n;
    return 1;
}

/* An epoll_wait alone on its carrier, with a timeout (or none): a look
 * first (timeout 0, which gives what the wait would give at once: the
 * events ready, or the wait's own error).  An event loop under load finds
 * events ready when it comes back to wait (redis, between two clients'
 * commands), and its wait then costs one call instead of a ring round
 * trip.  After a look that found nothing, the next waits on that
 * descriptor go to the ring at once (8, then a look again), as reads do.
 * 1 when the look answered; 0 to route the wait. */
static int epoll_now(struct ferry_group *g, struct ferry_regs *r, long fd)
{
    long nr = r->rax, a[4] = {r->rdi, r->rsi, r->rdx, r->r10};
    if (nr != SYS_epoll_wait && r->r8)
        return 0;   /* a signal mask to wait with: a worker's */
    struct __kernel_timespec ts;
    enum epoll_timeout how = epoll_timeout(nr, a, &ts);
    if (how == EPOLL_BAD || how == EPOLL_LOOK)
        return 0;   /* made natively anyway */
    struct agg_fiber *f = agg_self;
    if (skip_try(&f->wait_try, fd))
        return 0;
    long n = direct(g, SYS_epoll_wait, fd, r->rsi, r->rdx, 0, 0, 0);
    tried(&f->wait_try, fd, n != 0);
    if (n == 0)
        return 0;
    r->rax = n;
    return 1;
}

/* The quiet path holds while the carrier's ring entries carry fewer than
 * two calls on average: at one connection there is nothing to batch with,
 * while under load a run queue that empties for a moment does not mean the
 * next calls would go alone (they would cost a crossing each). */
#define QUIET_BATCH16 (2 * 16)

/* The quiet path: no other fiber of the carrier is ready, so a call has no
 * batch to join and a ring operation would only add two switches and a
 * crossing of its own.  `all` (FERRY_QUIET_DIRECT): every call that cannot
 * block is made here; else (a program's thread) only the send of send_now.
 * 1 when the call was made here (result in r->rax), 0 to route it. */
static int quiet_now(struct ferry_group *g, struct ferry_regs *r, int all, uint64_t *done_at)
{
    if (send_now(g, r, done_at))
        return 1;
    if (!all)
        return 0;
    /* the descriptor as the kernel reads it (an int: recvfrom(-1) arrives
     * as 0xffffffff, and bits above it are not the kernel's) */
    long nr = r->rax, fd = (int)r->rdi;
    int ours = fd >= 0 && fd < FD_MAX;   /* else the routed call says EBADF */
    fd_bits st = ours ? __atomic_load_n(&fd_state[fd], __ATOMIC_RELAXED) : 0;
    switch (nr) {
    case SYS_open:
    case SYS_openat:
        return open_now(g, r);
    case SYS_fstat:
    case SYS_newfstatat:
    case SYS_statx:
        r->rax = native(g, r);
        long a[4] = {r->rdi, r->rsi, r->rdx, r->r10};
        if (r->rax == 0 && stat_of_fd(nr, a) >= 0) {
            const struct stat *sb = (const struct stat *)(nr == SYS_fstat ? r->rsi : r->rdx);
            learn_from_stat(stat_of_fd(nr, a), sb->st_mode, DEV_MAJOR(sb->st_dev));
        }
        return 1;
    case SYS_close:
        /* a socket's close may linger (SO_LINGER): it waits on the ring */
        if (!(st & FD_FLAGS) || (st & FD_SOCKET))
            return 0;
        r->rax = native(g, r);
        forget_fd(fd);
        return 1;
    case SYS_recvfrom:
        if (r->r8 || (r->r10 & MSG_WAITALL))
            return 0;
        /* fall through */
    case SYS_read:
        if (!ours || !r->rdx || nonblocking(fd) || timeo(fd, FD_TIMEO_R))
            return 0;   /* nonblocking: routed natively anyway */
        if (st & FD_SOCKET)
            return recv_now(g, r, fd);
        /* a file in memory has no RWF_NOWAIT: routed, it is read natively (local_io) */
        if (nr == SYS_read && (st & (FD_REGULAR | FD_PROC | FD_MEMORY)) == FD_REGULAR)
            return read_file_now(g, r);
        return 0;
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
    case SYS_epoll_pwait2:
        return ours && epoll_now(g, r, fd);
    case SYS_writev:
        if (r->rdx <= 0 || r->rdx > 1024 || !blocking_socket(fd)) {
            return 0;
        } else {
            struct kmsghdr m = {0, 0, (struct kiovec *)r->rsi, (size_t)r->rdx, 0, 0, 0};
            long n = direct(g, SYS_sendmsg, fd, (long)&m, MSG_DONTWAIT, 0, 0, 0);
            if (n == -EAGAIN)
                return 0;
            r->rax = write_rest(r, n, done_at);
            return 1;
        }
    default:
        return 0;
    }
}

/* From ferry_slow: 1 if the engine ran the call (result in r->rax), 0 to
 * let the shim run it natively as usual. */
int ferry_agg_route(struct ferry_regs *r)
{
    uint64_t done_at;
    return route(r, 1, &done_at);
}

int ferry_agg_route_timed(struct ferry_regs *r, uint64_t *done) { return route(r, 1, done); }

/* Whether a program that confined its calls (sandbox.h) may have call `r`
 * run by the ring or a worker: only one its filters let through, and none
 * once they refuse the engine its ring.  Any other runs on the carrier,
 * whose filter the kernel applies, its action (an errno, a signal, the
 * end of the process) the kernel's own: io_uring's operations and the
 * workers' calls are not filtered, and a call the program had forbidden
 * itself ran there (an openat its filter answers EPERM opened the file). */
static int sandbox_routes(const struct ferry_regs *r)
{
    /* a futex wait among fibers parks in the engine, where only a shared
     * one is a worker's call; the ring is asked only for a timeout */
    int untimed_futex = r->rax == SYS_futex && !r->r10;
    return (untimed_futex || !agg_ring_refused()) &&
           ferry_sandbox_lets(r->rax, r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9);
}

/* `complete`: a write the ring ends short is carried on to its end.
 * *done_at: when the engine saw the call (its last piece) complete; 0 when
 * it ran here, so that it ended as route returns. */
static int route(struct ferry_regs *r, int complete, uint64_t *done_at)
{
    *done_at = 0;
    struct agg_fiber *f = agg_self;
    /* not RUNNING: a signal handler on the carrier's scheduler, which keeps
     * the last fiber's thread pointer (see agg_sched.c); never routed */
    if (!f || f->busy || f->state != AGG_RUNNING)
        return 0;
    struct agg_carrier *c = f->carrier;
    struct ferry_group *g = c->g;
    long nr = r->rax;
    if ((unsigned long)nr >= FERRY_NR_MAX)
        return 0;
    unsigned t = nr == SYS_io_uring_enter ? (ring_wait(r) ? FERRY_ROUTE_WORKER : FERRY_ROUTE_NATIVE)
                                          : g->cfg.route[nr];
    if (nr == SYS_setsockopt) {
        long res = native(g, r);
        long a[4] = {r->rdi, r->rsi, r->rdx, r->r10};
        note_setsockopt(a, res);
        r->rax = res;
        return 1;
    }
    if (fd_call(g, r))
        return 1;
    if (nr == SYS_close_range)
        agg_fds_forget((unsigned)r->rdi, (unsigned)r->rsi, (unsigned)r->rdx);
    if (t == FERRY_ROUTE_NATIVE || alone(f, c) || (ferry_sandbox_on && !sandbox_routes(r))) {
        /* a descriptor closed here may come back as another kind of file */
        if (nr == SYS_close)
            forget_fd(r->rdi);
        agg_stat(g, AGG_ST(native), 1);
        agg_stat(g, AGG_ST(crossings), 1);
        return 0;
    }
    if (agg_rq_empty(c) && (f->thread || g->cfg.quiet == FERRY_QUIET_DIRECT) &&
        quiet_now(g, r, g->cfg.quiet == FERRY_QUIET_DIRECT && c->batch_avg16 < QUIET_BATCH16, done_at))
        return 1;
    f->busy = 1;
    if (nr == SYS_futex) {
        int done = agg_futex(f, r);
        f->busy = 0;
        return done;
    }
    struct agg_req req;
    req.nr = nr;
    req.args[0] = r->rdi;
    req.args[1] = r->rsi;
    req.args[2] = r->rdx;
    req.args[3] = r->r10;
    req.args[4] = r->r8;
    req.args[5] = r->r9;
    req.fiber = f;
    req.carrier = c;
    req.done = 0;
    req.cflags = 0;
    req.urgent = 0;
    req.next = 0;
    req.timed = 0;
    req.cancel = 0;
    req.worker_tid = 0;
    req.regs = r;
    enum agg_tr tr = AGG_TR_WORKER;
    struct io_uring_sqe local;
    /* under a filter older than the shim (sandbox.h) only a worker's call
     * is filtered: a connect it refuses went through the ring */
    if (t != FERRY_ROUTE_WORKER && !ferry_sandbox_inherited)
        tr = agg_translate(g, t, nr, req.args, &req, &local);
    else if (nr == SYS_sendfile && sendfile_cached(&req))
        tr = AGG_TR_NATIVE;
    if (tr == AGG_TR_NATIVE) {
        f->busy = 0;
        agg_stat(g, AGG_ST(native), 1);
        agg_stat(g, AGG_ST(crossings), 1);
        return 0;
    }
    int accept = nr == SYS_accept || nr == SYS_accept4;
    if (tr == AGG_TR_RING) {
        /* Connections that wait in the backlog (the last accept said so)
         * are taken one after another, as a thread's accept loop does, not
         * one per round of every other fiber: with a thousand connections
         * arriving at once, a round each left them waiting for seconds. */
        if (accept && f->accept_more == r->rdi + 1 && c->urgent_left) {
            c->urgent_left--;
            req.urgent = c->urgent = 1;
        }
        if (req.timed)
            agg_sqe_room(c, t, 2);
        struct io_uring_sqe *sqe = agg_sqe(c, t);
        local.user_data = (uint64_t)(uintptr_t)&req | AGG_TAG_REQ;
        const sqe_word *src = (const sqe_word *)&local;
        sqe_word *dst = (sqe_word *)sqe;
        for (int i = 0; i < 8; i++)
            dst[i] = src[i];
        c->pools[t].inflight++;
        c->pools[t].queued++;
        if (req.timed) {
            /* the call's own timeout: it ends the operation with ECANCELED */
            sqe->flags |= IOSQE_IO_LINK;
            struct io_uring_sqe *to = agg_sqe(c, t);
            io_uring_prep_link_timeout(to, &req.ts, 0);
            io_uring_sqe_set_data64(to, AGG_TAG_IGNORE);
            c->pools[t].misc++;
        }
    } else {
        c->worker_pending++;
        agg_worker_queue(g, &req);
    }
    f->req = &req;
    f->req_pool = tr == AGG_TR_RING ? (int)t : -1;
    f->interrupted = 0;
    agg_park(f);
    f->busy = 0;
    f->req = 0;
    long res = req.result;
    *done_at = req.done_tsc;
    /* a call an io_uring worker ran and a cancel cut short may end with
     * the kernel's restart codes (ERESTARTSYS: a FIFO's open), which a
     * system call never returns: they say EINTR, and whether the call goes
     * on is decided as for a thread's (SA_RESTART) */
    if (res <= -ERESTARTSYS_ && res >= -ERESTART_RESTARTBLOCK_)
        res = -EINTR;
    if (f->interrupted && res == -ECANCELED)
        res = -EINTR;  /* a signal for the thread cut the call short */
    else if (req.timed && res == -ECANCELED)
        res = 0;       /* its timeout: no event */
    if (nr == SYS_io_uring_enter && res == -EEXIST) {
        res = native(g, r);   /* SINGLE_ISSUER: see ring_wait */
        *done_at = 0;
    }
    /* io_uring refuses to close an io_uring descriptor; close(2) does not */
    if (nr == SYS_close && res == -EBADF && tr == AGG_TR_RING) {
        res = native(g, r);
        *done_at = 0;
    }
    if ((nr == SYS_fstat || nr == SYS_newfstatat) && tr == AGG_TR_RING && res == 0) {
        stat_from_statx((struct stat *)(nr == SYS_fstat ? r->rsi : r->rdx), &req.stx);
        learn_from_stat(stat_of_fd(nr, req.args), req.stx.stx_mode, req.stx.stx_dev_major);
    }
    if (accept && tr == AGG_TR_RING)
        f->accept_more = res >= 0 && (req.cflags & IORING_CQE_F_SOCK_NONEMPTY) ? (int)r->rdi + 1 : 0;
    if (nr == SYS_close)
        forget_fd(r->rdi);
    else if (res >= 0 && (nr == SYS_socket || nr == SYS_accept || nr == SYS_accept4 ||
                          nr == SYS_open || nr == SYS_openat || nr == SYS_creat))
        new_fd(nr, req.args, res);
    if (complete && tr == AGG_TR_RING && !f->interrupted)
        res = write_rest(r, res, done_at);
    r->rax = res;
    return 1;
}
