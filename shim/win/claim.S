/* The trampolines' slow path: the calling thread has no block yet.  Called
 * (not jumped to) from a trampoline at a stub's entry, so every argument
 * register of the system call is live, and the stack above rsp holds the
 * caller's frame (return address, shadow space, arguments 5+): both are left
 * exactly as they were.  Volatile registers the call may carry (rcx, rdx,
 * r8, r9, xmm0-xmm5 for safety) are saved; rax returns the block. */
    .text
    .globl ferry_claim_entry
ferry_claim_entry:
    /* entry: rsp = 0 mod 16 (the trampoline's caller pushed a return address,
     * the trampoline's call another) */
    push %rcx
    push %rdx
    push %r8
    push %r9
    push %r10
    push %r11
    sub $0x80, %rsp             /* 6 xmm registers, then 0x20 of shadow space */
    movdqu %xmm0, 0x20(%rsp)
    movdqu %xmm1, 0x30(%rsp)
    movdqu %xmm2, 0x40(%rsp)
    movdqu %xmm3, 0x50(%rsp)
    movdqu %xmm4, 0x60(%rsp)
    movdqu %xmm5, 0x70(%rsp)
    call ferry_claim_block
    movdqu 0x20(%rsp), %xmm0
    movdqu 0x30(%rsp), %xmm1
    movdqu 0x40(%rsp), %xmm2
    movdqu 0x50(%rsp), %xmm3
    movdqu 0x60(%rsp), %xmm4
    movdqu 0x70(%rsp), %xmm5
    add $0x80, %rsp
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rdx
    pop %rcx
    ret

/* Timed calls (trace mode): the trampoline makes a frame of 0xa8 bytes and
 * calls the stub from it, so that it sees the time after the call returns.
 * The stub's stack arguments (5 and up, at the caller's rsp+0x28) are copied
 * into the new frame: 16 of them, more than any Nt function takes.  Called
 * from the trampoline, so [rsp] is the return into it and the frame starts
 * at rsp+8; the caller's rsp was the frame's end, rsp+8+0xa8. */
    .globl ferry_copy_args
ferry_copy_args:
    .irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    mov 0xd8+8*\k(%rsp), %rax
    mov %rax, 0x28+8*\k(%rsp)
    .endr
    ret
