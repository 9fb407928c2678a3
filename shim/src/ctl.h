/* The contract between a rewritten module and the shim.
 *
 * The rewriter (rewriter/layout.py mirrors every number here) adds two
 * segments to a module: an executable one with one trampoline per patched
 * site, and a writable one that starts with struct ferry_ctl.  Trampolines
 * read ctl->vector; while it is NULL they execute the original `syscall`
 * themselves, so a rewritten module behaves natively until the shim has found
 * it.  The shim finds control blocks by their magic at the start of a writable
 * PT_LOAD segment and stores its vector there.
 */
#ifndef FERRY_CTL_H
#define FERRY_CTL_H

#include <stdint.h>

#include "layout.h"

#define FERRY_CTL_MAGIC "FERRY\0CTL\0v1\0\0\0\0"
#define FERRY_CTL_MAGIC_LEN 16
#define FERRY_CTL_VERSION 1

struct ferry_vector {
    void *entry;        /* before the call (every intercepted call) */
    void *post;         /* after a call run in the trampoline's context */
};

struct ferry_site_rec {
    uint32_t id;        /* index of the site in the module's manifest */
    int32_t nr;         /* syscall number known statically, or -1 */
    uint64_t global;    /* set by the shim: index in the process's site table + 1 */
};

struct ferry_ctl {
    char magic[FERRY_CTL_MAGIC_LEN];
    const struct ferry_vector *vector;  /* offset 16: written by the shim */
    uint32_t nsites;                    /* offset 24 */
    uint32_t version;                   /* offset 28 */
    uint64_t renumbered;                /* offset 32: set by the shim once it wrote a site's
                                           `global` (the file has each as the first module's) */
    uint64_t reserved[3];               /* offset 40 */
    struct ferry_site_rec sites[];      /* offset 64 */
};

_Static_assert(__builtin_offsetof(struct ferry_ctl, vector) == 16, "ctl layout");
_Static_assert(__builtin_offsetof(struct ferry_ctl, sites) == 64, "ctl layout");
_Static_assert(sizeof(struct ferry_site_rec) == 16, "site record layout");

#endif
