/* A program that confines its calls and then starts threads, as a
 * browser's renderer or a sandboxed server does.  The shim's own calls on
 * the way (its read of clone3's arguments, the new thread's catch-all and
 * record, the engine's questions and timers) were the filter's to kill:
 * every profile, off included, killed such a program at its first thread.
 *
 * Usage: sandboxed_threads allow|deny|errno
 *   allow  an allow-list of what pthread_create, join and write need (the
 *          filter kills the process for anything else); three threads
 *          write a line each
 *   deny   a deny-list of what containers forbid (process_vm_readv and
 *          _writev, ptrace, io_uring, timer_create: the process killed);
 *          threads write, then a child is spawned (/bin/echo)
 *   arith  the calls of deny, and prctl's PR_SET_SYSCALL_USER_DISPATCH,
 *          killed by a filter that reaches its verdicts through the
 *          scratch memory, the X register, arithmetic, JGT, JGE and JSET,
 *          and the arguments' words (the shim's copy must reach each one
 *          as the kernel does); threads write, a child is spawned
 *   idle   the allow-list; a second thread waits on a private futex, and
 *          the first on a shared one that a child process (forked before
 *          the filter) sets 300 ms later: the process must not compute
 *          meanwhile (under fibers the carrier spun while a worker waited,
 *          its own waits refused); says whether it used under 150 ms of CPU
 *   errno  openat answered EPERM; the first thread and four more try to
 *          open a file 50 times each: none may open it (under fibers the
 *          engine's ring and workers, which no filter binds, opened it)
 *   late   openat answered EPERM by a filter that a thread installs once
 *          the process has other threads (only that thread's, as without
 *          TSYNC); it then starts four threads, which inherit the filter,
 *          and they and it try to open a file 50 times each: none may open
 *          it (under fibers the new threads went to carriers that had no
 *          filter, and a fiber could be moved to one) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define ALLOW(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define DENY(n, action) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), BPF_STMT(BPF_RET | BPF_K, (action))
#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

static struct sock_filter allow_list[] = {
    LOAD_NR,
    ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit), ALLOW(SYS_exit_group), ALLOW(SYS_futex),
    ALLOW(SYS_clone), ALLOW(SYS_clone3), ALLOW(SYS_mmap), ALLOW(SYS_mprotect), ALLOW(SYS_munmap),
    ALLOW(SYS_madvise), ALLOW(SYS_set_robust_list), ALLOW(SYS_rseq), ALLOW(SYS_rt_sigprocmask),
    ALLOW(SYS_gettid), ALLOW(SYS_getpid), ALLOW(SYS_sched_yield), ALLOW(SYS_brk), ALLOW(SYS_rt_sigaction),
    ALLOW(SYS_getrandom), ALLOW(SYS_getrusage), ALLOW(SYS_wait4),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

static struct sock_filter deny_list[] = {
    LOAD_NR,
    DENY(SYS_process_vm_readv, SECCOMP_RET_KILL_PROCESS), DENY(SYS_process_vm_writev, SECCOMP_RET_KILL_PROCESS),
    DENY(SYS_ptrace, SECCOMP_RET_KILL_PROCESS), DENY(SYS_io_uring_setup, SECCOMP_RET_KILL_PROCESS),
    DENY(SYS_io_uring_enter, SECCOMP_RET_KILL_PROCESS), DENY(SYS_timer_create, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

#define NR_AT 0
#define ARG0_LOW_AT offsetof(struct seccomp_data, args[0])
#define ARG0_HIGH_AT (offsetof(struct seccomp_data, args[0]) + 4)
#define KILL BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
#define PASS BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
static struct sock_filter arith[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_AT),
    BPF_STMT(BPF_ST, 3),                                    /* M[3] = nr */
    /* process_vm_readv, process_vm_writev (310, 311): (nr - 300) * 2 in 20..22 */
    BPF_STMT(BPF_ALU | BPF_SUB | BPF_K, 300),
    BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 2),
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 20, 0, 2),
    BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 22, 1, 0),
    KILL,
    /* io_uring_setup, io_uring_enter (425, 426): nr >> 1 == 212 or 213, via X */
    BPF_STMT(BPF_LDX | BPF_MEM, 3),
    BPF_STMT(BPF_MISC | BPF_TXA, 0),
    BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 1),
    BPF_STMT(BPF_MISC | BPF_TAX, 0),
    BPF_STMT(BPF_LD | BPF_IMM, 212),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 0, 1),          /* A (212) == X? */
    KILL,
    BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 1),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 0, 1),          /* 213 == X: 426, 427 */
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 1, 0, 1),         /* (never: 213 & 1 is set) */
    BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
    KILL,
    BPF_STMT(BPF_LD | BPF_MEM, 3),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 426, 0, 1),
    KILL,
    /* ptrace and timer_create by number, XOR'd */
    BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, SYS_ptrace),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
    KILL,
    BPF_STMT(BPF_LD | BPF_MEM, 3),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_timer_create, 0, 1),
    KILL,
    /* prctl with option 59 (PR_SET_SYSCALL_USER_DISPATCH): its first
     * argument's words, the high one 0 */
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 5),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_HIGH_AT),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_LOW_AT),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 59, 0, 1),
    KILL,
    PASS,
};

