/* Trace mode: errors, times and histograms of one call, into the thread's block. */
#ifndef FERRY_TRACE_H
#define FERRY_TRACE_H

#include <stdint.h>

#include "procfile.h"

void ferry_trace_record(struct ferry_blk *b, long nr, long result, uint64_t t0, uint64_t t1,
                        uint32_t site);

#endif
