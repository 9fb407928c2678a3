/* System calls made by the shim itself.
 *
 * They run from the shim's own text, which is never rewritten, so they can
 * never re-enter the shim; nothing here touches errno or any libc state.
 */
#ifndef FERRY_RAW_H
#define FERRY_RAW_H

#include <linux/errno.h>  /* the kernel's E* values: what a raw call returns, negated */
#include <stdint.h>

#include "procfile.h"
#include "thread.h"

/* The shim's own calls are tallied (in the process file once it exists), so
 * that a tracer's view of a process can be matched call for call against
 * what the shim counted: strace's count = the program's + the shim's own.
 * The header's own[] entries (its first page) take the first numbers used,
 * internal[] the rest. */
extern uint64_t *ferry_internal;
extern uint64_t *ferry_own;

/* A call made on the program's behalf: not tallied as the shim's own. */
static inline long ferry_pass6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The kernel's struct sigaction (not glibc's), for rt_sigaction. */
struct ferry_ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

/* Where the calling thread's own calls are tallied: the table, and in
 * `*own` the entries before it; a vfork child's apart (its spare's table,
 * then its entries: its parent's other threads go on tallying theirs, in
 * the process file); NULL before the process file exists. */
static inline uint64_t *ferry_tally(uint64_t **own)
{
    uint64_t *t = ferry_internal;
    *own = ferry_own;
    if (t && FERRY_THR->internal) {
        t = FERRY_THR->internal;
        *own = t + FERRY_NR_MAX;
    }
    return t;
}

/* `n` calls of `nr` (< FERRY_NR_MAX) in the entry of `own` that holds the
 * number, taken for it at its first call, else in table[nr] once every
 * entry is taken (store.c). */
void ferry_tally_add(uint64_t *own, uint64_t *table, unsigned long nr, uint64_t n);

/* One call of `nr` as the shim's own, made (or to be made) untallied: out
 * of line, as every call site of the shim's own calls has it. */
void ferry_tally_one(long nr);
/* One call of the shim's own, tallied.  Once the program has confined its
 * calls, a call its filters would not let through is not made (-EPERM):
 * sandbox.h.  Out of line: every site was a call already (the tally's). */
long ferry_raw6(long nr, long a, long b, long c, long d, long e, long f);
/* A raw call's result that is an error (-4095..-1). */
#define IS_ERR(v) ((unsigned long)(v) > -4096UL)
#define ferry_raw0(n) ferry_raw6((n), 0, 0, 0, 0, 0, 0)
#define ferry_raw1(n, a) ferry_raw6((n), (long)(a), 0, 0, 0, 0, 0)
#define ferry_raw2(n, a, b) ferry_raw6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define ferry_raw3(n, a, b, c) ferry_raw6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define ferry_raw4(n, a, b, c, d) \
    ferry_raw6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

#endif
