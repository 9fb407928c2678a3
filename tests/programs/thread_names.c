/* Each thread reads back its own name (pthread_setname_np and
 * pthread_getname_np of the calling thread: prctl PR_SET_NAME and
 * PR_GET_NAME), however many threads named themselves meanwhile, and a new
 * thread starts with its creator's name; a thread's fork child has that
 * thread's name.
 *
 * Under fibers a thread's name was its carrier's, shared by every thread on
 * it: each read back the name set last by any of them.  And the process's
 * name stays its first thread's (/proc/self/comm, what ps and pgrep match):
 * under fibers a thread naming itself named carrier 0, the first thread, and
 * with it the process.
 *
 * Prints one line per thread, the same natively and under every profile. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4

static pthread_barrier_t all_named, all_read;
static char got[THREADS + 1][16], born[THREADS][16], want[THREADS][16];
static char child_saw[64], process_comm[32];
static const char *names[THREADS] = {"alpha", "beta", "gamma-is-too-long-a-name", "delta"};

static void *named(void *arg)
{
    long i = (long)arg;
    pthread_getname_np(pthread_self(), born[i], sizeof(born[i]));
    snprintf(want[i], sizeof(want[i]), "%s", names[i]);  /* the kernel keeps 15 bytes */
    pthread_setname_np(pthread_self(), want[i]);
    pthread_barrier_wait(&all_named);
    pthread_getname_np(pthread_self(), got[i], sizeof(got[i]));
    if (i == 0) {
        /* the name set last may be another thread's */
        int fds[2];
        if (pipe(fds) == 0) {
            pid_t c = fork();
            if (c == 0) {
                char own[16] = "", comm[32] = "";
                pthread_getname_np(pthread_self(), own, sizeof(own));
                FILE *f = fopen("/proc/self/comm", "r");
                if (f && fgets(comm, sizeof(comm), f))
                    comm[strcspn(comm, "\n")] = 0;
                dprintf(fds[1], "\"%s\", /proc/self/comm \"%s\"", own, comm);
                _exit(0);
            }
            close(fds[1]);
            if (read(fds[0], child_saw, sizeof(child_saw) - 1) < 0)
                child_saw[0] = 0;
            waitpid(c, 0, 0);
            close(fds[0]);
        }
    }
    pthread_barrier_wait(&all_read);
    return 0;
}

int main(void)
{
    pthread_t t[THREADS];
    pthread_setname_np(pthread_self(), "creator");
    pthread_barrier_init(&all_named, 0, THREADS + 1);
    pthread_barrier_init(&all_read, 0, THREADS + 1);
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], 0, named, (void *)i))
            return 2;
    pthread_barrier_wait(&all_named);
    pthread_getname_np(pthread_self(), got[THREADS], sizeof(got[THREADS]));
    FILE *f = fopen("/proc/self/comm", "r");
    if (f && fgets(process_comm, sizeof(process_comm), f))
        process_comm[strcspn(process_comm, "\n")] = 0;
    if (f)
        fclose(f);
    pthread_barrier_wait(&all_read);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], 0);
        printf("thread %d: born \"%s\", named \"%s\", reads \"%s\"\n", i, born[i], want[i], got[i]);
    }
    printf("main: reads \"%s\"\n", got[THREADS]);
    printf("the process, once every thread named itself: /proc/self/comm \"%s\"\n", process_comm);
    printf("thread 0's fork child: %s\n", child_saw);
    return 0;
}
