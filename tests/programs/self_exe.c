/* What a program knows of its own file (tests/test_self_exe.py): its
 * /proc/self/exe by every name, whole and cut short, AT_EXECFN, and the same
 * after a chdir and in a child that execs /proc/self/exe.  It makes a call
 * of its own (a `syscall` instruction outside libc), so that Ferry runs it
 * from a rewritten image of its file. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long own_getpid(void)
{
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getpid) : "rcx", "r11", "memory");
    return ret;
}

static void show(const char *what, long n, const char *buf)
{
    printf("%s: %ld \"%.*s\"\n", what, n, n > 0 ? (int)n : 0, buf);
}

static void report(const char *when)
{
    char buf[4096], name[64];
    printf("-- %s\n", when);
    show("self", readlink("/proc/self/exe", buf, sizeof buf), buf);
    snprintf(name, sizeof name, "/proc/%ld/exe", own_getpid());
    show("pid", readlinkat(AT_FDCWD, name, buf, sizeof buf), buf);
    show("thread-self", readlink("/proc/thread-self/exe", buf, sizeof buf), buf);
    show("cut to 5", readlink("/proc/self/exe", buf, 5), buf);
    int dir = open("/proc/self", O_RDONLY | O_DIRECTORY);
    show("at /proc/self", readlinkat(dir, "exe", buf, sizeof buf), buf);
    close(dir);
    long bad = syscall(SYS_readlink, "/proc/self/exe", buf, 0);
    printf("size 0: %ld\n", bad);
    const char *fn = (const char *)getauxval(AT_EXECFN);
    printf("execfn: \"%s\"\n", fn ? fn : "(none)");
    show("other link", readlink("/proc/self/cwd", buf, sizeof buf), buf);
}

int main(int argc, char **argv)
{
    report(argc > 1 ? argv[1] : "start");
    if (argc > 1)
        return 0;
    if (chdir("/") != 0)
        return 1;
    report("after chdir /");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "exec of /proc/self/exe", (char *)0);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
