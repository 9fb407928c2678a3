/* Load-time patching from the image cache's patch plans (plan.c). */
#ifndef FERRY_PLAN_H
#define FERRY_PLAN_H

#include <stdint.h>

#include "ctl.h"

/* Apply the cached plan of every loaded module that was not rewritten;
 * `enable` is called for each module patched.  Returns how many. */
/* Comma-separated hex addresses whose windows must not be patched. */
void ferry_plans_avoid(const char *list);

int ferry_plans_apply(const char *cache_root, void (*enable)(struct ferry_ctl *, const char *, uint64_t));

/* The file of the module whose text at `addr` is mapped from its plan's
 * patched copy; "" where `addr` is in trampolines mapped from the cache
 * (no module of their own); NULL elsewhere. */
const char *ferry_plans_module_at(uint64_t addr);

#endif
