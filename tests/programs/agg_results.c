/* The same sequence of calls, natively or from fibers: every result and
 * errno must be the same.  Usage: agg_results native|fiber SUITE DIR
 * SUITE: files, stat, sockets, pipes, timers, futex, order, failing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agg_common.h"

static const char *dir;

static void say(const char *name, long r)
{
    if (r < 0)
        printf("%s -1 errno=%d\n", name, errno);
    else
        printf("%s %ld\n", name, r);
}
/* descriptors differ (the carrier holds rings), so only success is compared */
static void say_fd(const char *name, long r)
{
    if (r < 0)
        printf("%s -1 errno=%d\n", name, errno);
    else
        printf("%s fd\n", name);
}

static char *path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void files(void)
{
    char buf[64];
    int fd = open(path("a"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    say_fd("open", fd);
    say("write", write(fd, "hello world", 11));
    say("read_at_eof", read(fd, buf, sizeof buf));
    say("lseek", lseek(fd, 0, SEEK_SET));
    say("read_short", read(fd, buf, 5));
    printf("data %.5s\n", buf);
    say("read_rest", read(fd, buf, sizeof buf));
    say("pread", pread(fd, buf, 5, 6));
    printf("data %.5s\n", buf);
    say("pread_beyond", pread(fd, buf, 5, 100));
    say("pread_negative", pread(fd, buf, 5, -1));
    say("pwrite", pwrite(fd, "HELLO", 5, 0));
    say("pwrite_negative", pwrite(fd, "x", 1, -2));
    say("lseek_after_pwrite", lseek(fd, 0, SEEK_CUR));
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    say("writev", writev(fd, iov, 2));
    say("pwritev", pwritev(fd, iov, 2, 20));
    char x[3], y[3];
    struct iovec rv[2] = {{x, 3}, {y, 3}};
    say("preadv", preadv(fd, rv, 2, 0));
    printf("data %.3s%.3s\n", x, y);
    say("lseek0", lseek(fd, 0, SEEK_SET));
    say("readv", readv(fd, rv, 2));
    int minus_one = -1;
    say("readv_bad_count", readv(fd, rv, *(volatile int *)&minus_one));
    say("fsync", fsync(fd));
    say("fdatasync", fdatasync(fd));
    say("ftruncate", ftruncate(fd, 7));
    say("ftruncate_negative", ftruncate(fd, -1));
    struct stat st;
    fstat(fd, &st);
    printf("size %ld\n", (long)st.st_size);
    say("fallocate", fallocate(fd, 0, 0, 4096));
    struct statx sx;
    say("statx", statx(AT_FDCWD, path("a"), 0, STATX_SIZE, &sx));
    printf("statx_size %llu\n", (unsigned long long)sx.stx_size);
    say("statx_missing", statx(AT_FDCWD, path("nope"), 0, STATX_SIZE, &sx));
    say("flock", flock(fd, LOCK_EX));
    say("flock_un", flock(fd, LOCK_UN));
    say("close", close(fd));
    say("close_again", close(fd));
    say("read_badfd", read(fd, buf, 1));
    say("write_badfd", write(-1, buf, 1));
    int ro = open(path("a"), O_RDONLY);
    say_fd("open_ro", ro);
    say("write_ro", write(ro, "x", 1));
    say("close_ro", close(ro));
    say_fd("open_missing", open(path("missing/x"), O_RDONLY));
    say_fd("open_excl", open(path("a"), O_CREAT | O_EXCL | O_WRONLY, 0644));
    say_fd("open_dir_write", open(dir, O_WRONLY));
    int cfd = creat(path("c"), 0600);
    say_fd("creat", cfd);
    close(cfd);
    say("mkdir", mkdir(path("d"), 0755));
    say("mkdir_again", mkdir(path("d"), 0755));
    say("mkdirat", mkdirat(AT_FDCWD, path("d/e"), 0755));
    say("rmdir_nonempty", rmdir(path("d")));
    say("rename", rename(path("c"), path("d/c2")));
    say("rename_missing", rename(path("c"), path("d/c3")));
    say("renameat2_noreplace", syscall(SYS_renameat2, AT_FDCWD, path("a"), AT_FDCWD,
                                       path("d/c2"), RENAME_NOREPLACE));
    say("symlink", symlink("a", path("s")));
    say("symlink_exists", symlink("a", path("s")));
    say("link", link(path("a"), path("h")));
    say("linkat_missing", linkat(AT_FDCWD, path("zz"), AT_FDCWD, path("h2"), 0));
    int dfd = open(path("d"), O_RDONLY | O_DIRECTORY);
    char dents[4096];
    long n = syscall(SYS_getdents64, dfd, dents, sizeof dents);
    int entries = 0;
    for (long off = 0; off < n;) {
        struct dirent64 *de = (struct dirent64 *)(dents + off);
        entries++;
        off += de->d_reclen;
    }
    printf("getdents64 entries %d\n", entries);
    close(dfd);
    say("unlink", unlink(path("d/c2")));
    say("unlink_missing", unlink(path("d/c2")));
    say("unlinkat_dir", unlinkat(AT_FDCWD, path("d/e"), AT_REMOVEDIR));
    say("rmdir", rmdir(path("d")));
    say("unlink_s", unlink(path("s")));
    say("unlink_h", unlink(path("h")));
    say("unlink_a", unlink(path("a")));
    /* the file position is shared and advanced as read(2) does */
    int f2 = open(path("pos"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    say("write_pos", write(f2, "0123456789", 10));
    lseek(f2, 3, SEEK_SET);
    say("read_pos", read(f2, buf, 4));
    printf("data %.4s pos %ld\n", buf, (long)lseek(f2, 0, SEEK_CUR));
    int f3 = open(path("pos"), O_WRONLY | O_APPEND);
    say("write_append", write(f3, "XY", 2));
    printf("append_pos %ld\n", (long)lseek(f3, 0, SEEK_CUR));
    close(f3);
    close(f2);
    unlink(path("pos"));
}

static void sockets(void)
{
    char buf[64];
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    say_fd("socket", l);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path("sock"));
    say("bind", bind(l, (struct sockaddr *)&a, sizeof a));
    say("bind_again", bind(l, (struct sockaddr *)&a, sizeof a));
    say("accept_not_listening", accept(l, 0, 0));
    say("listen", listen(l, 4));
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    say("connect", connect(c, (struct sockaddr *)&a, sizeof a));
    struct sockaddr_un peer;
    socklen_t plen = sizeof peer;
    int s = accept4(l, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC);
    say_fd("accept4", s);
    printf("peer_len %u\n", plen);
    say("send", send(c, "ping", 4, 0));
    say("recv", recv(s, buf, sizeof buf, 0));
    printf("data %.4s\n", buf);
    say("recv_dontwait_empty", recv(s, buf, sizeof buf, MSG_DONTWAIT));
    struct iovec iov = {"msg!", 4};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    say("sendmsg", sendmsg(s, &mh, 0));
    char rb[8];
    struct iovec riov = {rb, sizeof rb};
    struct msghdr rmh = {.msg_iov = &riov, .msg_iovlen = 1};
    say("recvmsg", recvmsg(c, &rmh, 0));
    printf("data %.4s flags %d\n", rb, rmh.msg_flags);
    say("recv_notsock", recv(0 + open("/dev/null", O_RDONLY), buf, 1, 0));
    say("shutdown", shutdown(c, SHUT_WR));
    say("recv_after_shutdown", recv(s, buf, sizeof buf, 0));
    say("send_after_shutdown", send(c, "x", 1, MSG_NOSIGNAL));
    say("shutdown_bad", shutdown(c, 7));
    struct sockaddr_un missing = {.sun_family = AF_UNIX};
    snprintf(missing.sun_path, sizeof missing.sun_path, "%s", path("nosock"));
    int c2 = socket(AF_UNIX, SOCK_STREAM, 0);
    say("connect_missing", connect(c2, (struct sockaddr *)&missing, sizeof missing));
    close(c2);
    close(s);
    close(c);
    close(l);
    unlink(path("sock"));
    /* datagrams with addresses: recvfrom/sendto */
    int d1 = socket(AF_UNIX, SOCK_DGRAM, 0), d2 = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a1 = {.sun_family = AF_UNIX}, a2 = {.sun_family = AF_UNIX};
    snprintf(a1.sun_path, sizeof a1.sun_path, "%s", path("d1"));
    snprintf(a2.sun_path, sizeof a2.sun_path, "%s", path("d2"));
    bind(d1, (struct sockaddr *)&a1, sizeof a1);
    bind(d2, (struct sockaddr *)&a2, sizeof a2);
    say("sendto", sendto(d1, "dgram", 5, 0, (struct sockaddr *)&a2, sizeof a2));
    struct sockaddr_un from;
    socklen_t flen = sizeof from;
    say("recvfrom", recvfrom(d2, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen));
    printf("from %s len_ok %d\n", strrchr(from.sun_path, '/') + 1, flen > 2);
    say("sendto_missing", sendto(d1, "x", 1, 0, (struct sockaddr *)&missing, sizeof missing));
    close(d1);
    close(d2);
    unlink(path("d1"));
    unlink(path("d2"));
    /* TCP on loopback */
    int t = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    say("tcp_bind", bind(t, (struct sockaddr *)&in, sizeof in));
    socklen_t ilen = sizeof in;
    getsockname(t, (struct sockaddr *)&in, &ilen);
    say("tcp_listen", listen(t, 8));
    int tc = socket(AF_INET, SOCK_STREAM, 0);
    say("tcp_connect", connect(tc, (struct sockaddr *)&in, sizeof in));
    int ts = accept(t, 0, 0);
    say_fd("tcp_accept", ts);
    say("tcp_write", write(tc, "abcdef", 6));
    say("tcp_read", read(ts, buf, 3));
    say("tcp_read2", read(ts, buf, 10));
    struct timeval tv = {0, 20000};
    say("setsockopt_rcvtimeo", setsockopt(ts, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
    say("recv_timeout", recv(ts, buf, sizeof buf, 0));
    say("read_timeout", read(ts, buf, sizeof buf));
    close(tc);
    close(ts);
    close(t);
}

static void pipes(void)
{
    char buf[64];
    int p[2];
    say("pipe2", pipe2(p, O_CLOEXEC));
    say("write", write(p[1], "abc", 3));
    say("read", read(p[0], buf, sizeof buf));
    struct pollfd pf = {p[0], POLLIN, 0};
    say("poll_empty_0", poll(&pf, 1, 0));
    write(p[1], "z", 1);
    say("poll_ready_inf", poll(&pf, 1, -1));
    printf("revents %d\n", pf.revents);
    read(p[0], buf, 1);
    pf.revents = 0;
    say("poll_empty_10ms", poll(&pf, 1, 10));
    printf("revents %d\n", pf.revents);
    int fl = fcntl(p[0], F_GETFL);
    fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
    say("read_nonblock_empty", read(p[0], buf, sizeof buf));
    fcntl(p[0], F_SETFL, fl);
    struct pollfd wf = {p[1], POLLOUT, 0};
    say("poll_out", poll(&wf, 1, -1));
    printf("revents %d\n", wf.revents);
    close(p[0]);
    say("write_no_reader", write(p[1], "x", 1));
    struct pollfd hf = {p[1], POLLOUT, 0};
    say("poll_hup", poll(&hf, 1, -1));
    printf("revents %d\n", hf.revents);
    close(p[1]);
    struct pollfd nf = {p[1], POLLIN, 0};
    say("poll_closed", poll(&nf, 1, -1));
    printf("revents %d\n", nf.revents);
    char big[100000];
    memset(big, 'q', sizeof big);
    int q[2];
    pipe(q);
    fcntl(q[1], F_SETFL, O_NONBLOCK);
    long w = write(q[1], big, sizeof big);
    printf("short_write %d\n", w > 0 && w < (long)sizeof big);
    say("write_full_nonblock", write(q[1], big, sizeof big));
    close(q[0]);
    close(q[1]);
}

static void timers(void)
{
    struct timespec ts = {0, 1000000}, rem = {9, 9};
    say("nanosleep", nanosleep(&ts, &rem));
    printf("rem %ld %ld\n", (long)rem.tv_sec, rem.tv_nsec);
    struct timespec bad = {0, 1000000000};
    say("nanosleep_einval", nanosleep(&bad, 0));
    say("nanosleep_efault", syscall(SYS_nanosleep, (void *)8, 0));
    say("clock_nanosleep_rel", syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, 0));
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    now.tv_nsec = 0;
    say("clock_nanosleep_abs_past", syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, &now, 0));
    clock_gettime(CLOCK_REALTIME, &now);
    now.tv_nsec += 2000000;
    if (now.tv_nsec >= 1000000000) {
        now.tv_sec++;
        now.tv_nsec -= 1000000000;
    }
    say("clock_nanosleep_abs_realtime", syscall(SYS_clock_nanosleep, CLOCK_REALTIME, TIMER_ABSTIME, &now, 0));
    say("clock_nanosleep_boottime", syscall(SYS_clock_nanosleep, CLOCK_BOOTTIME, 0, &ts, 0));
    say("clock_nanosleep_badclock", syscall(SYS_clock_nanosleep, 1234, 0, &ts, 0));
    say("clock_nanosleep_badflags", syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 8, &ts, 0));
    say("clock_nanosleep_thread_cpu", syscall(SYS_clock_nanosleep, CLOCK_THREAD_CPUTIME_ID, 0, &ts, 0));
    say("sched_yield", sched_yield());
}

static void futexes(void)
{
    static uint32_t word = 5;
    struct timespec ts = {0, 1000000};
    say("wait_wrong_value", syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 4, 0, 0, 0));
    say("wait_timeout", syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 5, &ts, 0, 0));
    struct timespec z = {0, 0};
    say("wait_zero_timeout", syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 5, &z, 0, 0));
    say("wake_nobody", syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0));
    say("wait_bitset_zero_mask", syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 5, 0, 0, 0));
    say("wake_bitset_zero_mask", syscall(SYS_futex, &word, FUTEX_WAKE_BITSET_PRIVATE, 1, 0, 0, 0));
    struct timespec abs;
    clock_gettime(CLOCK_MONOTONIC, &abs);
    say("wait_bitset_abs_past", syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 5, &abs, 0, ~0u));
    say("wait_misaligned", syscall(SYS_futex, (char *)&word + 1, FUTEX_WAIT_PRIVATE, 5, 0, 0, 0));
    say("wait_efault", syscall(SYS_futex, (void *)8, FUTEX_WAIT_PRIVATE, 5, 0, 0, 0));
    struct timespec badts = {0, -1};
    say("wait_bad_timeout", syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 5, &badts, 0, 0));
    say("shared_wait_wrong", syscall(SYS_futex, &word, FUTEX_WAIT, 4, 0, 0, 0));
    say("shared_wait_timeout", syscall(SYS_futex, &word, FUTEX_WAIT, 5, &ts, 0, 0));
    say("shared_wake", syscall(SYS_futex, &word, FUTEX_WAKE, 1, 0, 0, 0));
}

