/* The static build (FERRY_STATIC): what its start stub, its thread blocks
 * and the rewriter that embeds it agree on. */
#ifndef FERRY_STATIC_H
#define FERRY_STATIC_H

#include <stdint.h>

/* Found by the rewriter through the shim's symbol table; the magic makes
 * sure it is the struct it expects (rewriter/static_embed.py). */
#define FERRY_STATIC_MAGIC "FERRY-STATIC-1\n"
struct ferry_static_config {
    char magic[16];
    uint64_t entry;         /* the program's original e_entry */
    uint64_t shim_vaddr;    /* where the rewriter put the shim's address 0 */
};

/* The main thread's block, its %gs base set: 0, or -errno. */
int ferry_static_thread_main(void);
/* ferry_post for the static build: a clone child that still has its
 * parent's %gs gets a block of its own first. */
void ferry_static_post(long result);

#endif
