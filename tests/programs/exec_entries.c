/* exec_entries N PROGRAM [ARG...]: execs PROGRAM with an environment of
 * exactly N entries, the first of its own and then PAD_k=k, so that a test
 * can put the exec hook at the edges of the batches it reads the
 * environment's pointers in. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: exec_entries N PROGRAM [ARG...]\n");
        return 2;
    }
    int n = atoi(argv[1]), k = 0;
    char **env = calloc((size_t)n + 1, sizeof(char *));
    if (!env)
        return 1;
    for (char **p = environ; *p && k < n; p++)
        env[k++] = *p;
    for (; k < n; k++) {
        env[k] = malloc(32);
        snprintf(env[k], 32, "PAD_%d=%d", k, k);
    }
    execve(argv[2], argv + 2, env);
    perror(argv[2]);
    return 127;
}
