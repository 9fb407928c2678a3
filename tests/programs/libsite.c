/* A library with a syscall site of its own, loaded with dlopen by dlopen_main:
 * the shim must patch it when it appears, before anything in it runs. */
long site_getppid(void)
{
    long ret;
    __asm__ volatile("mov $110, %%eax\n\tsyscall" : "=a"(ret) : : "rcx", "r11", "memory");
    return ret;
}
