/* A static program's start (FERRY_STATIC build): the shim relocates itself
 * and sets itself up from the initial stack before the program's own entry
 * runs (static_start.S).  No ld.so is there: the program's modules are its
 * one image, found from the auxiliary vector. */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "shim.h"
#include "static.h"
#include "util.h"

/* Written by the rewriter (rewriter/static_embed.py): where it put the shim
 * and where the program started before.  Both are the program's link-time
 * addresses; the program's load bias (static-pie) is added here. */
__attribute__((used)) struct ferry_static_config ferry_static_config = {
    .magic = FERRY_STATIC_MAGIC,
};
/* The original entry, absolute: static_start.S jumps through it. */
__attribute__((used)) unsigned long ferry_static_target;

static const ElfW(Phdr) *prog_phdr;
static unsigned prog_phnum;
static unsigned long prog_bias;

extern char __ehdr_start[] __attribute__((visibility("hidden")));

/* Apply the shim's own R_X86_64_RELATIVE relocations: the only kind its
 * link leaves (shim/Makefile checks).  Runs before anything else, so it
 * reads only its arguments and what they point at. */
void ferry_static_relocate(char *base, const ElfW(Dyn) *dyn)
{
    const ElfW(Rela) *rela = 0;
    unsigned long size = 0, ent = sizeof(ElfW(Rela));
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_RELA)
            rela = (const ElfW(Rela) *)(base + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_RELASZ)
            size = dyn->d_un.d_val;
        else if (dyn->d_tag == DT_RELAENT)
            ent = dyn->d_un.d_val;
    }
    for (unsigned long off = 0; rela && off + ent <= size; off += ent) {
        const ElfW(Rela) *r = (const ElfW(Rela) *)((const char *)rela + off);
        if (ELF64_R_TYPE(r->r_info) == R_X86_64_RELATIVE)
            *(unsigned long *)(base + r->r_offset) = (unsigned long)base + r->r_addend;
    }
}

/* The program's one module, as ld.so's dl_iterate_phdr would show it:
 * shim.c finds the rewritten program's control block through it. */
int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
    struct dl_phdr_info info;
    ferry_memset(&info, 0, sizeof(info));
    info.dlpi_addr = prog_bias;
    info.dlpi_name = "";
    info.dlpi_phdr = prog_phdr;
    info.dlpi_phnum = (ElfW(Half))prog_phnum;
    return prog_phdr ? cb(&info, sizeof(info), data) : 0;
}

/* No loader ever changes a static program's modules: nothing to hook. */
struct r_debug _r_debug;

/* ferry_start takes Ferry's settings out of the environment array, which
 * then ends earlier; a static program's start code finds the auxiliary
 * vector right after that array's end (ld.so has already read it for a
 * dynamic one), so it moves down to follow. */
static void follow_environment(char **envp, char **auxv)
{
    char **end = envp;
    while (*end)
        end++;
    if (end + 1 == auxv)
        return;
    long *from = (long *)auxv, *to = (long *)(end + 1);
    /* downwards, overlapping: each pair is read before anything writes it */
    for (size_t i = 0;; i += 2) {
        long type = from[i], value = from[i + 1];
        to[i] = type;
        to[i + 1] = value;
        if (type == AT_NULL)
            break;
    }
}

void ferry_static_init(long *sp)
{
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    char **envp = argv + argc + 1;
    char **e = envp;
    while (*e)
        e++;
    for (ElfW(auxv_t) *a = (ElfW(auxv_t) *)(e + 1); a->a_type != AT_NULL; a++) {
        if (a->a_type == AT_PHDR)
            prog_phdr = (const ElfW(Phdr) *)a->a_un.a_val;
        else if (a->a_type == AT_PHNUM)
            prog_phnum = (unsigned)a->a_un.a_val;
    }
    prog_bias = (unsigned long)__ehdr_start - ferry_static_config.shim_vaddr;
    ferry_static_target = prog_bias + ferry_static_config.entry;
    if (ferry_static_thread_main() != 0)
        return;  /* no per-thread state: the program runs as if without the shim */
    ferry_start(argc, argv, envp);
    follow_environment(envp, e + 1);
}
