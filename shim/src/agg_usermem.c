/* Reads of the program's memory on the engine's paths, without a system
 * call for pages already read.
 *
 * A pointer the program passes may be bad: the kernel answers EFAULT, and
 * so must the engine, so the first read of a page goes through the kernel
 * (ferry_safe_read: ~1.8 us with its getpid).  The futex
 * word of every wait was read so, two system calls of the shim's own per
 * wait, though a program waits on the same few words again and again.
 *
 * Each carrier keeps the pages it has read since the program last changed
 * its mappings in a way that can take a page away: munmap, mremap,
 * mprotect, a MAP_FIXED mmap, brk, shmdt, and madvise other than the
 * advice that keeps pages readable (agg_usermem_call, on the way of each
 * such call, before it runs).  Those calls leave the entry's fast path
 * under fibers (agg_threads_watch).  A page in the carrier's list is read
 * directly; never in a group without the program's threads as fibers
 * (those calls stay on the fast path there), nor without the catch-all
 * (code the shim did not rewrite could unmap unseen).
 *
 * A page unmapped by another thread between the look and the read faults
 * as it did before, between the kernel's read and the direct read of the
 * futex word under its bucket's lock: natively the wait would have ended
 * with EFAULT, and the program raced its own munmap.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agg.h"
#include "catchall.h"
#include "util.h"

#define PAGE_MASK_ (~(uintptr_t)4095)

/* bumped before each call that may take a page away; never 0, which a
 * new carrier's list has */
static uint64_t map_gen = 1;

static int known(struct agg_carrier *c, uintptr_t page, uint64_t gen)
{
    if (c->read_gen != gen || !page)  /* page 0: an empty entry */
        return 0;
    for (unsigned i = 0; i < AGG_READ_PAGES; i++)
        if (c->read_pages[i] == page)
            return 1;
    return 0;
}

static void remember(struct agg_carrier *c, uintptr_t page, uint64_t gen)
{
    if (c->read_gen != gen) {
        ferry_memset(c->read_pages, 0, sizeof(c->read_pages));
        c->read_gen = gen;
        c->read_next = 0;
    }
    c->read_pages[c->read_next++ % AGG_READ_PAGES] = page;
}

FERRY_HOT_TEXT long agg_safe_read(void *dst, const void *src, size_t n)
{
    struct agg_carrier *c = agg_carrier;
    uintptr_t first = (uintptr_t)src & PAGE_MASK_, last = ((uintptr_t)src + n - 1) & PAGE_MASK_;
    /* the calls that take pages away are seen only with the program's
     * threads as fibers (agg_threads_watch), and without the catch-all
     * code the shim did not rewrite may unmap unseen */
    if (!c || !agg_threads_on || !ferry_catchall_on || !n || (uintptr_t)src + n < (uintptr_t)src)
        return ferry_safe_read(dst, src, n);
    uint64_t gen = __atomic_load_n(&map_gen, __ATOMIC_ACQUIRE);
    if (known(c, first, gen) && (last == first || known(c, last, gen))) {
        ferry_memcpy(dst, src, n);
        return (long)n;
    }
    long got = ferry_safe_read(dst, src, n);
    if (got == (long)n) {
        remember(c, first, gen);
        if (last != first)
            remember(c, last, gen);
    }
    return got;
}

/* Advice after which every page of the range reads as before. */
static int keeps_pages(long advice)
{
    switch (advice) {
    case MADV_NORMAL: case MADV_RANDOM: case MADV_SEQUENTIAL: case MADV_WILLNEED:
    case MADV_DONTNEED: case MADV_FREE: case MADV_MERGEABLE: case MADV_UNMERGEABLE:
    case MADV_HUGEPAGE: case MADV_NOHUGEPAGE: case MADV_DONTDUMP: case MADV_DODUMP:
    case MADV_COLD: case MADV_PAGEOUT:
        return 1;
    }
    return 0;
}

void agg_usermem_call(const struct ferry_regs *r)
{
    long nr = r->rax;
    if (nr == SYS_mmap && !(r->r10 & MAP_FIXED))
        return;
    if (nr == SYS_madvise && keeps_pages(r->rdx))
        return;
    agg_usermem_changed();
}

void agg_usermem_changed(void)
{
    __atomic_add_fetch(&map_gen, 1, __ATOMIC_ACQ_REL);
}
