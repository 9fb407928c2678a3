/* The TSC's rate, for turning ticks into ns (tscrate.c). */
#ifndef FERRY_TSCRATE_H
#define FERRY_TSCRATE_H

#include <stdint.h>

/* `*tsc` ticks make `*ns` ns: from `handed_down` ("<ticks>:<ns>", FERRY_TSC)
 * when given, else the kernel's conversion, else what this boot's first
 * measurement left in `cache_root`, else measured now (1 ms) and left there. */
void ferry_tsc_rate(const char *handed_down, const char *cache_root, uint64_t *tsc, uint64_t *ns);

#endif
