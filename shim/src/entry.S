/* The entry every trampoline calls.
 *
 * On entry (see rewriter/trampoline.py): rax and rdi, rsi, rdx, r10, r8, r9
 * hold the system call exactly as the original `syscall` would have seen
 * them; r11 points at the site's record in the module's control block; rsp is
 * the program's rsp minus the 128-byte red zone, minus the return address.
 * rcx and r11 are free, as `syscall` clobbers them too.
 *
 * Everything else, flags included, must be as it was when we return.  The fast
 * path (a plain call on a thread that already has its counters) touches only
 * rcx and the flags, restores the flags before `syscall`, so the kernel sees
 * and returns the program's own flags, and runs the call right here: the
 * stack below the red zone is ours, and a restarted call (SA_RESTART,
 * restart_syscall) re-executes this same instruction.
 *
 * Anything else goes to ferry_slow() in C, on an aligned stack.  C code in
 * the shim is built with -mgeneral-regs-only, so vector state is never
 * touched and need not be saved.  When ferry_slow() answers FERRY_RAW, the
 * call has to run in the trampoline's own context (a clone child resumes on
 * another stack, vfork shares this one, rt_sigreturn reads its frame at the
 * program's rsp), so we return to the trampoline's label B instead of A.
 */
#include "layout.h"

#define SYS_RT_SIGRETURN 15

    .intel_syntax noprefix
    .text
/* The fast path, with or without counting (mode off measures the bare cost
 * of interposition).  Flags are saved the cheap way (popfq costs more than
 * the rest of this path): AH <- SF ZF AF PF CF, AL <- OF, kept in r11.  The
 * site pointer moves below our rsp meanwhile (the kernel never writes within
 * 128 bytes below rsp when it delivers a signal). */
/* Undo the flag saving: OF <- (AL == 1), then SF ZF AF PF CF <- AH (sahf
 * leaves OF alone); rax gets back the number kept in r11. */
.macro RESTORE_FLAGS
    xchg rax, r11
    add al, 0x7f
    sahf
    mov rax, r11
.endm

/* One more call in this thread's block; a thread without a block yet goes
 * to `none` (rcx is free: `syscall` clobbers it anyway). */
.macro COUNT_CALL slot, none
#ifdef FERRY_STATIC
    mov rcx, qword ptr gs:[0]
#else
    mov rcx, qword ptr [rip + ferry_thr@GOTTPOFF]
    mov rcx, qword ptr fs:[rcx]
#endif
    test rcx, rcx
    jz \none
    add qword ptr [rcx + FERRY_BLK_CALLS + \slot], 1
.endm

.macro FAST_ENTRY name, count, slow
    .globl \name
    .hidden \name
    .type \name, @function
    .p2align 4
\name:
    .cfi_startproc
    mov qword ptr [rsp - 8], r11
    mov r11, rax
    lahf
    seto al
    xchg rax, r11
    cmp rax, FERRY_NR_MAX
    jae 1f
    lea rcx, [rip + ferry_action]
    cmp byte ptr [rcx + rax], 0
    jne 1f
.if \count
    COUNT_CALL rax*8, 1f
.endif
    RESTORE_FLAGS
    syscall
    ret
1:  cmp rax, SYS_RT_SIGRETURN
    je 3f
    RESTORE_FLAGS
    mov r11, qword ptr [rsp - 8]
    jmp \slow
    /* rt_sigreturn reads its frame at the program's rsp and never returns:
     * it runs from here, inside the shim's text (which the catch-all lets
     * through), with the trampoline's red zone and return address undone. */
3:
.if \count
    COUNT_CALL SYS_RT_SIGRETURN*8, 4f
4:
.endif
    lea rsp, [rsp + 8 + FERRY_RED_ZONE]
    jmp ferry_sigreturn_syscall
    .cfi_endproc
    .size \name, . - \name
