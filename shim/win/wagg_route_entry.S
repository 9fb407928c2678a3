/* The route hook's entry: a patched stub's trampoline jumps here (it does
 * not call) when the TEB's route word says the thread is a carrier running
 * a fiber.  rsp is as the stub's caller left it (its return address at
 * [rsp], arguments 5 and up at rsp+0x28), rcx, rdx, r8, r9 the first four
 * arguments, eax the call's index, r11 the trampoline's native tail (the
 * stub's own first instructions and the jump into the rest of it).
 *
 * The 16 argument slots are gathered into an array for wagg_route_call.
 * It returns 1: the call was routed, *result is its status, returned to
 * the caller as the stub would have returned it.  0: the call runs
 * natively: the frame goes, the argument registers are as they came, and
 * the native tail runs with the caller's stack untouched.
 *
 * Frame (0xb8 bytes, rsp 16-aligned inside): shadow space at 0, the slots
 * at 0x20, the native tail at 0xa0, the result at 0xa8.  The unwind data
 * (.seh_*) lets a stack walk pass through it while a fiber is parked. */
    .text
    .globl wagg_route_entry
    .seh_proc wagg_route_entry
wagg_route_entry:
    sub $0xb8, %rsp
    .seh_stackalloc 0xb8
    .seh_endprologue
    mov %rcx, 0x20(%rsp)
    mov %rdx, 0x28(%rsp)
    mov %r8, 0x30(%rsp)
    mov %r9, 0x38(%rsp)
    .irp k, 0,1,2,3,4,5,6,7,8,9,10,11
    mov 0xe0+8*\k(%rsp), %r10
    mov %r10, 0x40+8*\k(%rsp)
    .endr
    mov %r11, 0xa0(%rsp)
    mov %eax, %ecx
    lea 0x20(%rsp), %rdx
    lea 0xa8(%rsp), %r8
    call wagg_route_call
    test %eax, %eax
    jz 1f
    mov 0xa8(%rsp), %rax
    add $0xb8, %rsp
    ret
1:
    mov 0x20(%rsp), %rcx
    mov 0x28(%rsp), %rdx
    mov 0x30(%rsp), %r8
    mov 0x38(%rsp), %r9
    mov 0xa0(%rsp), %r11
    add $0xb8, %rsp
    jmp *%r11
    .seh_endproc
