/* threads: T pthreads using a mutex, a condition variable, a barrier and
 * thread-local storage.  Each thread write()s two lines (in thread order,
 * serialised by the condition variable) and calls getpid() exactly K times.
 * The main thread never calls getpid(); it joins and prints a sum.  The output
 * is deterministic. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T 6
#define K 1000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t barrier;
static int turn;
static __thread long tls_sum;
static __thread int tls_id = -1;
static long results[T];
static pid_t pids[T];

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(1, buf, len);
        if (n <= 0)
            abort();
        buf += n;
        len -= (size_t)n;
    }
}

/* Waits for `my_turn`, writes `line`, passes the turn on. */
static void ordered_write(int my_turn, const char *line)
{
    pthread_mutex_lock(&mu);
    while (turn != my_turn)
        pthread_cond_wait(&cv, &mu);
    write_all(line, strlen(line));
    turn++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    char line[96];

    tls_id = id;
    snprintf(line, sizeof line, "thread %d: hello (tls_sum starts at %ld)\n", tls_id, tls_sum);
    ordered_write(id, line);

    pthread_barrier_wait(&barrier);
    pid_t me = 0;
    for (int k = 0; k < K; k++) {
        pid_t p = getpid();
        if (k == 0)
            me = p;
        if (p == me)
            tls_sum += id + 1;
    }
    pids[id] = me;
    pthread_barrier_wait(&barrier);

    snprintf(line, sizeof line, "thread %d: tls_sum %ld\n", tls_id, tls_sum);
    ordered_write(T + id, line);
    results[id] = tls_sum;
    return (void *)(intptr_t)(100 + id);
}

int main(void)
{
    pthread_t th[T];
    if (pthread_barrier_init(&barrier, NULL, T) != 0)
        return 1;
    for (int i = 0; i < T; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    long ret_ok = 0;
    for (int i = 0; i < T; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        ret_ok += (intptr_t)ret == 100 + i;
    }
    long total = 0, same_pid = 0;
    for (int i = 0; i < T; i++) {
        total += results[i];
        same_pid += pids[i] == pids[0];
    }
    printf("threads joined: %ld/%d\n", ret_ok, T);
    printf("same pid in every thread: %s\n", same_pid == T ? "yes" : "no");
    printf("main tls_id: %d tls_sum: %ld\n", tls_id, tls_sum);
    printf("total: %ld (expected %ld)\n", total, (long)K * T * (T + 1) / 2);
    pthread_barrier_destroy(&barrier);
    return 0;
}
