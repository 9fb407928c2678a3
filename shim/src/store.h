/* Where the shim's figures live: the process file (procfile.h) in the run
 * directory, or the same layout in anonymous memory when there is none. */
#ifndef FERRY_STORE_H
#define FERRY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "procfile.h"
#include "thread.h"

extern struct ferry_proc_header *ferry_hdr;

/* Set up the store of this process image (called once, from the constructor). */
/* `tsc_rate`: FERRY_TSC as handed down ("<ticks>:<ns>"), or NULL;
 * `exe_hint`: FERRY_EXE (exepath.h), or NULL. */
/* `slot_hint`: FERRY_SLOT, the slot a vfork child's exec hook claimed for
 * this image ("<uid>:<file>:<index>:<stride>"), or NULL. */
int ferry_store_open(const char *run_dir, int mode, uint32_t event_capacity, char **argv,
                     const char *tsc_rate, const char *exe_hint, const char *slot_hint);
/* "FERRY_TSC=<ticks>:<ns>" into `out`, for this process's children. */
int ferry_store_rate(char *out, size_t cap);

/* The calling thread's block, claiming one if needed; NULL when there is no
 * room (the call is then not counted, and the header's overflow says so). */
struct ferry_blk *ferry_blk_get(void);
void ferry_blk_count(long nr);
void ferry_blk_retire(void);

/* Around a fork (a clone without CLONE_VM) in the parent: the slots of
 * its child's record and of the program the child may exec are taken
 * before, and forgotten once the call returned. */
void ferry_store_before_fork(void);
void ferry_store_fork_returned(void);
/* A fork child: a new file of its own, starting from zero. */
void ferry_store_after_fork(void);

/* A vfork child shares this thread's memory, TLS included, until it execs
 * or exits: it counts into a spare block its parent prepared, and writes a
 * file of its own (with write(2), never touching the shared mappings). */
int ferry_blk_spare_prepare(void);
void ferry_blk_enter_vfork_child(unsigned long clone_flags);
void ferry_blk_leave_vfork_child(void);
int ferry_in_vfork_child(void);
/* The pid to reach this process's memory by through the kernel
 * (ferry_safe_read): a vfork child's own, known since it began, without a
 * getpid; else getpid's. */
long ferry_memory_pid(void);
/* 64 KiB a vfork child may use instead of its stack (NULL elsewhere): a
 * posix_spawn child's stack is small. */
void *ferry_vfork_scratch(void);
/* In a vfork child: the top of a stack of its own for the exec hook (above
 * the scratch, in memory that stays its parent's from one child to the
 * next), else NULL. */
void *ferry_vfork_stack(void);

void ferry_store_exit(int status);
/* `slot_entry` (`cap` bytes, or NULL): a vfork child's FERRY_SLOT for the
 * new program, filled in here: the child claims the program's slot beside
 * its own and writes "FERRY_SLOT=<uid>:<file>:<index>:<stride>:<in_memory>:
 * <pid>:<ppid>" (who the program will be), or
 * "FERRY_SLOT=" when it claimed none (the program claims one). */
void ferry_store_exec_begin(const char *path, uint32_t kind, char *slot_entry, size_t cap);
/* Step `which` (enum ferry_span) of this image's start happened at `tsc`. */
void ferry_store_span(int which, uint64_t tsc);
/* In a vfork child: its exec hook reached `step` (enum ferry_hook_step). */
void ferry_store_hook_step(int step);
void ferry_store_exec_failed(void);
/* A vfork child's exec of a file that is not there (`path`, which stays
 * where it is until the parent runs again), to be made without writing the
 * child's record first: 1, or 0 when the caller is no vfork child (the
 * exec goes the usual way); and the parent's return from vfork(`child`),
 * which writes that record when such an exec succeeded after all. */
int ferry_store_exec_unseen(const char *path);
void ferry_store_vfork_returned(int child);
void ferry_store_wait(int pid, int status);
void ferry_store_detached(void);

/* Sum of all threads, past and present (in a vfork child: its own calls). */
void ferry_blk_sum(uint64_t *calls, uint64_t *invalid);

uint64_t ferry_mono_ns(void);
uint64_t ferry_real_ns(void);

/* Set while the program forbids itself the TSC (strict seccomp,
 * prctl(PR_SET_TSC, PR_TSC_SIGSEGV): rdtsc would end it with SIGSEGV);
 * the shim's clock then reads 0 (sandbox.c). */
extern int ferry_tsc_forbidden;

static inline uint64_t ferry_rdtsc(void)
{
    if (__builtin_expect(ferry_tsc_forbidden, 0))
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

#endif
