/* Load-time patching from the image cache's patch plans (plan.c). */
#ifndef FERRY_PLAN_H
#define FERRY_PLAN_H

#include <stdint.h>

#include "ctl.h"

/* A patch plan (<cache>/plans/), written by rewriter/plan.py: this header,
 * the trampolines and the control block (each padded to 8), nrefs u32
 * offsets in the trampolines of rel32 fields that refer into the module
 * (padded to 8), then nwindows windows, each a struct ferry_plan_window and
 * its bytes (padded to 8).  ferry.base.layouts gives Python these layouts. */
#define FERRY_PLAN_MAGIC "FERRYPLAN\0v1\0\0\0\0"
#define FERRY_PLAN_MAGIC_LEN 16

struct ferry_plan_header {
    char magic[FERRY_PLAN_MAGIC_LEN];
    uint64_t tramp_vaddr;           /* where the rewritten file has them */
    uint64_t ctl_vaddr;
    uint32_t tramp_size;
    uint32_t ctl_size;
    uint32_t nrefs;
    uint32_t nwindows;
};

struct ferry_plan_window {
    uint64_t vaddr;                 /* the window's first byte in the module */
    uint32_t size;                  /* bytes that follow, starting with `jmp rel32` */
    uint32_t reserved;
};

/* Apply the cached plan of every loaded module that was not rewritten;
 * `enable` is called for each module patched.  Returns how many. */
/* Comma-separated hex addresses whose windows must not be patched. */
void ferry_plans_avoid(const char *list);

int ferry_plans_apply(const char *cache_root, void (*enable)(struct ferry_ctl *, const char *, uint64_t, int));

/* The module whose code holds `addr` is passed over by ferry_plans_apply
 * (neither patched nor marked as tried) until this is called again with 0. */
void ferry_plans_defer(uint64_t addr);

/* Whether the module `info` describes is a rewritten file (a control block
 * in a writable segment), and whether its code holds `addr`. */
struct dl_phdr_info;
int ferry_module_has_ctl(const struct dl_phdr_info *info);
int ferry_module_holds_code(const struct dl_phdr_info *info, uint64_t addr);
/* Whether a module's code runs on small, unguarded stacks (Go's goroutines):
 * its calls' C path then runs on the shim's own stack (entry.S). */
int ferry_module_small_stacks(const void *phdrs, int phnum, uint64_t base);

/* The file of the module whose text at `addr` is mapped from its plan's
 * patched copy; "" where `addr` is in trampolines mapped from the cache
 * (no module of their own); NULL elsewhere. */
const char *ferry_plans_module_at(uint64_t addr);

#endif
