/* An idle server's shape: one thread blocked reading (a listener), the
 * others waiting on a condition variable (idle workers), until input comes
 * from outside.  Under fibers the read sits in a ring and the waiters on
 * the engine's futexes; nothing happens until the input, and the carriers
 * should sleep until then.
 *
 *   idle_waits N    N waiting threads; prints "ready", reads a line from
 *                   stdin, wakes them, prints "woke N"
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int go, woke;

static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!go)
        pthread_cond_wait(&cond, &lock);
    woke++;
    pthread_mutex_unlock(&lock);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[64];
    if (n < 1 || n > 64) {
        fprintf(stderr, "usage: idle_waits N (1..64)\n");
        return 2;
    }
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], 0, waiter, 0)) {
            perror("pthread_create");
            return 1;
        }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (read(0, line, sizeof(line)) <= 0) {
        perror("read");
        return 1;
    }
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], 0);
    printf("woke %d\n", woke);
    return 0;
}
