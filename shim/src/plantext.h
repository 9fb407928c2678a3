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
 * has them are the same bytes in every process, and so is the control block
 * that follows them, until the shim writes it: kept once in a file beside
 * the copy (the trampolines, then the control block `ctl_at` bytes from
 * their start, a page boundary) and mapped at `at`, the trampolines private,
 * read-only and executable, the control block private and writable, so that
 * their pages are the page cache's: ~45 KiB of trampolines were copied into
 * each process, and the control block (8 KiB of libc's) was three pages
 * zeroed and written, where the shim writes one of them (its vector).  0, or
 * -errno, with at most the control block mapped (the same bytes as the
 * plan's). */
int ferry_plantext_tramp_map(const struct ferry_plantext_key *key, int64_t delta, uint64_t at,
                             uint64_t size, uint64_t ctl_at, uint64_t ctl_size);
/* Keep the `size` bytes at `at` (relocated for `delta`) and the control
 * block at `at + ctl_at` as that file. */
int ferry_plantext_tramp_keep(const struct ferry_plantext_key *key, int64_t delta, uint64_t at,
                              uint64_t size, uint64_t ctl_at, uint64_t ctl_size);

#endif
