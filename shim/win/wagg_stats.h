/* The Windows engine's figures in the process file's aggregation area
 * (shim/src/aggarea.h, the layout libferry.so writes and ferry/aggdata.py
 * reads), so that `ferry report` shows a PE run's aggregation as it shows an
 * ELF run's.  The group's counters (struct ferry_group's st, its pools' st)
 * are where the engine counts; the area gets what each group added since it
 * was last published: at a carrier's end, at the group's end and at the
 * process's.  What the group does not count (carriers, carrier rows, queue
 * depth) goes into the area directly.  No-ops without a process file. */
#ifndef WAGG_STATS_H
#define WAGG_STATS_H

#include <stdint.h>

#include "wagg.h"

/* A new group: its settings and routing table in the area; published from now on */
void wagg_stats_group(struct ferry_group *g);
/* The group's counters added since the last time, into the area */
void wagg_stats_publish(struct ferry_group *g);
/* The group ends: published, then forgotten */
void wagg_stats_forget(struct ferry_group *g);
/* The process ends: every group published */
void wagg_stats_publish_all(void);

/* A carrier: its row (-1: the rows are all taken), its figures at its end */
int wagg_stat_carrier_slot(void);
void wagg_stat_carrier(int slot, uint64_t fibers, uint64_t switches, uint64_t peak,
                       uint64_t handoffs, uint64_t completed);
/* calls in flight on `pool` when a batch left (the area's mean depth) */
void wagg_stat_depth(unsigned pool, uint64_t depth);

/* ferry_dll.c: the area, or 0 without a process file */
void *ferry_agg_area(void);

#endif
