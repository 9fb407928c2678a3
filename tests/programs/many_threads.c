/* many_threads N K: N threads alive at once (more than a record's 1024
 * blocks), each making K getppid calls once all are up, then ending.
 * Prints "threads: N, calls: N*K" when all have joined. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_barrier_t all_up;
static long calls_each;

static void *work(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&all_up);
    for (long i = 0; i < calls_each; i++)
        syscall(SYS_getppid);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: many_threads N K\n");
        return 2;
    }
    int n = atoi(argv[1]);
    calls_each = atol(argv[2]);
    pthread_t *t = calloc(n, sizeof(*t));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&all_up, 0, n);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], &attr, work, 0)) {
            perror("many_threads: pthread_create");
            return 1;
        }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], 0);
    printf("threads: %d, calls: %ld\n", n, n * calls_each);
    return 0;
}
