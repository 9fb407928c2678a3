/* getppid_loop N [M]: calls getppid() exactly N times and prints N.
 *
 * With M, it then forks; the child calls getppid() exactly M times, prints M
 * and exits; the parent makes no further getppid call.  Used to prove that the
 * shim counts exactly N calls, and that a forked child counts only its own. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static long calls(long n, const char *who)
{
    pid_t first = 0;
    long same = 0;
    for (long i = 0; i < n; i++) {
        pid_t p = getppid();
        if (i == 0)
            first = p;
        if (p == first)
            same++;
    }
    printf("%s getppid calls: %ld (all equal: %s)\n", who, n, same == n ? "yes" : "no");
    return n;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long m = argc > 2 ? atol(argv[2]) : -1;

    calls(n, "parent");
    fflush(stdout);
    if (m < 0)
        return 0;

    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        calls(m, "child");
        fflush(stdout);
        exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child) {
        perror("waitpid");
        return 1;
    }
    printf("child exited: %d status: %d\n", WIFEXITED(status), WEXITSTATUS(status));
    return 0;
}
