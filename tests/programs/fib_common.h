/* Shared by the threaded test programs (fib_*.c): a pthread call that must
 * not fail ends the program (exit 2, named on stderr), threads are started
 * and joined in one line, and a sleep lasts through signals. */
#ifndef FIB_COMMON_H
#define FIB_COMMON_H
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, int err)
{
    fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, strerror(err));
    exit(2);
}

#define MUST(call)                                                                                 \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_)                                                                                   \
            die(#call, rc_);                                                                       \
    } while (0)

static inline pthread_t spawn(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    MUST(pthread_create(&t, NULL, fn, arg));
    return t;
}

static inline void *join(pthread_t t)
{
    void *v;
    MUST(pthread_join(t, &v));
    return v;
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

#endif
