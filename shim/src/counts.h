/* Per-thread call counters.
 *
 * Each thread counts into its own block (no locks, no atomics on the hot
 * path: one `add` instruction, which a signal handler cannot split).  Blocks
 * are linked into one list so that a writer can sum them; a thread that exits
 * folds its block into `retired` and frees the block for the next thread.
 */
#ifndef FERRY_COUNTS_H
#define FERRY_COUNTS_H

#include <stdint.h>

#include "layout.h"

struct ferry_blk {
    struct ferry_blk *next;     /* offset 0: list of all blocks, never unlinked */
    uint32_t in_use;            /* offset 8: owned by a live thread */
    uint32_t pad;
    uint64_t reserved[6];
    uint64_t calls[FERRY_NR_MAX];  /* offset FERRY_BLK_CALLS */
    uint64_t invalid;
};

_Static_assert(__builtin_offsetof(struct ferry_blk, calls) == FERRY_BLK_CALLS, "blk layout");

extern __thread struct ferry_blk *ferry_tls_block __attribute__((tls_model("initial-exec")));

/* The calling thread's block, allocating or reusing one if needed; NULL if
 * memory could not be had (the call is then simply not counted). */
struct ferry_blk *ferry_blk_get(void);

/* Count one call on the calling thread. */
void ferry_blk_count(long nr);

/* The calling thread is about to exit: keep its counts, free its block. */
void ferry_blk_retire(void);

/* In a new child process: forget the parent's counts. */
void ferry_blk_reset_after_fork(void);

/* A vfork child shares this thread's memory, TLS included, until it execs
 * or exits; its calls must not land in the parent's counters.  The parent
 * prepares a spare block before the call (no allocation in the child); the
 * child switches to it; the parent switches back when it resumes. */
int ferry_blk_spare_prepare(void);
void ferry_blk_enter_vfork_child(void);
void ferry_blk_leave_vfork_child(void);

/* Sum of all threads, past and present (in a vfork child: its own calls). */
void ferry_blk_sum(uint64_t *calls, uint64_t *invalid);

#endif
