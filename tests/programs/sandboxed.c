/* A program that sandboxes itself, as sshd's privilege-separated child or a
 * browser's renderer does: once set up it allows itself only read, write
 * and exit (a seccomp filter that kills the process for anything else),
 * then echoes a line from stdin and computes for a while (longer than a
 * process whose end the shim reads from the TSC anyway).  The shim must make
 * no call of its own after that: its end's clock readings killed the
 * program at exit (SIGSYS) under every profile.
 *
 * Usage: sandboxed [prctl|strict|notsc]
 *   prctl   the filter through prctl(PR_SET_SECCOMP), as older programs
 *           and libseccomp on old kernels install it
 *   strict  seccomp's strict mode: read, write, exit and rt_sigreturn
 *           only, and no TSC (rdtsc faults: the shim's clock killed it
 *           with SIGSEGV under every profile that times calls); it ends
 *           with exit, as strict mode allows no exit_group
 *   notsc   no filter, but the TSC forbidden (prctl(PR_SET_TSC,
 *           PR_TSC_SIGSEGV)), as a program hiding the clock from code it
 *           runs does
 *   jit     the filter, then its line written by code it generated before
 *           (no rewriter saw it): the catch-all's handler of that call
 *           returned through rt_sigreturn, which the filter kills
 *   nogetpid a filter that lets everything through but getpid (EPERM),
 *           then SIGSYS's action asked into the heap: the shim answers
 *           that query from what the program set, written through the
 *           kernel by the process's pid, which it asked getpid for; that
 *           answer was EFAULT */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* `syscall; ret` in a mapping of its own, made before the filter */
static void *jit;

static long jit_write(const void *buf, long n)
{
    long ret;
    register long fd __asm__("rdi") = 1;
    register const void *b __asm__("rsi") = buf;
    register long len __asm__("rdx") = n;
    /* built with -mno-red-zone: the call's return address may land below rsp */
    __asm__ volatile("call *%[code]" : "=a"(ret), "+r"(fd), "+r"(b), "+r"(len)
                     : "a"((long)SYS_write), [code] "r"(jit) : "rcx", "r11", "memory");
    return ret;
}

int main(int argc, char **argv)
{
    struct sock_filter allow_io[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_read, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_filter no_getpid[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    const char *how = argc > 1 ? argv[1] : "seccomp";
    struct sock_fprog prog = {sizeof(allow_io) / sizeof(allow_io[0]), allow_io};
    if (!strcmp(how, "nogetpid"))
        prog = (struct sock_fprog){sizeof(no_getpid) / sizeof(no_getpid[0]), no_getpid};
    if (!strcmp(how, "jit")) {
        static const unsigned char bytes[] = {0x0f, 0x05, 0xc3};
        jit = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (jit == MAP_FAILED || !memcpy(jit, bytes, sizeof(bytes)) || mprotect(jit, 4096, PROT_READ | PROT_EXEC))
            return 4;
    }
    int failed = !strcmp(how, "notsc")    ? prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0)
                 : !strcmp(how, "strict") ? prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0)
                 : prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
                       (!strcmp(how, "prctl") ? prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)
                                              : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
    if (failed) {
        perror("seccomp");
        return 2;
    }
    if (!strcmp(how, "nogetpid")) {
        /* the kernel's struct, off the caller's stack page (libc's
         * sigaction asks into its own frame and copies) */
        void **old = calloc(4, sizeof(void *));
        if (!old || syscall(SYS_rt_sigaction, SIGSYS, NULL, old, 8) || old[0] != (void *)SIG_DFL) {
            perror("sigaction");
            return 5;
        }
    }
    char buf[256];
    ssize_t n = read(0, buf, sizeof(buf));
    if ((jit ? jit_write("sandboxed, read: ", 17) : write(1, "sandboxed, read: ", 17)) != 17 ||
        (n > 0 && write(1, buf, (size_t)n) != n))
        return 3;
    volatile unsigned long spin = 0;
    for (unsigned long i = 0; i < 200000000UL; i++)  /* ~0.1-0.3 s, no call */
        spin += i;
    if (!strcmp(how, "strict"))
        syscall(SYS_exit, 0);
    return 0;  /* exit_group, after stdio's flush (nothing buffered: write(2) above) */
}
