/* A worker's system call that a signal can cut short without a race.
 *
 * A signal meant for the fiber whose call a worker runs is sent to the
 * worker (agg_signal.c).  Arriving before the `syscall`, it would be handled
 * and the call would then block for good; arriving during it, the kernel
 * ends the call with EINTR or, under SA_RESTART, rewinds rip to the
 * `syscall` to run it again.  So the handler looks at rip: anywhere from
 * ferry_cp_begin up to and including ferry_cp_syscall means the call has not
 * run (or is to run again), and the handler sends it to ferry_cp_cancelled.
 * rbx holds the call's cancel word throughout, for the handler to check
 * that the signal is for this call; ferry_cp_begin reloads every argument,
 * so a call cut short by a stale signal can simply start over there.
 */
#include <linux/errno.h>

    .intel_syntax noprefix
    .text

/* long ferry_cp_call(int *cancel, const long *call): call = {nr, a0..a5} */
    .globl ferry_cp_call, ferry_cp_begin, ferry_cp_syscall, ferry_cp_end, ferry_cp_cancelled
    .hidden ferry_cp_call, ferry_cp_begin, ferry_cp_syscall, ferry_cp_end, ferry_cp_cancelled
    .type ferry_cp_call, @function
    .p2align 4
ferry_cp_call:
    .cfi_startproc
    push rbx
    .cfi_adjust_cfa_offset 8
    push r12
    .cfi_adjust_cfa_offset 8
    mov rbx, rdi
    mov r12, rsi
ferry_cp_begin:
    cmp dword ptr [rbx], 0
    jne ferry_cp_cancelled
    mov rax, qword ptr [r12]
    mov rdi, qword ptr [r12 + 8]
    mov rsi, qword ptr [r12 + 16]
    mov rdx, qword ptr [r12 + 24]
    mov r10, qword ptr [r12 + 32]
    mov r8, qword ptr [r12 + 40]
    mov r9, qword ptr [r12 + 48]
ferry_cp_syscall:
    syscall
ferry_cp_end:
    pop r12
    .cfi_adjust_cfa_offset -8
    pop rbx
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_adjust_cfa_offset 16
ferry_cp_cancelled:
    mov rax, -EINTR
    pop r12
    .cfi_adjust_cfa_offset -8
    pop rbx
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size ferry_cp_call, . - ferry_cp_call

    .section .note.GNU-stack, "", @progbits
