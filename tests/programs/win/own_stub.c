/* A program with system-call code of its own, as some Windows programs carry
 * (anti-hooking code, direct-syscall libraries): `my_yield` is a stub of
 * ntdll's shape that no export names and no .pdata entry covers, and
 * `raw_call` an inline `syscall` of another shape.  `ferry sites` must find
 * both.  Neither runs unless asked: a `syscall` instruction run under wine
 * would go to the Linux kernel.
 *
 * `own_stub --yield N` calls `my_yield` N times: its SSN is NtYieldExecution's
 * (YIELD_SSN, Windows 10's 0x46 unless the build gives the loaded ntdll's),
 * as a program written for one Windows build hard-codes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef YIELD_SSN
#define YIELD_SSN 0x46
#endif
#define STR_(x) #x
#define STR(x) STR_(x)

long long my_yield(void);
__asm__(".text\n"
        ".p2align 4\n"
        "my_yield:\n"
        "    mov %rcx, %r10\n"
        "    mov $" STR(YIELD_SSN) ", %eax\n"
        "    testb $1, 0x7ffe0308\n"
        "    jne 1f\n"
        "    syscall\n"
        "    ret\n"
        "    int $0x2e\n"
        "    ret\n"
        /* at 0x18, as in ntdll: wine's dispatcher returns to its return
         * address - 11, the `ret` after `syscall` */
        "1:  call *0x7ffe1000\n"
        "    ret\n");

__attribute__((noinline)) long long raw_call(long long a)
{
    long long r;
    __asm__ volatile("mov %1, %%r10\n\tmov $0x2c, %%eax\n\tsyscall"
                     : "=a"(r) : "r"(a) : "rcx", "r10", "r11", "memory");
    return r;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--yield") == 0) {
        int n = atoi(argv[2]), failed = 0;
        for (int i = 0; i < n; i++)
            failed += my_yield() < 0;  /* NTSTATUS: an error is negative */
        printf("yielded %d, %d failed\n", n, failed);
        return failed != 0;
    }
    if (argc > 1 && strcmp(argv[1], "--call") == 0)
        return (int)(my_yield() + raw_call(0));
    printf("own_stub at %p, raw_call at %p\n", (void *)my_yield, (void *)raw_call);
    return 0;
}
