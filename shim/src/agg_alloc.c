/* The three libc functions liburing.a (built nolibc) needs, kept inside the
 * shim: hidden, so the program's own calloc/free are never replaced, and
 * over mmap, so that nothing here can reach a rewritten syscall site or a
 * libc lock. Allocations are few and long-lived (rings, probes, groups,
 * carriers, fibers), so a mapping each is good enough. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agg.h"
#include "raw.h"

#define HDR 16

void *agg_calloc(size_t n, size_t size)
{
    if (size && n > (~(size_t)0 - 4096) / size)
        return 0;
    size_t len = n * size + HDR;
    long p = ferry_raw6(SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if ((unsigned long)p > -4096UL)
        return 0;
    *(size_t *)p = len;
    return (char *)p + HDR;
}

void agg_free(void *ptr)
{
    if (!ptr)
        return;
    char *base = (char *)ptr - HDR;
    ferry_raw2(SYS_munmap, base, *(size_t *)base);
}

__attribute__((visibility("hidden"))) void *calloc(size_t n, size_t size)
{
    return agg_calloc(n, size);
}

__attribute__((visibility("hidden"))) void free(void *ptr)
{
    agg_free(ptr);
}

/* liburing.a was built with the stack protector; a smashed canary in the
 * shim is fatal, as it would be in libc. */
__attribute__((visibility("hidden"), noreturn)) void __stack_chk_fail(void)
{
    ferry_raw2(SYS_kill, ferry_raw0(SYS_getpid), 6 /* SIGABRT */);
    for (;;)
        ferry_raw1(SYS_exit_group, 127);
}
