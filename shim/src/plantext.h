/* Shared patched text for load-time patching (plantext.c). */
#ifndef FERRY_PLANTEXT_H
#define FERRY_PLANTEXT_H

#include <link.h>
#include <stdint.h>
#include <sys/stat.h>

/* A plan, and the module file it is the plan of. */
struct ferry_plantext_key {
    const char *plan_path;
    const char *module_path;
    struct stat module;
    struct stat plan;
};

/* A plan's windows (plan.c), each handed to `fn` with its jump already
 * moved to where this process put the trampolines. */
struct windows;
int ferry_windows_each(const struct windows *w,
                       int (*fn)(uint64_t vaddr, const unsigned char *bytes, uint32_t len, void *ctx),
                       void *ctx);

/* Map over the executable segments of the module loaded at `base` a copy of
 * its file with the windows of plan `key` in place, for trampolines `delta`
 * bytes from where the rewritten file has them; the copy is made once.
 * 0, or -errno with the module untouched. */
int ferry_plantext_map(const struct ferry_plantext_key *key, int64_t delta, const struct windows *w,
                       uint64_t base, const ElfW(Phdr) *phdr, int phnum);

/* The trampolines a plan places `delta` bytes from where the rewritten file
 * has them are the same bytes in every process: kept once in a file beside
 * the copy and mapped (private, read-only, executable) at `at` over the
 * `size` bytes placed there, so that their pages are the page cache's, not
 * ~45 KiB copied into each process.  0, or -errno with `at` untouched. */
int ferry_plantext_tramp_map(const struct ferry_plantext_key *key, int64_t delta, uint64_t at,
                             uint64_t size);
/* Keep the `size` bytes at `at` (relocated for `delta`) as that file. */
int ferry_plantext_tramp_keep(const struct ferry_plantext_key *key, int64_t delta, uint64_t at,
                              uint64_t size);

#endif
