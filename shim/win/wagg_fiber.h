/* ferry.dll's carriers and fibers (Windows fibers), and the route hook's
 * per-thread word.
 *
 * A thread is in one of two modes while it is a carrier:
 *  - program mode: a fiber runs the program's code.  The TEB's route word
 *    holds the carrier, so a patched stub's trampoline hands the call to
 *    wagg_route_call; the block slot holds the thread's own block, so the
 *    call is counted where the program made it.
 *  - ferry mode: ferry.dll's own code (the scheduler, the route, the API)
 *    runs.  The route word is 0 (its own calls go straight to the stubs) and
 *    the block slot points at a block nobody reads (its calls are not the
 *    program's).
 * Every place a fiber can be switched away from is in ferry mode, so the
 * scheduler switches to a fiber without changing modes and the fiber puts
 * program mode back itself when it returns into the program.
 */
#ifndef WAGG_FIBER_H
#define WAGG_FIBER_H

#include <stdint.h>

#include "teb.h"
#include "wagg.h"

struct wagg_carrier;

struct ferry_fiber {
    void *handle;                  /* the Windows fiber */
    struct wagg_carrier *c;
    void (*fn)(void *);
    void *arg;
    struct ferry_fiber *next;      /* in the ready queue */
    struct ferry_fiber *joiner;    /* parked in ferry_fiber_join on this one */
    struct ferry_fiber *all_next, *all_prev;   /* the carrier's fibers not yet freed */
    int done, joinable, joined;
    int parked;                    /* its routed call is out (wagg_route_call) */
    unsigned pool;                 /* where that call went */
    uint64_t ready_seq;            /* when it was last made ready */
    void *winsock;                 /* its TEB WinSockData (see schedule, wagg_fiber.c) */
    uint32_t last_error;           /* its TEB LastErrorValue */
    struct ferry_call call;        /* that call; the carrier finds the fiber from it */
};

struct wagg_carrier {
    struct ferry_group *g;
    void *sched;                   /* the thread's own fiber: the scheduler */
    struct ferry_fiber *cur;
    struct ferry_fiber *head, *tail;   /* ready */
    struct ferry_fiber *all;
    unsigned alive;                /* fibers started and not finished */
    unsigned out;                  /* routed calls not yet completed */
    unsigned stored[WAGG_NPOOLS];  /* routed calls not yet kicked, per pool */
    unsigned nstored;              /* their sum */
    uint64_t seq;                  /* fibers made ready so far */
    uint64_t store_mark;           /* seq when the oldest stored call was stored */
    unsigned pool_out[WAGG_NPOOLS];    /* routed calls not yet completed, per pool */
    struct wagg_client *cl;        /* the thread's client of the group */
    uint64_t blk;                  /* the thread's block slot in program mode */
    int slot;                      /* its row in the process file, or -1 */
    uint64_t fibers, switches, peak;
    uint64_t crossings, completed; /* wakes of workers and sleeps on its ring; calls completed */
    void *winsock_spare[64];       /* finished fibers' WinSockData, for the next ones */
    unsigned nwinsock_spare;
};

/* The TEB offsets of the per-thread words: the route word and the block
 * slot (ferry_dll.c; 0 when no stub routes: the process is not in aggregate
 * mode), and the carrier word (the thread's carrier at all times, set up
 * by wagg_init_slots). */
extern uint32_t ferry_route_slot, ferry_block_slot, wagg_carrier_slot;
/* The block ferry mode counts into, which nobody reads (ferry_dll.c) */
extern uint64_t *const ferry_own_blk;

/* The calling thread's carrier, or 0. */
static inline struct wagg_carrier *wagg_current(void)
{
    return wagg_carrier_slot ? (struct wagg_carrier *)ferry_teb_get(wagg_carrier_slot) : 0;
}

/* At start-up, before any stub is patched: 0, or -1 when the TEB has no
 * inline TLS slot left for the carrier word. */
int wagg_init_slots(void);

static inline void wagg_ferry_mode(struct wagg_carrier *c)
{
    if (!ferry_route_slot)
        return;
    c->blk = ferry_teb_get(ferry_block_slot);   /* claimed meanwhile, perhaps */
    ferry_teb_set(ferry_block_slot, (uint64_t)(uintptr_t)ferry_own_blk);
    ferry_teb_set(ferry_route_slot, 0);
}

static inline void wagg_program_mode(struct wagg_carrier *c)
{
    if (!ferry_route_slot)
        return;
    ferry_teb_set(ferry_block_slot, c->blk);
    ferry_teb_set(ferry_route_slot, (uint64_t)(uintptr_t)c);
}

/* In ferry mode, on fiber c->cur: back to the scheduler until it is run again. */
void wagg_fiber_park(struct wagg_carrier *c);
/* In ferry mode: the stored calls leave (one wake of each pool's workers),
 * and the carrier waits for one to complete. */
void wagg_carrier_drain(struct wagg_carrier *c);
/* On the scheduler: f may run again. */
void wagg_fiber_ready(struct wagg_carrier *c, struct ferry_fiber *f);

/* wagg_route.c: the route hook's C (wagg_route_entry.S calls it) */
int wagg_route_call(unsigned index, uint64_t *args, int64_t *result);

#endif
