/* A second thread that waits, on a condition variable, until told to end:
 * under -p fibers a program's only thread makes its calls natively, so a
 * test of the engine's path for a program's threads gives it company.  It
 * waits on a futex, not in a call of the ring: a fiber parked on a futex is
 * in no pool's count of calls in flight. */
#ifndef COMPANY_H
#define COMPANY_H
#include <pthread.h>

static pthread_mutex_t company_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t company_cond = PTHREAD_COND_INITIALIZER;
static int company_done;
static pthread_t company_thread;

static void *company_wait(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&company_lock);
    while (!company_done)
        pthread_cond_wait(&company_cond, &company_lock);
    pthread_mutex_unlock(&company_lock);
    return 0;
}

/* 0, or the error of pthread_create */
static inline int company_start(void) { return pthread_create(&company_thread, 0, company_wait, 0); }

static inline void company_end(void)
{
    pthread_mutex_lock(&company_lock);
    company_done = 1;
    pthread_cond_signal(&company_cond);
    pthread_mutex_unlock(&company_lock);
    pthread_join(company_thread, 0);
}
#endif
