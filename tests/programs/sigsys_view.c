/* What a program sees of SIGSYS and its signal mask, printed so that a run
 * under the catch-all can be compared with a native one: the catch-all keeps
 * SIGSYS unblocked and its own handler installed, yet the program must see
 * what it asked for.  With every signal blocked it also calls code of its
 * own making (`syscall; ret`), which only the catch-all can see. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_sigsys(int sig)
{
    (void)sig;
    handled++;
}

static long jit_getppid(void)
{
    static const unsigned char bytes[] = {0x0f, 0x05, 0xc3};  /* syscall; ret */
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(code, bytes, sizeof(bytes));
    mprotect(code, 4096, PROT_READ | PROT_EXEC);
    long ret;
    __asm__ volatile("call *%1" : "=a"(ret) : "r"(code), "a"((long)SYS_getppid) : "rcx", "r11", "memory");
    return ret;
}

int main(void)
{
    sigset_t all, old, now;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    printf("SIGSYS blocked before: %d\n", sigismember(&old, SIGSYS));
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("SIGSYS blocked after blocking all: %d\n", sigismember(&now, SIGSYS));
    printf("jit getppid with all blocked: %d\n", jit_getppid() == getppid());
    sigprocmask(SIG_SETMASK, &old, NULL);
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("SIGSYS blocked after restoring: %d\n", sigismember(&now, SIGSYS));

    struct sigaction sa, seen;
    sigaction(SIGSYS, NULL, &seen);
    printf("SIGSYS handler at start is SIG_DFL: %d\n", seen.sa_handler == SIG_DFL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigsys;
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaction(SIGSYS, &sa, NULL);
    sigaction(SIGSYS, NULL, &seen);
    printf("SIGSYS handler is ours: %d, its mask has SIGUSR1: %d\n", seen.sa_handler == on_sigsys,
           sigismember(&seen.sa_mask, SIGUSR1));

    struct sigaction usr;
    memset(&usr, 0, sizeof(usr));
    usr.sa_handler = SIG_IGN;
    sigfillset(&usr.sa_mask);
    sigaction(SIGUSR2, &usr, NULL);
    sigaction(SIGUSR2, NULL, &seen);
    printf("SIGUSR2 mask has SIGSYS: %d\n", sigismember(&seen.sa_mask, SIGSYS));

    /* Masks the shim reads to keep SIGSYS out: from a bad pointer the
     * program gets the kernel's EFAULT, and one on the last bytes of its
     * stack's page is read like any other. */
    void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long rc = syscall(SYS_rt_sigprocmask, SIG_BLOCK, none, NULL, 8);
    printf("rt_sigprocmask from an unreadable set: %ld %s\n", rc, rc ? strerror(errno) : "");
    rc = syscall(SYS_rt_sigaction, SIGUSR2, none, NULL, 8);
    printf("rt_sigaction from an unreadable action: %ld %s\n", rc, rc ? strerror(errno) : "");
    char page[2 * 4096];
    unsigned long end = ((unsigned long)page + 4096) & ~4095UL;
    sigset_t *last = (sigset_t *)(end - 8);
    sigemptyset(&all);
    sigaddset(&all, SIGSYS);
    sigaddset(&all, SIGUSR1);
    memcpy(last, &all, 8);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, last, NULL, 8);
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("a set at the end of a stack page blocks SIGUSR1: %d, SIGSYS: %d\n",
           sigismember(&now, SIGUSR1), sigismember(&now, SIGSYS));
    sigprocmask(SIG_SETMASK, &old, NULL);

    kill(getpid(), SIGSYS);
    printf("SIGSYS sent by kill reached the program's handler: %d\n", (int)handled);
    return 0;
}
