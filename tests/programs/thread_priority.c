/* Each thread's nice value is its own, set and read by its thread id
 * (setpriority/getpriority with PRIO_PROCESS), as servers lower their
 * background threads: a thread lowers itself (tid 0), the first thread sets
 * another's and reads every one back.  Under -p fibers a thread's id named
 * no task of the kernel's (ESRCH), and a thread's own change by tid 0 set
 * its carrier's, every fiber's on it.  Prints one line per thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define THREADS 3

static pthread_barrier_t set, read_all;
static pid_t tids[THREADS];

static int nice_of(pid_t tid)
{
    errno = 0;
    int n = getpriority(PRIO_PROCESS, (id_t)tid);
    return errno ? -100 - errno : n;
}

static void *thread_main(void *arg)
{
    long i = (long)arg;
    tids[i] = (pid_t)syscall(SYS_gettid);
    if (i == 1 && setpriority(PRIO_PROCESS, 0, 4) != 0)  /* itself */
        printf("thread 1: setpriority(0) %s\n", strerror(errno));
    pthread_barrier_wait(&set);
    pthread_barrier_wait(&read_all);
    return 0;
}

int main(void)
{
    int base = nice_of(0);
    pthread_barrier_init(&set, 0, THREADS + 1);
    pthread_barrier_init(&read_all, 0, THREADS + 1);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], 0, thread_main, (void *)i);
    pthread_barrier_wait(&set);
    if (setpriority(PRIO_PROCESS, (id_t)tids[2], 7) != 0)  /* another */
        printf("setpriority(tid of thread 2) %s\n", strerror(errno));
    printf("first thread: %d\n", nice_of(0) - base);
    for (int i = 0; i < THREADS; i++)
        printf("thread %d: %d\n", i, nice_of(tids[i]) - base);
    pthread_barrier_wait(&read_all);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], 0);
    return 0;
}
