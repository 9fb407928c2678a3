/* A program with syscall sites of its own (not only in libc), as static
 * binaries, Go programs and hand-written assembly have: tests build it PIE and
 * non-PIE, with and without symbols, and check that its own sites are patched
 * and counted.  The flags and the red zone must survive each call. */
#include <stdio.h>
#include <stdlib.h>

static long my_getppid(void)
{
    long ret;
    __asm__ volatile("mov $110, %%eax\n\tsyscall" : "=a"(ret) : : "rcx", "r11", "memory");
    return ret;
}

#define ARITH_FLAGS 0x8d5UL /* CF PF AF ZF SF OF */

/* Sets the arithmetic flags to `pattern` and leaves a marker at the bottom
 * of the red zone across a syscall; both must be as they were after it. */
static int red_zone_and_flags_survive(unsigned long pattern)
{
    unsigned long flags_after, red;
    __asm__ volatile(
        "movq $0x5a5a5a5a5a5a5a5a, %%rax\n\t"
        "movq %%rax, -128(%%rsp)\n\t"
        "movl $39, %%eax\n\t"
        "pushq %3\n\t"
        "popfq\n\t"
        "syscall\n\t"
        "pushfq\n\t"
        "popq %0\n\t"
        "movq -128(%%rsp), %1\n\t"
        : "=&r"(flags_after), "=&r"(red)
        : "0"(0UL), "r"(pattern | 2)
        : "rax", "rcx", "r11", "memory", "cc");
    return (flags_after & ARITH_FLAGS) == (pattern & ARITH_FLAGS) && red == 0x5a5a5a5a5a5a5a5aUL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    long last = 0;
    for (int i = 0; i < n; i++)
        last = my_getppid();
    printf("inline getppid x%d: %s\n", n, last > 0 ? "ok" : "failed");
    int kept = red_zone_and_flags_survive(ARITH_FLAGS) && red_zone_and_flags_survive(0);
    printf("red zone and flags: %s\n", kept ? "kept" : "CLOBBERED");
    return 0;
}
