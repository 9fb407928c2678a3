/* The Windows engine's figures: in the group (ferry_group_stats) and in the
 * process file's aggregation area (shim/src/aggarea.h, the layout
 * libferry.so writes and ferry/aggdata.py reads), the same counters, so
 * `ferry report` shows a PE run's aggregation as it shows an ELF run's.
 * The file's part is a no-op when the process has no process file. */
#ifndef WAGG_STATS_H
#define WAGG_STATS_H

#include <stdint.h>

#include "wagg.h"

enum wagg_stat_field {
    WAGG_ST_AGGREGATED, WAGG_ST_NATIVE, WAGG_ST_WORKER, WAGG_ST_CROSSINGS, WAGG_ST_FIBERS,
    WAGG_ST_SWITCHES, WAGG_ST_CARRIERS,
};
enum wagg_pool_field {
    WAGG_PST_SUBMITTED, WAGG_PST_COMPLETED, WAGG_PST_ENTERS, WAGG_PST_WAIT_NS, WAGG_PST_DEPTH_SUM,
};

void wagg_stat(struct ferry_group *g, enum wagg_stat_field f, uint64_t n);
void wagg_stat_pool(struct ferry_group *g, unsigned pool, enum wagg_pool_field f, uint64_t n);
/* one batch of n calls handed to a pool in one go (its size's bucket) */
void wagg_stat_batch(struct ferry_group *g, unsigned pool, unsigned n);
void wagg_stat_max_depth(struct ferry_group *g, unsigned pool, uint64_t depth);
/* a time in TSC ticks as ns, by the process file's calibration */
uint64_t wagg_tsc_ns(uint64_t ticks);

/* A carrier's row (-1: the rows are all taken), and its figures at its end */
int wagg_stat_carrier_slot(void);
void wagg_stat_carrier(int slot, uint64_t fibers, uint64_t switches, uint64_t peak);
void wagg_stat_carrier_io(int slot, uint64_t crossings, uint64_t completed);

/* A new group: its pools' settings and its routing table */
void wagg_stats_group(const struct ferry_group_config *cfg);

/* ferry_dll.c: the area, or 0 without a process file */
void *ferry_agg_area(void);
/* ferry_dll.c: the process file's header, or 0 */
const struct ferry_proc_header *ferry_proc_header(void);

#endif
