/* fork_env_pages N PROGRAM: forks, and the child execs PROGRAM with this
 * process's environment and N variables more, each at the start of a page
 * of its own that the parent wrote: the way a shell's malloc'd strings lie
 * in its fork child, on pages the two share until one of them writes.
 * Prints the child's minor page faults (wait4's rusage: the child's before
 * its exec and the program's), so that a test can tell what reading the
 * environment before the exec costs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fork_env_pages N PROGRAM\n");
        return 2;
    }
    int n = atoi(argv[1]), have = 0;
    while (environ[have])
        have++;
    char **env = calloc((size_t)(have + n + 1), sizeof(char *));
    char *pages = aligned_alloc(4096, (size_t)(n + 1) * 4096);
    if (!env || !pages)
        return 1;
    memcpy(env, environ, (size_t)have * sizeof(char *));
    for (int i = 0; i < n; i++) {
        env[have + i] = pages + (size_t)i * 4096;
        snprintf(env[have + i], 64, "FORK_ENV_PAGE_%d=%d", i, i);
    }
    char *args[] = {argv[2], 0};
    pid_t pid = fork();
    if (pid == 0) {
        execve(argv[2], args, env);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid)
        return 1;
    printf("%ld\n", ru.ru_minflt);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
