/* libferry: the runtime that rewritten programs call instead of the kernel.
 *
 * Every function returns 0 on success or a negative errno value, in the style
 * of liburing.  A program does not need this header to be intercepted: the
 * rewriter makes it load libferry.so by itself.  The header is for programs
 * and tools that want to read the shim's figures from inside the process.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Syscall numbers at or above this value are counted in `invalid`. */
#ifndef FERRY_NR_MAX
#define FERRY_NR_MAX 512
#endif

struct ferry_counts {
    uint64_t calls[FERRY_NR_MAX];   /* intercepted calls per syscall number */
    uint64_t invalid;               /* calls with a number outside the table */
    uint64_t modules;               /* rewritten modules the shim enabled */
};

/* Sum the calls intercepted so far by every thread of the process. */
int ferry_counts_snapshot(struct ferry_counts *out);

/* Write the counts as JSON to `path` ("%p" becomes the pid); the file is
 * written under a temporary name and renamed, so readers never see half. */
int ferry_stats_write(const char *path);

/* Non-zero once the shim has initialized and enabled the loaded modules. */
int ferry_is_active(void);

#ifdef __cplusplus
}
#endif

#endif
