#define _GNU_SOURCE
#include "util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "raw.h"
#include "sandbox.h"
#include "store.h"

const char *ferry_env_lookup(char **envp, const char *key)
{
    for (char **e = envp; e && *e; e++) {
        const char *v = ferry_entry_value(*e, key);
        if (v)
            return v;
    }
    return 0;
}

/* process_vm_writev with its two sides swapped: its local side, here the
 * program's memory, is read as a system call reads its caller's
 * (copy_from_user: a page not there is a fault like any other, a bad
 * address ends the copy), and only its remote side, the shim's buffer, is
 * pinned.  process_vm_readv pins every page it reads, each piece apart, and
 * a pin copies a page still shared with the parent after a fork: a fork
 * child's exec hook copied every page of the shell's it read the
 * environment from (64 pieces on 64 pages: 139 us and 70 faults, against 17
 * us and 6; 16 pieces of one process's own pages 7.4 us, 1.8 now). */
long ferry_read_pieces(long pid, const struct iovec *to, unsigned long nto, const struct iovec *from,
                       unsigned long nfrom)
{
    return ferry_raw6(SYS_process_vm_writev, pid, (long)from, (long)nfrom, (long)to, (long)nto, 0);
}

/* Whether the program's filter (sandbox.h) kept the kernel from copying:
 * it refused process_vm_writev (EPERM), or getpid, which left no pid to
 * copy by (ESRCH).  The memory is then read or written directly, as the
 * program's own calls use the same pointer; a bad pointer, which the
 * kernel answers EFAULT, faults here instead. */
static int refused_by_filter(long r)
{
    return (r == -EPERM || r == -ESRCH) && ferry_sandbox_on;
}

long ferry_safe_read(void *dst, const void *src, size_t n)
{
    struct iovec to = {dst, n}, from = {(void *)src, n};
    long got = ferry_read_pieces(ferry_memory_pid(), &to, 1, &from, 1);
    if (refused_by_filter(got)) {
        ferry_memcpy(dst, src, n);
        return (long)n;
    }
    return got;
}

long ferry_safe_write(void *dst, const void *src, size_t n)
{
    struct iovec local = {(void *)src, n}, remote = {dst, n};
    long r = ferry_raw6(SYS_process_vm_writev, ferry_memory_pid(), (long)&local, 1, (long)&remote,
                        1, 0);
    if (refused_by_filter(r)) {
        ferry_memcpy(dst, src, n);
        return 0;
    }
    return r == (long)n ? 0 : -EFAULT;
}

int ferry_identity_name(const char *root, const char *dir, const struct stat *st, char *out, size_t cap)
{
    if (!root || !root[0])
        return 0;
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, root);
    ferry_buf_str(&b, "/");
    ferry_buf_str(&b, dir);
    ferry_buf_str(&b, "/");
    ferry_buf_u64(&b, st->st_dev);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, st->st_ino);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, (uint64_t)st->st_size);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, (uint64_t)st->st_mtim.tv_sec * 1000000000ULL + (uint64_t)st->st_mtim.tv_nsec);
    out[b.overflow ? 0 : b.len] = 0;
    return !b.overflow;
}

int ferry_identity_path(const char *root, const char *dir, const char *path, char *out, size_t cap,
                        struct stat *st)
{
    if (!root || !root[0] || ferry_raw4(SYS_newfstatat, AT_FDCWD, path, st, 0) != 0)
        return 0;
    return ferry_identity_name(root, dir, st, out, cap);
}

/* `rep stosb` / `rep movsb`: a byte loop took ~100 µs for a thread's block
 * (266 KiB) at every vfork; the string instructions run at memory speed on
 * any CPU since Ivy Bridge (ERMS), and the ABI has the direction flag clear. */
void *ferry_memset(void *dst, int c, size_t n)
{
    void *d = dst;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return dst;
}

void *ferry_memcpy(void *dst, const void *src, size_t n)
{
    void *d = dst;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(src), "+c"(n) : : "memory");
    return dst;
}

/* A word at a time once aligned: every start measures its environment and
 * arguments several times over (2-3 KiB each pass), and a byte loop made
 * that ~6 us of each /bin/true.  An aligned load never crosses into the
 * next page, so it reads nothing that may be unmapped. */
size_t ferry_strlen(const char *s)
{
    typedef uint64_t __attribute__((may_alias)) word;
    const char *p = s;
    for (; (uintptr_t)p & 7; p++)
        if (!*p)
            return (size_t)(p - s);
    const word *w = (const word *)p;
    for (;; w++) {
        uint64_t v = *w;
        if ((v - 0x0101010101010101ULL) & ~v & 0x8080808080808080ULL)
            break;
    }
    for (p = (const char *)w; *p; p++)
        ;
    return (size_t)(p - s);
}

/* gcc may emit calls to these even in freestanding code; keep them inside the
 * shim so they never bind to, or interpose on, the program's copies. */
__attribute__((visibility("hidden"))) void *memset(void *dst, int c, size_t n)
{
    return ferry_memset(dst, c, n);
}

__attribute__((visibility("hidden"))) void *memcpy(void *dst, const void *src, size_t n)
{
    return ferry_memcpy(dst, src, n);
}

static void buf_putc(struct ferry_buf *b, char c)
{
    if (b->len + 1 < b->cap)
        b->data[b->len++] = c;
    else
        b->overflow = 1;
}

void ferry_buf_str(struct ferry_buf *b, const char *s)
{
    while (*s)
        buf_putc(b, *s++);
}

void ferry_buf_u64(struct ferry_buf *b, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        buf_putc(b, tmp[--n]);
}

void ferry_buf_i64(struct ferry_buf *b, int64_t v)
{
    if (v < 0) {
        buf_putc(b, '-');
        ferry_buf_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        ferry_buf_u64(b, (uint64_t)v);
    }
}

int ferry_parse_numbers(const char *s, uint64_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        int digits = 0;
        v[i] = 0;
        for (; *s >= '0' && *s <= '9' && digits < 19; s++, digits++)
            v[i] = v[i] * 10 + (uint64_t)(*s - '0');
        int last = i == n - 1;
        if (!digits || (*s != (last ? 0 : ':') && !(last && *s == '\n')))
            return 0;
        s++;
    }
    return 1;
}

int ferry_parse_pair(const char *s, uint64_t *a, uint64_t *b)
{
    uint64_t v[2];
    if (!ferry_parse_numbers(s, v, 2))
        return 0;
    *a = v[0];
    *b = v[1];
    return 1;
}
