/* vfork_sites: a vfork child that calls getppid from 700 call sites of its
 * own (inline `syscall` instructions, each a site once Ferry has planned
 * this program), then exits.  More sites than a block's site table holds
 * in its first five pages: tests/test_process_records.py checks that the
 * child's record keeps every one.  Prints how many calls saw a parent. */
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SITE                                                                            \
    do {                                                                                \
        long r_;                                                                        \
        __asm__ volatile("syscall" : "=a"(r_) : "0"((long)SYS_getppid) : "rcx", "r11", "memory"); \
        n += r_ > 0;                                                                    \
    } while (0);
#define SITES10 SITE SITE SITE SITE SITE SITE SITE SITE SITE SITE
#define SITES100 SITES10 SITES10 SITES10 SITES10 SITES10 SITES10 SITES10 SITES10 SITES10 SITES10

static volatile long seen;

__attribute__((noinline)) static void many(void)
{
    long n = 0;
    SITES100 SITES100 SITES100 SITES100 SITES100 SITES100 SITES100
    seen = n;
}

int main(void)
{
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        many();
        _exit(seen == 700 ? 0 : 1);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    printf("child: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
