/* bench/spawn: N posix_spawns of a program, each waited for; prints the
 * wall µs per spawn and the CPU µs per spawn of the children (getrusage),
 * measured by the driver itself, so that under `ferry run` nothing of
 * ferry run's own start and end is in them.  A C loop moves far less from
 * one round to the next than a shell loop timed from outside (±5 µs a
 * process against ±20-50 on a loaded 2-CPU VM). */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double seconds(const struct timeval *tv)
{
    return tv->tv_sec + tv->tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: spawn_driver COUNT PROGRAM\n");
        return 2;
    }
    int n = atoi(argv[1]);
    char *args[] = {argv[2], 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        pid_t pid;
        int status;
        if (posix_spawn(&pid, argv[2], 0, 0, args, environ) != 0 || waitpid(pid, &status, 0) != pid ||
            status != 0) {
            fprintf(stderr, "spawn_driver: %s failed\n", argv[2]);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double wall = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%.2f %.2f\n", wall / n * 1e6, (seconds(&ru.ru_utime) + seconds(&ru.ru_stime)) / n * 1e6);
    return 0;
}
