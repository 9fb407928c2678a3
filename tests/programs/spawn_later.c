/* spawn_later N MS: N getppid() through code written at run time (which
 * only the catch-all sees) and N through libc, then MS milliseconds of
 * sleep, then /bin/true started twice with posix_spawn: a vfork child
 * each, that begins well after its parent did and has made none of its
 * parent's calls.  Prints what it did; exits 0 when every call and child
 * went as asked. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long call_code(void *code, long nr)
{
    long ret;
    /* built with -mno-red-zone: the call's return address may land below rsp */
    __asm__ volatile("call *%1" : "=a"(ret) : "r"(code), "a"(nr) : "rcx", "r11", "memory");
    return ret;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100, ms = argc > 2 ? atol(argv[2]) : 200;
    static const unsigned char bytes[] = {0x0f, 0x05, 0xc3};  /* syscall; ret */
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED)
        return 1;
    memcpy(code, bytes, sizeof(bytes));
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC))
        return 1;
    pid_t parent = getppid();
    long ok = 0;
    for (long i = 0; i < n; i++)
        ok += call_code(code, SYS_getppid) == parent;
    for (long i = 0; i < n; i++)
        ok += getppid() == parent;
    struct timespec nap = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    int children = 0;
    for (int i = 0; i < 2; i++) {
        char *child_argv[] = {"/bin/true", NULL};
        pid_t pid;
        int status;
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, child_argv, environ) == 0 &&
            waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            children++;
    }
    printf("spawn_later: %ld of %ld calls returned the parent's pid, %d of 2 children ran\n", ok, 2 * n,
           children);
    return ok == 2 * n && children == 2 ? 0 : 1;
}
