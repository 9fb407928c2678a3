/* pthread_cancel of threads blocked in cancellation points (read on a pipe,
 * nanosleep, pthread_cond_wait): each must end with PTHREAD_CANCELED after
 * running its cleanup handler, exactly as without Ferry. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static int cleaned[3];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void cleanup(void *arg) { cleaned[(long)arg] = 1; }

static void *blocked_read(void *arg)
{
    char c;
    pthread_cleanup_push(cleanup, arg);
    read(pipefd[0], &c, 1);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *blocked_sleep(void *arg)
{
    struct timespec ts = {30, 0};
    pthread_cleanup_push(cleanup, arg);
    nanosleep(&ts, NULL);
    pthread_cleanup_pop(0);
    return NULL;
}

static void unlock(void *arg) { (void)arg; pthread_mutex_unlock(&mu); }

static void *blocked_wait(void *arg)
{
    pthread_mutex_lock(&mu);
    pthread_cleanup_push(unlock, NULL);
    pthread_cleanup_push(cleanup, arg);
    for (;;)
        pthread_cond_wait(&cv, &mu);
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
    return NULL;
}

int main(void)
{
    void *(*fns[3])(void *) = {blocked_read, blocked_sleep, blocked_wait};
    const char *names[3] = {"read", "nanosleep", "pthread_cond_wait"};
    pthread_t t[3];
    pipe(pipefd);
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, fns[i], (void *)i);
    struct timespec settle = {0, 100 * 1000 * 1000};
    nanosleep(&settle, NULL);
    for (int i = 0; i < 3; i++) {
        void *ret;
        pthread_cancel(t[i]);
        pthread_join(t[i], &ret);
        printf("%s: %s, cleanup %s\n", names[i], ret == PTHREAD_CANCELED ? "cancelled" : "NOT cancelled",
               cleaned[i] ? "ran" : "did NOT run");
    }
    return 0;
}
