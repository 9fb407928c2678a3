/* Each thread's alternate signal stack is its own, as Go and Rust give every
 * thread one.  Four threads each set one, wait until all have, then each:
 *
 *   - reads its setting back (its own stack, SS_ONSTACK clear);
 *   - raises SIGUSR1 on itself: the SA_ONSTACK handler must run on that
 *     thread's stack, see SS_ONSTACK set, and be refused a change (EPERM);
 *     in the middle it sleeps, so that the other threads' handlers run
 *     meanwhile (on one carrier: their frames must not land on its stack);
 *   - checks that its handler's frame was intact when the sleep ended.
 *
 * A new thread starts without one (SS_DISABLE).  Prints one line per thread
 * (1: as it should be) and "ok" at the end. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 4
#define ALT_SIZE (64 * 1024)

static pthread_barrier_t all_set;

struct seen {
    char *alt;
    int started_without; /* SS_DISABLE before it set one */
    int own;            /* reads its own back, SS_ONSTACK clear */
    int in_alt;         /* the handler's frame lies in this thread's stack */
    int onstack_flag;   /* sigaltstack inside the handler says SS_ONSTACK */
    int refused;        /* ... and refuses a change with EPERM */
    int intact;         /* a pattern on the handler's frame survived the sleep */
};

static __thread struct seen *mine;

static void on_usr1(int sig)
{
    (void)sig;
    volatile unsigned char mark[512];
    for (unsigned i = 0; i < sizeof(mark); i++)
        mark[i] = (unsigned char)(i * 7 + 1);
    uintptr_t here = (uintptr_t)mark;
    mine->in_alt = here >= (uintptr_t)mine->alt && here < (uintptr_t)mine->alt + ALT_SIZE;
    stack_t now;
    if (sigaltstack(NULL, &now) == 0)
        mine->onstack_flag = (now.ss_flags & SS_ONSTACK) != 0;
    stack_t other = {.ss_sp = malloc(ALT_SIZE), .ss_size = ALT_SIZE};
    mine->refused = sigaltstack(&other, NULL) == -1 && errno == EPERM;
    free(other.ss_sp);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int intact = 1;
    for (unsigned i = 0; i < sizeof(mark); i++)
        intact &= mark[i] == (unsigned char)(i * 7 + 1);
    mine->intact = intact;
}

static void *thread(void *arg)
{
    long k = (long)arg;
    struct seen *s = calloc(1, sizeof(*s));
    mine = s;
    stack_t at_start;
    s->started_without = sigaltstack(NULL, &at_start) == 0 && (at_start.ss_flags & SS_DISABLE);
    s->alt = malloc(ALT_SIZE);
    stack_t alt = {.ss_sp = s->alt, .ss_size = ALT_SIZE};
    if (sigaltstack(&alt, NULL) != 0) {
        perror("sigaltstack");
        exit(1);
    }
    pthread_barrier_wait(&all_set);
    stack_t back;
    s->own = sigaltstack(NULL, &back) == 0 && back.ss_sp == s->alt && back.ss_size == ALT_SIZE &&
              !(back.ss_flags & (SS_ONSTACK | SS_DISABLE));
    pthread_barrier_wait(&all_set);
    raise(SIGUSR1);
    (void)k;
    return s;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    pthread_barrier_init(&all_set, NULL, THREADS);
    pthread_t t[THREADS];
    for (long k = 0; k < THREADS; k++)
        pthread_create(&t[k], NULL, thread, (void *)k);
    for (int k = 0; k < THREADS; k++) {
        void *r;
        pthread_join(t[k], &r);
        struct seen *s = r;
        printf("thread %d: started without %d, reads its own %d, handler on it %d, "
               "onstack %d, change refused %d, frame intact %d\n",
               k, s->started_without, s->own, s->in_alt, s->onstack_flag, s->refused, s->intact);
    }
    printf("ok\n");
    return 0;
}
