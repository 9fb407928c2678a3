/* deny_syscalls SPEC... -- PROGRAM ARGS: run PROGRAM under a seccomp filter
 * that fails the system calls SPEC names, as a kernel without them (or a
 * container that forbids them) would.  SPEC is NR=ERRNO, or NR/ARG0=ERRNO to
 * fail only the calls whose first argument is ARG0 (a prctl option).  Used by
 * tests/test_doctor.py to check that `ferry doctor` sees what is missing. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_INSNS 256

int main(int argc, char **argv)
{
    struct sock_filter insns[MAX_INSNS];
    int n = 0, i;
    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        unsigned nr, arg0, err;
        int with_arg = sscanf(argv[i], "%u/%u=%u", &nr, &arg0, &err) == 3;
        if (!with_arg && sscanf(argv[i], "%u=%u", &nr, &err) != 2) {
            fprintf(stderr, "deny_syscalls: bad spec %s\n", argv[i]);
            return 2;
        }
        if (n + 6 > MAX_INSNS)
            return 2;
        insns[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                  offsetof(struct seccomp_data, nr));
        insns[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, with_arg ? 3 : 1);
        if (with_arg) {
            insns[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                      offsetof(struct seccomp_data, args[0]));
            insns[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arg0, 0, 1);
        }
        insns[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                                  SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA));
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: deny_syscalls NR[/ARG0]=ERRNO... -- PROGRAM ARGS\n");
        return 2;
    }
    insns[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("deny_syscalls: seccomp");
        return 2;
    }
    execvp(argv[i + 1], argv + i + 1);
    perror("deny_syscalls: exec");
    return 127;
}
