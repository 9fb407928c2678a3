/* A program with system-call code of its own, as some Windows programs carry
 * (anti-hooking code, direct-syscall libraries): `my_yield` is a stub of
 * ntdll's shape that no export names and no .pdata entry covers, and
 * `raw_call` an inline `syscall` of another shape.  `ferry sites` must find
 * both.  Neither runs unless asked: a `syscall` instruction run under wine
 * would go to the Linux kernel. */
#include <stdio.h>
#include <string.h>

long long my_yield(void);
__asm__(".text\n"
        "my_yield:\n"
        "    mov %rcx, %r10\n"
        "    mov $0x46, %eax\n"
        "    testb $1, 0x7ffe0308\n"
        "    jne 1f\n"
        "    syscall\n"
        "    ret\n"
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
    if (argc > 1 && strcmp(argv[1], "--call") == 0)
        return (int)(my_yield() + raw_call(0));
    printf("own_stub at %p, raw_call at %p\n", (void *)my_yield, (void *)raw_call);
    return 0;
}
