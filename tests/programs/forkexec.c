/* forkexec: process creation.  fork + execve of /bin/echo, vfork + execv of
 * /bin/true and /bin/false, posix_spawn of /bin/echo, posix_spawnp of
 * `sh -c 'exit 3'`, and a forked child that exits without exec.  Prints the
 * exit status of each child. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void report(const char *what, pid_t child)
{
    int status;
    pid_t r = waitpid(child, &status, 0);
    if (r != child)
        printf("%s: waitpid failed: %s\n", what, strerror(errno));
    else if (WIFEXITED(status))
        printf("%s: exit %d\n", what, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        printf("%s: signal %d\n", what, WTERMSIG(status));
    fflush(stdout);
}

int main(void)
{
    pid_t self = getpid();
    fflush(stdout);

    pid_t c = fork();
    if (c == 0) {
        char *argv[] = {"echo", "hello", "from", "fork+execve", NULL};
        execve("/bin/echo", argv, environ);
        _exit(127);
    }
    report("fork+execve /bin/echo", c);

    c = vfork();
    if (c == 0) {
        char *argv[] = {"true", NULL};
        execv("/bin/true", argv);
        _exit(127);
    }
    report("vfork+execv /bin/true", c);

    c = vfork();
    if (c == 0) {
        char *argv[] = {"false", NULL};
        execv("/bin/false", argv);
        _exit(127);
    }
    report("vfork+execv /bin/false", c);

    char *echo_argv[] = {"echo", "hello from posix_spawn", NULL};
    int rc = posix_spawn(&c, "/bin/echo", NULL, NULL, echo_argv, environ);
    if (rc != 0)
        printf("posix_spawn failed: %s\n", strerror(rc));
    else
        report("posix_spawn /bin/echo", c);

    char *sh_argv[] = {"sh", "-c", "echo from sh; exit 3", NULL};
    rc = posix_spawnp(&c, "sh", NULL, NULL, sh_argv, environ);
    if (rc != 0)
        printf("posix_spawnp failed: %s\n", strerror(rc));
    else
        report("posix_spawnp sh -c 'exit 3'", c);

    c = fork();
    if (c == 0) {
        printf("forked child: own pid differs from parent: %s\n", getpid() != self ? "yes" : "no");
        printf("forked child: parent is the original process: %s\n",
               getppid() == self ? "yes" : "no");
        fflush(stdout);
        _exit(5);
    }
    report("fork without exec", c);

    char *missing_argv[] = {"missing", NULL};
    rc = posix_spawn(&c, "/nonexistent/ferry-test-binary", NULL, NULL, missing_argv, environ);
    printf("posix_spawn of a missing file: %s\n", rc == 0 ? "started?" : strerror(rc));
    return 0;
}
