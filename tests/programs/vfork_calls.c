/* vfork_calls N [PAD...]: a vfork child that makes N calls, each of
 * another number and each failing with EBADF (fd -1: nothing changes), then
 * execs /bin/true; with -N the program makes them itself, and starts no
 * child.  The parent prints how the child ended.  The record of
 * a child with few figures is packed into its header; one with many, or
 * whose parent's command line (PAD) leaves little room after it, is not:
 * tests/test_process_records.py reads both. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const long numbers[] = {
    SYS_read, SYS_write, SYS_close, SYS_fstat, SYS_lseek, SYS_ioctl, SYS_pread64, SYS_pwrite64,
    SYS_readv, SYS_writev, SYS_dup, SYS_dup2, SYS_connect, SYS_accept, SYS_sendto, SYS_recvfrom,
    SYS_sendmsg, SYS_recvmsg, SYS_shutdown, SYS_bind, SYS_listen, SYS_getsockname, SYS_getpeername,
    SYS_setsockopt, SYS_getsockopt, SYS_fcntl, SYS_flock, SYS_fsync, SYS_fdatasync, SYS_ftruncate,
    SYS_getdents, SYS_fchdir, SYS_fchmod, SYS_fchown, SYS_fstatfs, SYS_readahead, SYS_fgetxattr,
    SYS_flistxattr, SYS_fremovexattr, SYS_getdents64, SYS_fadvise64, SYS_epoll_wait, SYS_epoll_ctl,
    SYS_syncfs, SYS_accept4, SYS_preadv, SYS_pwritev, SYS_sync_file_range, SYS_fallocate,
    SYS_fsetxattr, SYS_inotify_add_watch, SYS_sendmmsg, SYS_recvmmsg,
};

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 0;
    int max = (int)(sizeof(numbers) / sizeof(numbers[0]));
    if (n < -max || n > max) {
        fprintf(stderr, "vfork_calls: N from -%d to %d\n", max, max);
        return 2;
    }
    printf("%d\n", max);
    fflush(stdout);
    if (n < 0) {
        for (int i = 0; i < -n; i++)
            syscall(numbers[i], -1L, 0L, 0L, 0L, 0L, 0L);
        return 0;
    }
    pid_t pid = vfork();
    if (pid == 0) {
        for (int i = 0; i < n; i++)
            syscall(numbers[i], -1L, 0L, 0L, 0L, 0L, 0L);
        execl("/bin/true", "true", (char *)0);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    printf("child: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
