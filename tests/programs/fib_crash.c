/* fib_crash [abort]: a thread dies while the others run, and takes the whole
 * process with it: SIGSEGV (a NULL dereference), or SIGABRT with an argument.
 * In fiber mode the faulting thread is a fiber on a carrier; the process must
 * still end with the same signal, not with the carrier's or a hang.
 *
 * What it prints before the crash is flushed, so the output is the same in
 * every run; a line after the crash would mean the process survived it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { BYSTANDERS = 4 };
static pthread_barrier_t started;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int do_abort;

static void *bystander(void *arg)
{
    long i = (long)arg;
    pthread_barrier_wait(&started);
    /* Blocked in different ways when the crash comes. */
    if (i % 2) {
        pthread_mutex_lock(&lock);
        for (;;)
            pthread_cond_wait(&never, &lock);
    }
    for (;;) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *crasher(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&started);
    printf("crashing thread: %s\n", do_abort ? "abort()" : "NULL dereference");
    fflush(stdout);
    if (do_abort)
        abort();
    volatile uintptr_t addr = 0;
    *(volatile int *)addr = 42;
    return NULL;
}

int main(int argc, char **argv)
{
    do_abort = argc > 1 && strcmp(argv[1], "abort") == 0;
    if (argc > 1 && !do_abort) {
        fprintf(stderr, "usage: fib_crash [abort]\n");
        return 2;
    }
    /* Bounded: if the crash does not end the process, SIGALRM does. */
    alarm(30);
    pthread_barrier_init(&started, NULL, BYSTANDERS + 2);
    pthread_t t;
    for (long i = 0; i < BYSTANDERS; i++)
        pthread_create(&t, NULL, bystander, (void *)i);
    pthread_create(&t, NULL, crasher, NULL);
    printf("threads started: %d\n", BYSTANDERS + 1);
    fflush(stdout);
    pthread_barrier_wait(&started);
    pthread_join(t, NULL);
    printf("survived the crash\n");
    return 0;
}