.endm

    FAST_ENTRY ferry_entry, 1, ferry_slow_entry
    FAST_ENTRY ferry_entry_nocount, 0, ferry_slow_entry
    FAST_ENTRY ferry_entry_own_stack, 1, ferry_slow_entry_own_stack
    FAST_ENTRY ferry_entry_own_stack_nocount, 0, ferry_slow_entry_own_stack

/* The thread's own fields (struct ferry_thread): through %gs in the static
 * build; in the dynamic one at fs:[rcx] once THREAD_BASE put the TLS offset
 * in rcx (free on every path here: `syscall` clobbers it). */
#ifdef FERRY_STATIC
#define THREAD(field) gs:[field]
.macro THREAD_BASE
.endm
#else
#define THREAD(field) fs:[rcx + field]
.macro THREAD_BASE
    mov rcx, qword ptr [rip + ferry_thr@GOTTPOFF]
.endm
#endif

/* The C path, on the program's stack or on the thread's own shim stack.
 * The shim's stack is for code whose stacks are small and unguarded: a
 * goroutine's has a few hundred bytes to spare below a `syscall`, and a
 * parked fiber's C path, or the exec hook's (~40 KiB), would write over
 * the stack below it.  Every thread of a static program takes it; in a
 * dynamic program, the sites of modules whose code runs on such stacks
 * (shim.c).  The program's own stack stays the C path's elsewhere: a
 * signal that arrives while the shim waits finds the thread's stack
 * pointer within the thread's stack, as natively (a garbage collector's
 * stop handler scans from there).
 *
 * Counted first, switched after, so that a signal between the two finds the
 * count up; a call from a handler that interrupted the C path stays on the
 * stack it is on.  A thread without a stack yet makes one first (that call
 * runs where it is: ~200 bytes). */
.macro SLOW_ENTRY name, own_stack, caught=0
    .type \name, @function
    .p2align 4
\name:
    .cfi_startproc
    pushfq
    .cfi_adjust_cfa_offset 8
    push rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    mov rbx, rsp
    .cfi_def_cfa_register rbx
.if \own_stack
    THREAD_BASE
    add qword ptr THREAD(FERRY_THREAD_DEPTH), 1
    cmp qword ptr THREAD(FERRY_THREAD_DEPTH), 1
    jne 1f
    mov rcx, qword ptr THREAD(FERRY_THREAD_STACK_TOP)
    test rcx, rcx
    jnz 2f
    call ferry_thread_stack_entry
    THREAD_BASE                       /* rcx held the stack's top: 0 */
    mov rcx, qword ptr THREAD(FERRY_THREAD_STACK_TOP)
    test rcx, rcx
    jz 1f
2:  mov rsp, rcx
1:
.endif
    and rsp, -16
    sub rsp, FERRY_REGS_SIZE
    mov qword ptr [rsp + FERRY_REGS_RAX], rax
    mov qword ptr [rsp + FERRY_REGS_RDI], rdi
    mov qword ptr [rsp + FERRY_REGS_RSI], rsi
    mov qword ptr [rsp + FERRY_REGS_RDX], rdx
    mov qword ptr [rsp + FERRY_REGS_R10], r10
    mov qword ptr [rsp + FERRY_REGS_R8], r8
    mov qword ptr [rsp + FERRY_REGS_R9], r9
    mov qword ptr [rsp + FERRY_REGS_SITE], r11
    mov qword ptr [rsp + FERRY_REGS_RBP], rbp
    mov qword ptr [rsp + FERRY_REGS_R12], r12
    mov qword ptr [rsp + FERRY_REGS_R13], r13
    mov qword ptr [rsp + FERRY_REGS_R14], r14
    mov qword ptr [rsp + FERRY_REGS_R15], r15
.if \caught
    mov qword ptr [rsp + FERRY_REGS_FRAME], 0   /* no trampoline's frame: see CAUGHT_RESUME */
.else
    mov qword ptr [rsp + FERRY_REGS_FRAME], rbx
.endif
    cld                       /* C code assumes DF=0; popfq restores the program's */
    mov rdi, rsp
.if \caught
    call ferry_caught_slow    /* r11, so the site field, holds the `syscall`'s address */
