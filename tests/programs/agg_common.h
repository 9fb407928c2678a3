/* Shared by the aggregation test programs: run a function either on the
 * main thread (natively) or as the first fiber of a carrier. */
#ifndef AGG_COMMON_H
#define AGG_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "company.h"
#include "ferry.h"

static struct ferry_group *agg_group;

#include "check.h"

static void agg_die(const char *what, int r)
{
    fprintf(stderr, "%s: %d\n", what, r);
    exit(2);
}

/* Runs fn(arg) natively ("native"), natively with a second thread alive
 * meanwhile ("thread", company.h), or in a fiber ("fiber"), with the group
 * made from FERRY_AGG when set (the profile), else the default. */
static inline void agg_run(const char *mode, void (*fn)(void *), void *arg)
{
    if (strcmp(mode, "native") == 0) {
        fn(arg);
        return;
    }
    if (strcmp(mode, "thread") == 0) {
        int r = company_start();
        if (r)
            agg_die("a second thread", r);
        fn(arg);
        company_end();
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
