/* A check that fails is printed ("FAIL file:line: why") and counted; the
 * program ends with status 1 when any did.  Shared by the Linux and the
 * Windows (mingw) test programs. */
#ifndef FERRY_TEST_CHECK_H
#define FERRY_TEST_CHECK_H

#include <stdio.h>

static int failures __attribute__((unused));
#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

#endif
