/* A parent of many children: N that exit at once (waited for one by one),
 * then one that a signal kills.  Under Ferry the parent's record keeps what
 * its waits saw; the killed child's own record never ends, so only those
 * tell how it ended.
 *
 * many_children N: prints the killed child's pid; exit 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 600;
    for (int i = 0; i < n; i++) {
        pid_t c = fork();
        if (c < 0)
            return 2;
        if (c == 0)
            _exit(i % 7);
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != i % 7)
            return 3;
    }
    int ready[2];
    if (pipe(ready))
        return 2;
    pid_t c = fork();
    if (c < 0)
        return 2;
    if (c == 0) {
        /* killed once it has run (and, under Ferry, has a record) */
        if (write(ready[1], "r", 1) != 1)
            _exit(5);
        for (;;)
            pause();
    }
    char b;
    if (read(ready[0], &b, 1) != 1)
        return 5;
    kill(c, SIGKILL);
    int st;
    if (waitpid(c, &st, 0) != c || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
        return 4;
    printf("%d\n", (int)c);
    return 0;
}
