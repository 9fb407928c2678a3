/* Fiber switching and the raw clone of worker threads.
 *
 * A switch saves what the ABI says a callee preserves: rbx, rbp, r12-r15,
 * rsp, and the control words of the vector unit (MXCSR) and of the x87 FPU;
 * everything else is caller-saved, so the C caller has already given it up.
 * The thread pointer (fs base) follows the fiber: wrfsbase when the CPU and
 * kernel allow it (12 ns), arch_prctl otherwise (173 ns).
 */
    .intel_syntax noprefix
    .text

/* void ferry_agg_switch(struct agg_ctx *from, struct agg_ctx *to) */
    .globl ferry_agg_switch
    .hidden ferry_agg_switch
    .type ferry_agg_switch, @function
    .p2align 4
ferry_agg_switch:
    .cfi_startproc
    push rbp
    push rbx
    push r12
    push r13
    push r14
    push r15
    sub rsp, 8
    stmxcsr dword ptr [rsp]
    fnstcw word ptr [rsp + 4]
    mov qword ptr [rdi], rsp
    /* the old stack is not touched after this: a carrier that sees it may
     * run the fiber (x86 keeps the stores above before it) */
    mov dword ptr [rdi + 16], 1
    mov rsp, qword ptr [rsi]
    mov dword ptr [rsi + 16], 0
    mov rax, qword ptr [rsi + 8]
    test rax, rax
    jz 2f
    cmp dword ptr [rip + ferry_agg_fsgsbase], 0
    je 1f
    wrfsbase rax
    jmp 2f
1:  mov rsi, rax
    mov edi, 0x1002          /* ARCH_SET_FS */
    mov eax, 158             /* SYS_arch_prctl, from the shim's own text */
    syscall
2:  /* loading the control words is slow; they rarely differ */
    sub rsp, 8
    stmxcsr dword ptr [rsp]
    fnstcw word ptr [rsp + 4]
    mov eax, dword ptr [rsp]
    cmp eax, dword ptr [rsp + 8]
    je 3f
    ldmxcsr dword ptr [rsp + 8]
3:  mov ax, word ptr [rsp + 4]
    cmp ax, word ptr [rsp + 12]
    je 4f
    fldcw word ptr [rsp + 12]
4:  add rsp, 16
    pop r15
    pop r14
    pop r13
    pop r12
    pop rbx
    pop rbp
    ret
    .cfi_endproc
    .size ferry_agg_switch, . - ferry_agg_switch

/* The abort address of the engine's rseq probe (agg_threads.c), which the
 * kernel never jumps to (the probe's section has no length) but whose
 * signature it checks: glibc's on x86, the one the kernel was given. */
    .long 0x53053053
    .globl ferry_agg_rseq_abort
    .hidden ferry_agg_rseq_abort
    .type ferry_agg_rseq_abort, @function
ferry_agg_rseq_abort:
    ud2
    .size ferry_agg_rseq_abort, . - ferry_agg_rseq_abort

/* A new fiber's first return lands here: r12 holds the fiber, r13 the C
 * function that runs it; the stack is 16-aligned. */
    .globl ferry_agg_fiber_entry
    .hidden ferry_agg_fiber_entry
    .type ferry_agg_fiber_entry, @function
    .p2align 4
ferry_agg_fiber_entry:
    .cfi_startproc
    .cfi_undefined rip
    xor ebp, ebp
    mov rdi, r12
    call r13
    ud2
    .cfi_endproc
    .size ferry_agg_fiber_entry, . - ferry_agg_fiber_entry

/* long ferry_agg_clone(unsigned long flags, void *stack_top, int *ptid,
 *                      int *ctid, unsigned long tls, void (*fn)(void *), void *arg)
 * The child runs fn(arg) on its own stack, then exits the thread; it never
 * returns through a C frame of the parent. */
    .globl ferry_agg_clone
    .hidden ferry_agg_clone
    .type ferry_agg_clone, @function
    .p2align 4
ferry_agg_clone:
    .cfi_startproc
    mov r11, qword ptr [rsp + 8]     /* arg (7th argument) */
    and rsi, -16
    sub rsi, 16
    mov qword ptr [rsi], r9          /* fn */
    mov qword ptr [rsi + 8], r11     /* arg */
    mov r10, rcx                     /* ctid */
    mov r8, r8                       /* tls */
    mov eax, 56                      /* SYS_clone: flags, stack, ptid, ctid, tls */
    syscall
    test rax, rax
    jnz 1f
    xor ebp, ebp
    pop rax                          /* fn */
    pop rdi                          /* arg */
    and rsp, -16
    call rax
    xor edi, edi
    mov eax, 60                      /* SYS_exit: this thread only */
    syscall
    ud2
1:  ret
    .cfi_endproc
    .size ferry_agg_clone, . - ferry_agg_clone

    .section .note.GNU-stack, "", @progbits
