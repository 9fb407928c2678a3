/* Shared by the aggregation test programs: run a function either on the
 * main thread (natively) or as the first fiber of a carrier. */
#ifndef AGG_COMMON_H
#define AGG_COMMON_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ferry.h"

static struct ferry_group *agg_group;

#include "check.h"

static void agg_die(const char *what, int r)
{
    fprintf(stderr, "%s: %d\n", what, r);
    exit(2);
}

static pthread_mutex_t agg_company_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t agg_company_cond = PTHREAD_COND_INITIALIZER;
static int agg_company_done;

/* Waits on a condition variable, not in a call of the ring: under -p fibers
 * a fiber parked on a futex is in no pool's count of calls in flight. */
static void *agg_keep_company(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&agg_company_lock);
    while (!agg_company_done)
        pthread_cond_wait(&agg_company_cond, &agg_company_lock);
    pthread_mutex_unlock(&agg_company_lock);
    return 0;
}

/* Runs fn(arg) natively ("native"), natively with a second thread alive
 * meanwhile, waiting to be told to end ("thread": under -p fibers a program's
 * only thread makes its calls natively, so a test of the engine's path for
 * a program's threads gives it company), or in a fiber ("fiber"), with the
 * group made from FERRY_AGG when set (the profile), else the default. */
static inline void agg_run(const char *mode, void (*fn)(void *), void *arg)
{
    if (strcmp(mode, "native") == 0) {
        fn(arg);
        return;
    }
    if (strcmp(mode, "thread") == 0) {
        pthread_t t;
        int r = pthread_create(&t, 0, agg_keep_company, 0);
        if (r)
            agg_die("a second thread", r);
        fn(arg);
        pthread_mutex_lock(&agg_company_lock);
        agg_company_done = 1;
        pthread_cond_signal(&agg_company_cond);
        pthread_mutex_unlock(&agg_company_lock);
        pthread_join(t, 0);
        return;
    }
    struct ferry_group_config cfg;
    ferry_group_config_default(&cfg, 1);
    int r = ferry_group_create(&agg_group, &cfg);
    if (r)
        agg_die("ferry_group_create", r);
    r = ferry_carrier_run(agg_group, fn, arg);
    if (r)
        agg_die("ferry_carrier_run", r);
}

#endif