.else
    call ferry_slow
.endif
    mov rdi, qword ptr [rsp + FERRY_REGS_RDI]
    mov rsi, qword ptr [rsp + FERRY_REGS_RSI]
    mov rdx, qword ptr [rsp + FERRY_REGS_RDX]
    mov r10, qword ptr [rsp + FERRY_REGS_R10]
    mov r8, qword ptr [rsp + FERRY_REGS_R8]
    mov r9, qword ptr [rsp + FERRY_REGS_R9]
    mov r11d, eax             /* `syscall` clobbers r11: free to carry the answer */
    mov rax, qword ptr [rsp + FERRY_REGS_RAX]
    mov rsp, rbx
    .cfi_def_cfa_register rsp
.if \own_stack
    THREAD_BASE
    sub qword ptr THREAD(FERRY_THREAD_DEPTH), 1  /* off the shim stack first */
.endif
    pop rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore rbx
.if !\caught
    test r11d, r11d
    jz 3f
    add qword ptr [rsp + 8], FERRY_TRAMP_RAW_DELTA
3:
.endif
    popfq
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size \name, . - \name
.endm

    SLOW_ENTRY ferry_slow_entry_own_stack, 1
    SLOW_ENTRY ferry_caught_entry_own_stack, 1, 1
#ifdef FERRY_STATIC
    .set ferry_slow_entry, ferry_slow_entry_own_stack  /* every thread has its shim stack */
    .set ferry_caught_entry, ferry_caught_entry_own_stack
#else
    SLOW_ENTRY ferry_slow_entry, 0
    SLOW_ENTRY ferry_caught_entry, 0, 1
#endif

/* A call the catch-all caught runs here, once the handler returned
 * (catchall.c): the C path on the stack the call was made on, as a patched
 * site's, not below SIGSYS's frame (~3.6 KiB with AVX-512's state) on top
 * of the program's.  A handler on an alternate stack of SIGSTKSZ has ~4 KiB
 * left natively: a call it made from code no plan rewrote overran that
 * stack.
 *
 * On arrival every register is the program's at its `syscall` but two: rsp
 * is the program's less the red zone and one word, which holds the address
 * after the `syscall` (the return, and what `syscall` leaves in rcx), and
 * r11 holds the `syscall`'s own address, whose site the C path records
 * (reading /proc/self/maps for a new one takes 4 KiB of stack).  The entry
 * gets no frame: the program's rsp is one word further than a
 * trampoline's, and the C path reads nothing of the caller's stack
 * directly (it did not in the handler either).  The answer is never
 * FERRY_RAW: the calls that must run at the program's rsp (clone, vfork,
 * rt_sigreturn, sigaltstack) and those that never come back (exit, whose
 * stack may already be gone) stay in the handler. */
.macro CAUGHT_RESUME name, slow
    .globl \name
    .hidden \name
    .type \name, @function
    .p2align 4
\name:
    .cfi_startproc simple
    .cfi_def_cfa rsp, 8 + FERRY_RED_ZONE
    .cfi_offset rip, -(8 + FERRY_RED_ZONE)
    call \slow
    pushfq                    /* r11 as `syscall` leaves it: the flags */
    .cfi_adjust_cfa_offset 8
    pop r11
    .cfi_adjust_cfa_offset -8
    pop rcx
    .cfi_adjust_cfa_offset -8
    .cfi_register rip, rcx
    lea rsp, [rsp + FERRY_RED_ZONE]
    .cfi_adjust_cfa_offset -FERRY_RED_ZONE
    jmp rcx
    .cfi_endproc
    .size \name, . - \name
.endm

    CAUGHT_RESUME ferry_caught_resume, ferry_caught_entry
    CAUGHT_RESUME ferry_caught_resume_own_stack, ferry_caught_entry_own_stack

/* Call a C function with every register and the flags preserved, on an
 * aligned stack, DF clear: for hooks that run where the program did not
 * expect a call. */
.macro PRESERVING_CALL name, fn, arg_from_rax
    .globl \name
    .hidden \name
    .type \name, @function
    .p2align 4
