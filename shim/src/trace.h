/* Trace mode: errors, times and histograms of one call, into the thread's block. */
#ifndef FERRY_TRACE_H
#define FERRY_TRACE_H

#include <stdint.h>

#include "procfile.h"

/* The calibration of the record's clock (cal_tsc ticks in cal_ns), set
 * whenever a record takes one. */
void ferry_trace_set_rate(uint64_t tsc, uint64_t ns);

void ferry_trace_record(struct ferry_blk *b, long nr, long result, uint64_t t0, uint64_t t1,
                        uint32_t site);

#endif
