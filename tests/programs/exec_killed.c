/* exec_killed PROGRAM: a child that is killed right after it execs PROGRAM,
 * before anything of the new image has run.  The child asks to be traced and
 * execs; a traced process stops at the first instruction of its new image,
 * where the parent kills it.  Prints how the child ended. */
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exec_killed PROGRAM\n");
        return 2;
    }
    pid_t c = fork();
    if (c == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        execv(argv[1], argv + 1);
        _exit(127);
    }
    int status;
    if (waitpid(c, &status, 0) != c || !WIFSTOPPED(status)) {
        printf("child: did not stop after its exec\n");
        return 1;
    }
    kill(c, SIGKILL);
    waitpid(c, &status, 0);
    if (WIFSIGNALED(status))
        printf("child: signal %d\n", WTERMSIG(status));
    else
        printf("child: exit %d\n", WEXITSTATUS(status));
    return 0;
}
