/* fib_stack_reuse: threads whose stack (and so their thread-local storage,
 * which glibc puts at its top) is written over and unmapped the moment they
 * are joined.
 *
 * Written for fiber mode with two carriers: the main thread watches each
 * new thread's tid word without a system call (pthread_tryjoin_np in a
 * loop) while the thread ends on the other carrier, and fills the stack
 * with a pattern as soon as the join succeeds, within a few nanoseconds.
 * Nothing may read the ended thread's TLS after its tid word reads 0, as
 * the kernel does not: what it read would be the pattern.
 *
 * stdout: "threads: N joined, sum ok", the same natively and under Ferry;
 * exit 0 when every thread ran; alarm(60) ends a run that hangs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fib_common.h"

#define THREADS 2000
#define STACK (64 * 1024)
#define TOP (8 * 1024)

static __thread uint64_t mine;

static void *work(void *arg)
{
    /* a few calls, so that the thread has been through the shim */
    mine = (uintptr_t)arg;
    for (int i = 0; i < 3; i++)
        mine += (uint64_t)getppid() != 0;
    return (void *)(uintptr_t)mine;
}

int main(void)
{
    alarm(60);
    uint64_t sum = 0, want = 0;
    for (int i = 0; i < THREADS; i++) {
        void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED)
            die("mmap", errno);
        pthread_attr_t attr;
        MUST(pthread_attr_init(&attr));
        MUST(pthread_attr_setstack(&attr, stack, STACK));
        pthread_t t;
        MUST(pthread_create(&t, &attr, work, (void *)(uintptr_t)i));
        MUST(pthread_attr_destroy(&attr));
        void *v;
        int rc;
        while ((rc = pthread_tryjoin_np(t, &v)) == EBUSY)
            ;
        MUST(rc);
        /* the top first: glibc put the thread block and static TLS there */
        memset((char *)stack + STACK - TOP, 0xa5, TOP);
        memset(stack, 0xa5, STACK - TOP);
        if (munmap(stack, STACK) != 0)
            die("munmap", errno);
        sum += (uintptr_t)v;
        want += (uint64_t)i + 3;
    }
    printf("threads: %d joined, sum %s\n", THREADS, sum == want ? "ok" : "FAIL");
    return sum != want;
}
