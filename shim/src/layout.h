/* Numbers shared by the assembly entry and the C code of the shim. */
#ifndef FERRY_LAYOUT_H
#define FERRY_LAYOUT_H

#define FERRY_NR_MAX 512

/* Offset from the return address of a trampoline's `call` (its label A) to
 * its label B, where it restores rsp and executes `syscall` itself.  Mirrored
 * in rewriter/layout.py. */
#define FERRY_TRAMP_RAW_DELTA 10

/* struct ferry_thread (thread.h): the static build's entry reads them
 * through %gs. */
#define FERRY_THREAD_STACK_TOP 16
#define FERRY_THREAD_DEPTH 24

/* struct agg_carrier (agg.h): where its rseq_cs word is, which entry.S's
 * rt_sigreturn clears. */
#define AGG_CARRIER_RSEQ_CS 0

/* struct ferry_blk: the counters of one thread. */
#define FERRY_BLK_CALLS 64

/* struct ferry_regs: the call as the slow path receives it. */
#define FERRY_REGS_RAX 0
#define FERRY_REGS_RDI 8
#define FERRY_REGS_RSI 16
#define FERRY_REGS_RDX 24
#define FERRY_REGS_R10 32
#define FERRY_REGS_R8 40
#define FERRY_REGS_R9 48
#define FERRY_REGS_SITE 56
/* the callee-saved registers the program had, and where the entry keeps the
 * rest: the saved rbx, then the flags, then the return address (label A) */
#define FERRY_REGS_RBP 64
#define FERRY_REGS_R12 72
#define FERRY_REGS_R13 80
#define FERRY_REGS_R14 88
#define FERRY_REGS_R15 96
#define FERRY_REGS_FRAME 104
#define FERRY_REGS_SIZE 112

/* A trampoline steps over the program's red zone before its call, and the
 * entry pushes the flags and rbx below the return address: from the entry's
 * frame (FERRY_REGS_FRAME) up to the program's rsp. */
#define FERRY_RED_ZONE 128
#define FERRY_FRAME_TO_RSP (3 * 8 + FERRY_RED_ZONE)

/* What ferry_slow() tells the entry. */
#define FERRY_DONE 0
#define FERRY_RAW 1

#endif
