/* The engine's rings: bounded, many producers and many consumers, no lock.
 * Each cell's sequence number says whose turn it is (a producer's when it
 * equals the position, a consumer's when it is one past), so a slow thread
 * between claiming a cell and filling it holds up only that cell. */
#include <windows.h>

#include "wagg.h"

int wagg_ring_init(struct wagg_ring *r, unsigned cap)
{
    uint64_t bytes = (uint64_t)cap * sizeof(struct wagg_cell);
    r->cells = VirtualAlloc(0, (SIZE_T)bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (!r->cells)
        return -ENOMEM;
    for (unsigned i = 0; i < cap; i++)
        r->cells[i].seq = i;
    r->mask = cap - 1;
    r->head = r->tail = 0;
    return 0;
}

void wagg_ring_free(struct wagg_ring *r)
{
    if (r->cells)
        VirtualFree(r->cells, 0, MEM_RELEASE);
    r->cells = 0;
}

int wagg_ring_push(struct wagg_ring *r, void *a, void *b)
{
    uint64_t pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
    for (;;) {
        struct wagg_cell *c = &r->cells[pos & r->mask];
        uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        int64_t d = (int64_t)(seq - pos);
        if (d == 0) {
            if (__atomic_compare_exchange_n(&r->head, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                c->a = a;
                c->b = b;
                __atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
                return 0;
            }
        } else if (d < 0) {
            return -1;      /* full: the cell still holds the call of a lap ago */
        } else {
            pos = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
        }
    }
}

int wagg_ring_pop(struct wagg_ring *r, void **a, void **b)
{
    uint64_t pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
    for (;;) {
        struct wagg_cell *c = &r->cells[pos & r->mask];
        uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        int64_t d = (int64_t)(seq - (pos + 1));
        if (d == 0) {
            if (__atomic_compare_exchange_n(&r->tail, &pos, pos + 1, 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                *a = c->a;
                *b = c->b;
                __atomic_store_n(&c->seq, pos + r->mask + 1, __ATOMIC_RELEASE);
                return 0;
            }
        } else if (d < 0) {
            return -1;
        } else {
            pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
        }
    }
}

/* Seen from a thread about to sleep: it must see a push made before it
 * announced itself (the seq_cst load pairs with the waker's). */
int wagg_ring_empty(const struct wagg_ring *r)
{
    uint64_t t = __atomic_load_n(&r->tail, __ATOMIC_SEQ_CST);
    const struct wagg_cell *c = &r->cells[t & r->mask];
    return __atomic_load_n(&c->seq, __ATOMIC_SEQ_CST) != t + 1;
}
