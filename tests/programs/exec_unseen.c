/* exec_unseen PROGRAM: a vfork child runs PROGRAM under a seccomp filter
 * that fails every stat of a path with ENOENT, so that the exec hook sees no
 * file there while the exec itself finds it: what happens when the file
 * appears between the hook's look and the kernel's exec.  The child first
 * tries a directory that is not there, as a PATH search does.  Prints how
 * the child ended. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exec_unseen PROGRAM\n");
        return 2;
    }
    struct sock_filter insns[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_newfstatat, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)AT_FDCWD, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOENT),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(insns) / sizeof(insns[0]), .filter = insns};
    pid_t c = vfork();
    if (c == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
            _exit(126);
        execv("/nonexistent-dir/program", argv + 1);
        execv(argv[1], argv + 1);
        _exit(127);
    }
    int status;
    if (c < 0 || waitpid(c, &status, 0) != c) {
        perror("exec_unseen");
        return 1;
    }
    if (WIFSIGNALED(status))
        printf("child: signal %d\n", WTERMSIG(status));
    else
        printf("child: exit %d\n", WEXITSTATUS(status));
    return 0;
}
