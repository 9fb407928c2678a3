/* Small freestanding helpers: the shim links no libc code on its paths, so
 * that nothing it runs can reach a rewritten syscall site or take a libc lock. */
#ifndef FERRY_UTIL_H
#define FERRY_UTIL_H

#include <stddef.h>
#include <stdint.h>

void *ferry_memset(void *dst, int c, size_t n);
void *ferry_memcpy(void *dst, const void *src, size_t n);
size_t ferry_strlen(const char *s);

/* Inline: called for every entry of the environment per name looked up,
 * mostly to find the first byte differs.  It stops at the first difference,
 * so callers may compare a string shorter than n (its NUL differs). */
static inline int ferry_memeq(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return 0;
    return 1;
}

/* The value of an environment entry ("NAME=value") whose name is `name`,
 * else NULL: one pass, which mostly ends at the entry's first byte.  How
 * every lookup of the shim's settings and of kept entries asks. */
static inline const char *ferry_entry_value(const char *entry, const char *name)
{
    while (*name && *name == *entry)
        name++, entry++;
    return !*name && *entry == '=' ? entry + 1 : 0;
}

/* The value of `key` in a NULL-terminated environment, or NULL. */
const char *ferry_env_lookup(char **envp, const char *key);

/* Copy from the program's memory the way the kernel does: a bad pointer is
 * a negative errno, not a crash in the shim. */
long ferry_safe_read(void *dst, const void *src, size_t n);
/* ... and write into it: 0, or -EFAULT when not all of it could be written. */
long ferry_safe_write(void *dst, const void *src, size_t n);

/* Where the user address space ends with 4-level page tables (the kernel's
 * TASK_SIZE_MAX; a process gets addresses beyond only by asking for them
 * under 5-level paging): the last page below 2^47 is not user memory. */
#define FERRY_USER_END 0x7ffffffff000UL
/* ferry_safe_read for pieces: the program's `from` (in the memory of `pid`,
 * which is this process's) into the shim's `to`, one after the other; the
 * bytes read up to the first that cannot be, or a negative errno (also
 * when a piece lies at or beyond FERRY_USER_END: none is read then). */
struct iovec;
long ferry_read_pieces(long pid, const struct iovec *to, unsigned long nto, const struct iovec *from,
                       unsigned long nfrom);

/* `<root>/<dir>/<dev>-<ino>-<size>-<mtime_ns>` for the file whose status
 * is `st`: how the image cache names what it keeps per file
 * (rewriter/cache.py, exec_key).  Returns 0 if there is no root or the name
 * does not fit. */
struct stat;
int ferry_identity_name(const char *root, const char *dir, const struct stat *st, char *out, size_t cap);
/* The same for the file at `path`, which `st` receives the status of; 0 too
 * if it cannot be stat'ed. */
int ferry_identity_path(const char *root, const char *dir, const char *path, char *out, size_t cap,
                        struct stat *st);

/* "<a>:<b>" (decimal, each at most 19 digits, ending at NUL or a newline)
 * into *a and *b: 1, or 0 when `s` is not that. */
int ferry_parse_pair(const char *s, uint64_t *a, uint64_t *b);
/* The same for `n` numbers "<v0>:<v1>:...". */
int ferry_parse_numbers(const char *s, uint64_t *v, int n);

/* An append-only text buffer that never overflows (it truncates and says so
 * through `overflow`). */
struct ferry_buf {
    char *data;
    size_t len;
    size_t cap;
    int overflow;
};

void ferry_buf_str(struct ferry_buf *b, const char *s);
void ferry_buf_u64(struct ferry_buf *b, uint64_t v);
void ferry_buf_i64(struct ferry_buf *b, int64_t v);

/* A large buffer that a process's start leaves alone, or touches only the
 * head of: placed after every other variable (.lbss follows .bss), so that
 * the small ones every start touches share a few pages.  Each page of .bss
 * touched is a page fault in every process (~13 of them before). */
#define FERRY_COLD __attribute__((section(".lbss.ferry")))

/* A small variable that a process's start, or every call, reads but rarely
 * writes: kept in .data, whose page the loader writes anyway (it zeroes the
 * .bss that shares the file's last page), so that reading it is not the
 * fault of a zero page of its own (agg_threads_on, read by every call that
 * leaves the fast path, was one in every process). */
#define FERRY_HOT __attribute__((section(".data.ferry_hot")))

/* A function of the aggregation engine that every process runs (a hook
 * the core calls at a close, an exit, a vfork, an exec), whatever its
 * profile: placed with the core's code at the front of the text
 * (text_order.ld), not among the engine's, 64 KiB further on, which was a
 * page fault of its own in every process (the kernel maps a file's pages
 * 64 KiB at a time around a fault). */
#define FERRY_HOT_TEXT __attribute__((section(".text.hot.ferry")))

/* The calling thread's thread pointer (its TCB, where %fs points). */
static inline unsigned long ferry_tp(void)
{
    unsigned long tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    return tp;
}

/* Where initial-exec TLS variable `v` lives in the thread block at `tp`. */
#define FERRY_TLS_IN(tp, v) ((__typeof__(&(v)))((tp) + ((unsigned long)&(v) - ferry_tp())))

#endif