/* Every field of a struct stat against the statx of the same file (what
 * a fiber's fstat is made of), and the fields two runs share. */
static void say_stat(const char *name, long r, const struct stat *st, const char *file, int flags)
{
    say(name, r);
    if (r < 0)
        return;
    struct statx x;
    if (statx(AT_FDCWD, file, flags, STATX_BASIC_STATS, &x) < 0) {
        printf("%s statx failed errno=%d\n", name, errno);
        return;
    }
    int same = st->st_ino == x.stx_ino && st->st_dev == makedev(x.stx_dev_major, x.stx_dev_minor) &&
               st->st_rdev == makedev(x.stx_rdev_major, x.stx_rdev_minor) &&
               st->st_mode == x.stx_mode && st->st_nlink == x.stx_nlink && st->st_uid == x.stx_uid &&
               st->st_gid == x.stx_gid && st->st_size == (off_t)x.stx_size &&
               st->st_blksize == (blksize_t)x.stx_blksize && st->st_blocks == (blkcnt_t)x.stx_blocks &&
               st->st_mtim.tv_sec == x.stx_mtime.tv_sec && st->st_mtim.tv_nsec == x.stx_mtime.tv_nsec &&
               st->st_ctim.tv_sec == x.stx_ctime.tv_sec && st->st_ctim.tv_nsec == x.stx_ctime.tv_nsec;
    printf("%s mode=%o nlink=%lu size=%ld rdev=%lx blocks=%ld same_as_statx=%d\n", name,
           (unsigned)st->st_mode, (unsigned long)st->st_nlink, (long)st->st_size,
           (unsigned long)st->st_rdev, (long)st->st_blocks, same);
}