static struct sock_filter no_open[] = {
    LOAD_NR,
    DENY(SYS_openat, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

static int opens(void)
{
    int opened = 0;
    for (int i = 0; i < 50; i++) {
        int fd = open("/etc/hostname", O_RDONLY);
        if (fd >= 0) {
            opened++;
            close(fd);
        } else if (errno != EPERM) {
            return -errno;
        }
    }
    return opened;
}

static void *writer(void *arg)
{
    char line[32];
    int n = snprintf(line, sizeof(line), "thread %ld\n", (long)arg);
    return write(1, line, (size_t)n) == n ? 0 : (void *)1;
}

static uint32_t private_word;

static void *private_waiter(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&private_word, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, &private_word, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
    return 0;
}

/* The first thread waits on a shared futex word a child sets; returns
 * whether the process used under 150 ms of CPU while it waited. */
static int idle_while_waiting(uint32_t *shared, pid_t child)
{
    pthread_t t;
    struct rusage ru;
    if (pthread_create(&t, 0, private_waiter, 0))
        return -1;
    while (!__atomic_load_n(shared, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, shared, FUTEX_WAIT, 0, 0, 0, 0);
    if (getrusage(RUSAGE_SELF, &ru))
        return -1;
    __atomic_store_n(&private_word, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &private_word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    int status;
    if (pthread_join(t, 0) || waitpid(child, &status, 0) != child)
        return -1;
    long ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
    return ms < 150;
}

static void *opener(void *arg)
{
    *(int *)arg = opens();
    return 0;
}

static int filtered_threads_open(void)
{
    pthread_t t[4];
    int opened[4], total = opens();
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], 0, opener, &opened[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], 0);
        total += opened[i];
    }
    return total;
}

static struct sock_fprog no_open_prog = {sizeof(no_open) / sizeof(no_open[0]), no_open};

static void *sandboxer(void *arg)
{
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &no_open_prog)) {
        *(int *)arg = -1;
        return 0;
    }
    *(int *)arg = filtered_threads_open();
    return 0;
}

static void *bystander(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 50; i++)
        nanosleep(&ts, 0);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "allow";
    if (!strcmp(mode, "late")) {
        pthread_t other, sandboxed;
        int total = -1;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || pthread_create(&other, 0, bystander, 0) ||
            pthread_create(&sandboxed, 0, sandboxer, &total) || pthread_join(sandboxed, 0) ||
            pthread_join(other, 0) || total < 0)
            return 2;
        printf("opened %d of 250\n", total);
        return 0;
    }
    struct sock_fprog prog;
    uint32_t *shared = 0;
    pid_t child = -1;
    if (!strcmp(mode, "idle")) {
        shared = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED || (child = fork()) < 0)
            return 6;
        if (child == 0) {
            struct timespec ts = {0, 300000000};
            nanosleep(&ts, 0);
            __atomic_store_n(shared, 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, shared, FUTEX_WAKE, 1, 0, 0, 0);
            _exit(0);
        }
    }
    if (!strcmp(mode, "allow") || !strcmp(mode, "idle"))
        prog = (struct sock_fprog){sizeof(allow_list) / sizeof(allow_list[0]), allow_list};
    else if (!strcmp(mode, "deny"))
        prog = (struct sock_fprog){sizeof(deny_list) / sizeof(deny_list[0]), deny_list};
    else if (!strcmp(mode, "arith"))
        prog = (struct sock_fprog){sizeof(arith) / sizeof(arith[0]), arith};
    else
        prog = (struct sock_fprog){sizeof(no_open) / sizeof(no_open[0]), no_open};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) {
        perror("seccomp");
        return 2;
    }
    if (!strcmp(mode, "errno")) {
        printf("opened %d of 250\n", filtered_threads_open());
        return 0;
    }
    if (!strcmp(mode, "idle")) {
        int idle = idle_while_waiting(shared, child);
        if (idle < 0)
            return 3;
        char line[64];
        int n = snprintf(line, sizeof(line), "idle while waiting: %s\n", idle ? "yes" : "no");
        return write(1, line, (size_t)n) == n ? 0 : 5;
    }
    for (long i = 0; i < 3; i++) {
        pthread_t t;
        void *failed = (void *)1;
        if (pthread_create(&t, 0, writer, (void *)i) || pthread_join(t, &failed) || failed)
            return 3;
    }
    if (!strcmp(mode, "deny") || !strcmp(mode, "arith")) {
        pid_t pid;
        char *child[] = {"echo", "child", 0};
        int status;
        if (posix_spawn(&pid, "/bin/echo", 0, 0, child, environ) || waitpid(pid, &status, 0) != pid)
            return 4;
        printf("child status %d\n", status);
    }
    return 0;
}
