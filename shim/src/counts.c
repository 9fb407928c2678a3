#include "counts.h"

#include <sys/mman.h>
#include <sys/syscall.h>

#include "raw.h"
#include "util.h"

__thread struct ferry_blk *ferry_tls_block __attribute__((tls_model("initial-exec")));

static __thread struct ferry_blk *tls_spare __attribute__((tls_model("initial-exec")));
static __thread struct ferry_blk *tls_vfork_saved __attribute__((tls_model("initial-exec")));
static __thread int tls_in_vfork_child __attribute__((tls_model("initial-exec")));

static struct ferry_blk *blk_list;
static struct ferry_blk retired;

static struct ferry_blk *blk_map(void)
{
    long p = ferry_raw6(SYS_mmap, 0, sizeof(struct ferry_blk), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return (p < 0 && p > -4096) ? 0 : (struct ferry_blk *)p;
}

static struct ferry_blk *blk_claim_free(void)
{
    for (struct ferry_blk *b = __atomic_load_n(&blk_list, __ATOMIC_ACQUIRE); b; b = b->next) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&b->in_use, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            return b;
    }
    return 0;
}

struct ferry_blk *ferry_blk_get(void)
{
    struct ferry_blk *b = ferry_tls_block;
    if (b)
        return b;
    b = blk_claim_free();
    if (!b) {
        b = blk_map();
        if (!b)
            return 0;
        b->in_use = 1;
        struct ferry_blk *head = __atomic_load_n(&blk_list, __ATOMIC_RELAXED);
        do {
            b->next = head;
        } while (!__atomic_compare_exchange_n(&blk_list, &head, b, 1, __ATOMIC_RELEASE,
                                              __ATOMIC_RELAXED));
    }
    ferry_tls_block = b;
    return b;
}

void ferry_blk_count(long nr)
{
    struct ferry_blk *b = ferry_blk_get();
    if (!b)
        return;
    /* A single add instruction: a signal handler on this thread that also
     * counts cannot interleave with it. */
    uint64_t *slot = ((unsigned long)nr < FERRY_NR_MAX) ? &b->calls[nr] : &b->invalid;
    __asm__ volatile("addq $1, %0" : "+m"(*slot));
}

void ferry_blk_retire(void)
{
    struct ferry_blk *b = ferry_tls_block;
    if (!b)
        return;
    ferry_tls_block = 0;
    for (int i = 0; i < FERRY_NR_MAX; i++) {
        if (b->calls[i]) {
            __atomic_fetch_add(&retired.calls[i], b->calls[i], __ATOMIC_RELAXED);
            b->calls[i] = 0;
        }
    }
    if (b->invalid) {
        __atomic_fetch_add(&retired.invalid, b->invalid, __ATOMIC_RELAXED);
        b->invalid = 0;
    }
    __atomic_store_n(&b->in_use, 0, __ATOMIC_RELEASE);
}

void ferry_blk_reset_after_fork(void)
{
    /* Only the calling thread exists in the child; the other threads' blocks
     * become free for the child's future threads. */
    for (struct ferry_blk *b = blk_list; b; b = b->next) {
        ferry_memset(b->calls, 0, sizeof(b->calls));
        b->invalid = 0;
        b->in_use = (b == ferry_tls_block);
    }
    ferry_memset(retired.calls, 0, sizeof(retired.calls));
    retired.invalid = 0;
}

int ferry_blk_spare_prepare(void)
{
    if (!tls_spare)
        tls_spare = blk_map();
    return tls_spare ? 0 : -12;
}

void ferry_blk_enter_vfork_child(void)
{
    if (tls_in_vfork_child || !tls_spare)
        return;  /* nested, or no spare: count with the parent, as before */
    ferry_memset(tls_spare->calls, 0, sizeof(tls_spare->calls));
    tls_spare->invalid = 0;
    tls_vfork_saved = ferry_tls_block;
    ferry_tls_block = tls_spare;
    tls_in_vfork_child = 1;
}

void ferry_blk_leave_vfork_child(void)
{
    if (!tls_in_vfork_child)
        return;
    ferry_tls_block = tls_vfork_saved;
    tls_in_vfork_child = 0;
}

void ferry_blk_sum(uint64_t *calls, uint64_t *invalid)
{
    if (tls_in_vfork_child) {
        for (int i = 0; i < FERRY_NR_MAX; i++)
            calls[i] = ferry_tls_block->calls[i];
        *invalid = ferry_tls_block->invalid;
        return;
    }
    for (int i = 0; i < FERRY_NR_MAX; i++)
        calls[i] = __atomic_load_n(&retired.calls[i], __ATOMIC_RELAXED);
    *invalid = __atomic_load_n(&retired.invalid, __ATOMIC_RELAXED);
    for (struct ferry_blk *b = __atomic_load_n(&blk_list, __ATOMIC_ACQUIRE); b; b = b->next) {
        for (int i = 0; i < FERRY_NR_MAX; i++)
            calls[i] += __atomic_load_n(&b->calls[i], __ATOMIC_RELAXED);
        *invalid += __atomic_load_n(&b->invalid, __ATOMIC_RELAXED);
    }
}
