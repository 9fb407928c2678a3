/* The entry point of a static program rewritten with the shim inside it
 * (FERRY_STATIC build, rewriter/static_embed.py points e_entry here).
 *
 * The kernel left argc, argv, envp and auxv at rsp and a few registers with
 * meaning (rdx: a function for atexit, 0 from the kernel); the program's own
 * entry may read any of them.  So: save every register and the flags below
 * the initial rsp (memory the program has not used yet), relocate the shim,
 * set it up from the initial stack, put every register and rsp back exactly
 * as they were, and jump to the original entry, whose address the C side
 * leaves in ferry_static_target (an indirect jump through memory needs no
 * register).
 *
 * Nothing may read a pointer in the shim's data before ferry_static_relocate
 * has run: until then only rip-relative addresses are right.
 */
    .intel_syntax noprefix
    .text
    .globl ferry_static_start
    .hidden ferry_static_start
    .type ferry_static_start, @function
    .p2align 4
ferry_static_start:
    .cfi_startproc
    .cfi_undefined rip          /* the outermost frame, as _start's */
    pushfq
    push rax
    push rbx
    push rcx
    push rdx
    push rsi
    push rdi
    push rbp
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    mov rbx, rsp                /* the saved registers; rbx + 16*8 = the initial rsp */
    and rsp, -16
    cld
    lea rdi, [rip + __ehdr_start]   /* the shim's load address: it was linked at 0 */
    lea rsi, [rip + _DYNAMIC]
    call ferry_static_relocate
    lea rdi, [rbx + 16*8]
    call ferry_static_init
    mov rsp, rbx
    pop r15
    pop r14
    pop r13
    pop r12
    pop r11
    pop r10
    pop r9
    pop r8
    pop rbp
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rbx
    pop rax
    popfq
    jmp qword ptr [rip + ferry_static_target]
    .cfi_endproc
    .size ferry_static_start, . - ferry_static_start

    .section .note.GNU-stack, "", @progbits