\name:
    .cfi_startproc
    pushfq
    .cfi_adjust_cfa_offset 8
    push rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    mov rbx, rsp
    .cfi_def_cfa_register rbx
    and rsp, -16
    push rax
    push rcx
    push rdx
    push rsi
    push rdi
    push r8
    push r9
    push r10
    push r11
    sub rsp, 8
    cld
.if \arg_from_rax
    mov rdi, rax
.endif
    call \fn
    add rsp, 8
    pop r11
    pop r10
    pop r9
    pop r8
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rax
    mov rsp, rbx
    .cfi_def_cfa_register rsp
    pop rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore rbx
    popfq
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size \name, . - \name
.endm

/* After a call that ran in the trampoline's context (label B), in the
 * calling thread and, for clone and vfork, in the child too, on whatever
 * stack the child got: rax holds the result, r11 the flags the kernel
 * returned; ferry_post(result) only updates the shim's own bookkeeping. */
#ifdef FERRY_STATIC
    PRESERVING_CALL ferry_post_entry, ferry_static_post, 1  /* gives a new thread its block first */
#else
    PRESERVING_CALL ferry_post_entry, ferry_post, 1
#endif

/* The slow entry of a thread that has no shim stack yet (entry.S's
 * SLOW_ENTRY): it gets one, or stays on its own stack. */
    PRESERVING_CALL ferry_thread_stack_entry, ferry_thread_stack_make, 0

/* ld.so's _dl_debug_state (the debugger's breakpoint, called whenever the
 * list of modules changes) jumps here: rescan, then return to its caller. */
    PRESERVING_CALL ferry_dl_hook, ferry_on_dl_change, 0

/* The restorer of the shim's own signal handlers (SA_RESTORER), and the
 * `syscall` through which rt_sigreturn always leaves the shim. */
    .globl ferry_sigreturn
    .hidden ferry_sigreturn
    .globl ferry_sigreturn_syscall
    .hidden ferry_sigreturn_syscall
    .type ferry_sigreturn, @function
    .p2align 4
ferry_sigreturn:
    mov eax, SYS_RT_SIGRETURN
ferry_sigreturn_syscall:
#ifndef FERRY_STATIC
    /* A handler ends: the kernel puts back the mask it had before, unseen
     * by the fiber engine, which then no longer trusts what it knows of
     * the carrier's mask (agg_thread_leaving).  The frame is at rsp: only
     * rcx and the flags are used, which the kernel restores from it. */
    mov rcx, qword ptr [rip + agg_carrier@GOTTPOFF]
    mov rcx, qword ptr fs:[rcx]
    test rcx, rcx
    jz 1f
    mov rcx, qword ptr [rcx + AGG_CARRIER_RSEQ_CS]
    test rcx, rcx
    jz 1f
    mov qword ptr [rcx], 0
1:
#endif
    syscall
    ud2
    .size ferry_sigreturn, . - ferry_sigreturn

/* long ferry_call_on_stack(long (*fn)(const struct ferry_regs *), const struct ferry_regs *r,
 *                          void *top):
 * fn(r) with rsp at `top` (16-byte aligned), back on this stack after.
 * rbp keeps the old one (fn preserves it, as the ABI says), and the frame's
 * CFA is told through rbp so that a debugger unwinds across the switch. */
    .globl ferry_call_on_stack
    .hidden ferry_call_on_stack
    .type ferry_call_on_stack, @function
    .p2align 4
ferry_call_on_stack:
    .cfi_startproc
    push rbp
    .cfi_def_cfa_offset 16
    .cfi_offset rbp, -16
    mov rbp, rsp
    .cfi_def_cfa_register rbp
    mov rsp, rdx
    mov rax, rdi
    mov rdi, rsi
    call rax
    mov rsp, rbp
    pop rbp
    .cfi_def_cfa rsp, 8
    ret
    .cfi_endproc
    .size ferry_call_on_stack, . - ferry_call_on_stack

    .section .note.GNU-stack, "", @progbits