static void stats(void)
{
    struct stat st;
    int fd = open(path("s"), O_RDWR | O_CREAT | O_TRUNC, 0640);
    say("write", write(fd, "twelve bytes", 12));
    say_stat("fstat_file", fstat(fd, &st), &st, path("s"), 0);
    int d = open(dir, O_RDONLY | O_DIRECTORY);
    say_stat("fstat_dir", fstat(d, &st), &st, dir, 0);
    int null = open("/dev/null", O_RDONLY);
    say_stat("fstat_devnull", fstat(null, &st), &st, "/dev/null", 0);
    say("symlink", symlink("s", path("link")));
    say_stat("fstatat_link", fstatat(d, "link", &st, 0), &st, path("link"), 0);
    say_stat("fstatat_nofollow", fstatat(d, "link", &st, AT_SYMLINK_NOFOLLOW), &st, path("link"),
             AT_SYMLINK_NOFOLLOW);
    say_stat("fstatat_empty_path", fstatat(fd, "", &st, AT_EMPTY_PATH), &st, path("s"), 0);
    say("fstatat_missing", fstatat(d, "nope", &st, 0));
    say("fstatat_bad_flags", fstatat(d, "s", &st, 0x2000 /* AT_STATX_FORCE_SYNC: statx's only */));
    say("fstat_badfd", fstat(-1, &st));
    say("fstat_closed", fstat(1000, &st));
    /* a buffer off the stack: the call runs natively, same answers */
    struct stat *heap = malloc(sizeof *heap);
    say_stat("fstat_heap", fstat(fd, heap), heap, path("s"), 0);
    free(heap);
    say("fstat_efault", syscall(SYS_fstat, fd, (void *)8));
    say("fstatat_efault", syscall(SYS_newfstatat, d, "s", (void *)8, 0));
    close(null);
    close(d);
    close(fd);
}

static void suite(void *arg)
{
    const char *s = arg;
    if (!strcmp(s, "files"))
        files();
    else if (!strcmp(s, "stat"))
        stats();
    else if (!strcmp(s, "sockets"))
        sockets();
    else if (!strcmp(s, "pipes"))
        pipes();
    else if (!strcmp(s, "timers"))
        timers();
    else if (!strcmp(s, "futex"))
        futexes();
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    dir = argv[3];
    agg_run(argv[1], suite, argv[2]);
    if (agg_group) {
        struct ferry_group_stats st;
        ferry_group_stats(agg_group, &st);
        fprintf(stderr, "stats aggregated=%lu native=%lu worker=%lu enters=%lu crossings=%lu\n",
                (unsigned long)st.aggregated, (unsigned long)st.native, (unsigned long)st.worker,
                (unsigned long)st.pools[0].enters, (unsigned long)st.crossings);
    }
    return 0;
}
