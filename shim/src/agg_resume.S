/* A thread created as a fiber starts where the kernel would have started
 * it: right after its clone call, every register as the creator had it but
 * rax (0), on its own stack.  The trampoline's label A then steps back over
 * the red zone and goes on with the program's code after the `syscall`. */
    .intel_syntax noprefix
    .text

/* void ferry_agg_thread_resume(struct agg_thread_start *s) */
    .globl ferry_agg_thread_resume
    .hidden ferry_agg_thread_resume
    .type ferry_agg_thread_resume, @function
    .p2align 4
ferry_agg_thread_resume:
    .cfi_startproc
    .cfi_undefined rip
    mov rax, qword ptr [rdi + 14 * 8]     /* rsp at label A */
    mov rcx, qword ptr [rdi + 13 * 8]     /* label A */
    mov qword ptr [rax - 8], rcx
    mov rcx, qword ptr [rdi + 12 * 8]     /* flags */
    mov qword ptr [rax - 16], rcx
    lea rsp, [rax - 16]
    mov rbx, qword ptr [rdi + 0 * 8]
    mov rbp, qword ptr [rdi + 1 * 8]
    mov r12, qword ptr [rdi + 2 * 8]
    mov r13, qword ptr [rdi + 3 * 8]
    mov r14, qword ptr [rdi + 4 * 8]
    mov r15, qword ptr [rdi + 5 * 8]
    mov rsi, qword ptr [rdi + 7 * 8]
    mov rdx, qword ptr [rdi + 8 * 8]
    mov r10, qword ptr [rdi + 9 * 8]
    mov r8, qword ptr [rdi + 10 * 8]
    mov r9, qword ptr [rdi + 11 * 8]
    mov rdi, qword ptr [rdi + 6 * 8]
    xor eax, eax
    popfq
    ret
    .cfi_endproc
    .size ferry_agg_thread_resume, . - ferry_agg_thread_resume

    .section .note.GNU-stack, "", @progbits
