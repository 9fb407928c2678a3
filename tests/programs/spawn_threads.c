/* spawn_threads THREADS N PATH [fork]: THREADS threads each posix_spawn PATH
 * N times at once (vfork children of several threads claim record slots
 * together).  With `fork` the process first spawns two children (the
 * second claim takes slots for two, and leaves one pair unused), then
 * forks, and parent and child each do the above (the child must not take
 * the slots its parent claimed ahead).  Prints how many children it waited
 * for that exited 0. */
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static long n;
static char *path;
static pthread_barrier_t start;

static long spawn_n(void)
{
    long ok = 0;
    for (long i = 0; i < n; i++) {
        pid_t pid;
        char *argv[] = {path, 0};
        int st;
        if (posix_spawn(&pid, path, 0, 0, argv, environ) == 0 && waitpid(pid, &st, 0) == pid &&
            WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok++;
    }
    return ok;
}

static void *spawner(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start);
    return (void *)spawn_n();
}

static long spawn_threads(int threads)
{
    pthread_t t[64];
    pthread_barrier_init(&start, 0, (unsigned)threads);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], 0, spawner, 0);
    long ok = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok += (long)r;
    }
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int threads = atoi(argv[1]);
    n = atol(argv[2]);
    path = argv[3];
    if (threads < 1 || threads > 64)
        return 2;
    if (argc < 5 || strcmp(argv[4], "fork") != 0) {
        printf("%ld children exited 0\n", spawn_threads(threads));
        return 0;
    }
    long wanted = n;
    n = 2;
    long ok = spawn_n();
    n = wanted;
    pid_t child = fork();
    if (child < 0)
        return 2;
    long mine = spawn_threads(threads);
    if (child == 0)
        _exit(mine == threads * n ? 0 : 1);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 3;
    printf("%ld children exited 0\n", ok + mine + threads * n);
    return 0;
}
