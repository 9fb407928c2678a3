/* Another thread's name file under fibers.
 *
 * glibc's pthread_setname_np and pthread_getname_np of a thread other than
 * the caller open /proc/self/task/TID/comm, TID the thread's id: under
 * fibers a vtid, for which the kernel has no entry, so both failed (ENOENT)
 * where natively they succeed.  Such an open, once it has failed, is made
 * again on the calling thread's own file (/proc/thread-self/comm: a
 * descriptor of the same kind, with the caller's flags), and the
 * descriptor is kept with the vtid it names: its reads give that fiber's
 * name and its writes set it, as the kernel's comm file does (a read, from
 * where the last one ended, of "NAME\n"; a write of up to 15 bytes, taken
 * as they are).  A descriptor that no longer is the one opened (closed
 * other than by close, or a dup2 onto its number) is found out by its
 * inode and forgotten. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"
#include "util.h"

#define ENOENT_ 2
#define ESRCH_ 3
#define EFAULT_ 14
#define NAME_FILES 16

static size_t strnlen_(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i])
        i++;
    return i;
}

/* Zeros, apart from the small variables (FERRY_COLD): a start touches none
 * of it. */
static struct name_file {
    long fd1;                     /* the descriptor + 1; 0: free */
    long vtid;
    uint64_t dev, ino;
    size_t pos;
} files[NAME_FILES] FERRY_COLD;
static int files_lock FERRY_COLD;
int agg_name_files FERRY_COLD;    /* entries in use */

/* The path `src` of call `r`, up to `cap - 1` bytes and NUL-ended; 0 when
 * none of it can be read. */
static size_t read_path(const struct ferry_regs *r, char *out, size_t cap, const char *src)
{
    size_t room = 4096 - ((uintptr_t)src & 4095), n = room < cap - 1 ? room : cap - 1;
    if (ferry_read_arg(r, out, src, n) != (long)n)
        return 0;
    size_t len = strnlen_(out, n);
    if (len == n && n < cap - 1 && ferry_read_arg(r, out + n, src + n, cap - 1 - n) == (long)(cap - 1 - n))
        n = cap - 1;
    out[n] = 0;
    return strnlen_(out, n);
}

static const char *skip_number(const char *p, long *v)
{
    long n = 0;
    const char *start = p;
    while (*p >= '0' && *p <= '9' && p - start < 10)
        n = n * 10 + (*p++ - '0');
    *v = n;
    return p > start ? p : 0;
}

static const char *skip(const char *p, const char *word)
{
    size_t n = ferry_strlen(word);
    return ferry_memeq(p, word, n) ? p + n : 0;
}

/* The vtid that /proc/self/task/TID/comm or /proc/PID/task/TID/comm (PID
 * this process's) names, or -1. */
static long named_thread(const char *p)
{
    long pid, tid;
    if (!(p = skip(p, "/proc/")))
        return -1;
    const char *q = skip(p, "self/");
    if (!q && (q = skip_number(p, &pid)) && (*q != '/' || pid != ferry_raw0(SYS_getpid)))
        return -1;
    if (!q || !(q = skip(q + (*q == '/'), "task/")) || !(q = skip_number(q, &tid)) ||
        !(q = skip(q, "/comm")) || *q)
        return -1;
    return tid;
}

/* The entry of `fd`, or a free one for -1. */
static struct name_file *entry(long fd)
{
    for (unsigned i = 0; i < NAME_FILES; i++)
        if (files[i].fd1 == fd + 1)
            return &files[i];
    return 0;
}

void agg_name_file_open(long nr, struct ferry_regs *r)
{
    if (!agg_thread_fiber() || agg_self->busy || (long)r->rax != -ENOENT_)
        return;
    const char *path = (const char *)(nr == SYS_openat ? r->rsi : r->rdi);
    long flags = nr == SYS_openat ? r->rdx : r->rsi;
    char p[64];
    long tid;
    /* an absolute path (named_thread's): openat's directory plays no part */
    if (!read_path(r, p, sizeof(p), path) || (tid = named_thread(p)) < 0)
        return;
    int alive = agg_thread_hold(tid) != 0;
    agg_thread_let_go();
    if (!alive)
        return;
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, "/proc/thread-self/comm", flags & ~(long)O_CREAT, 0);
    struct stat sb;
    if (fd < 0)
        return;
    if (ferry_raw2(SYS_fstat, fd, &sb) != 0) {
        ferry_raw1(SYS_close, fd);
        return;
    }
    agg_lock(&files_lock);
    struct name_file *e = entry(fd);  /* a number left from a close the engine did not see */
    if (!e)
        e = entry(-1);
    if (e) {
        if (!e->fd1)
            __atomic_add_fetch(&agg_name_files, 1, __ATOMIC_RELAXED);
        *e = (struct name_file){fd + 1, tid, sb.st_dev, sb.st_ino, 0};
    }
    agg_unlock(&files_lock);
    if (!e) {
        ferry_raw1(SYS_close, fd);
        return;
    }
    r->rax = fd;
}

static void forget(struct name_file *e)
{
    e->fd1 = 0;
    __atomic_sub_fetch(&agg_name_files, 1, __ATOMIC_RELAXED);
}

void agg_name_file_closed(long fd)
{
    agg_lock(&files_lock);
    struct name_file *e = entry(fd);
    if (e)
        forget(e);
    agg_unlock(&files_lock);
}

int agg_name_file_io(struct ferry_regs *r)
{
    long fd = r->rdi, nr = r->rax;
    agg_lock(&files_lock);
    struct name_file *e = entry(fd), copy = e ? *e : (struct name_file){0};
    agg_unlock(&files_lock);
    if (!e)
        return 0;
    struct stat sb;
    if (ferry_raw2(SYS_fstat, fd, &sb) != 0 || sb.st_dev != copy.dev || sb.st_ino != copy.ino) {
        agg_name_file_closed(fd);
        return 0;
    }
    char name[16] = {0};
    struct agg_fiber *t = agg_thread_hold(copy.vtid);
    if (t && nr == SYS_read)
        ferry_memcpy(name, t->name, sizeof(name));
    if (t && nr == SYS_write) {
        size_t n = (size_t)r->rdx < 15 ? (size_t)r->rdx : 15;
        if (ferry_read_arg(r, name, (const void *)r->rsi, n) != (long)n)
            r->rax = -EFAULT_;
        else {
            agg_thread_rename(t, name);
            r->rax = r->rdx;
        }
    }
    agg_thread_let_go();
    if (!t) {
        r->rax = -ESRCH_;
        return 1;
    }
    if (nr != SYS_read)
        return 1;
    char text[17];
    size_t len = strnlen_(name, 15);
    ferry_memcpy(text, name, len);
    text[len++] = '\n';
    size_t n = copy.pos < len ? len - copy.pos : 0;
    if (n > (size_t)r->rdx)
        n = r->rdx;
    if (n && ferry_write_arg(r, (void *)r->rsi, text + copy.pos, n)) {
        r->rax = -EFAULT_;
        return 1;
    }
    agg_lock(&files_lock);
    if (e->fd1 == fd + 1)
        e->pos = copy.pos + n;
    agg_unlock(&files_lock);
    r->rax = n;
    return 1;
}
