/* Linked with libferry.so for its API (as programs using aggregation are):
 * prints whether the shim is active and how many getppid calls it counted. */
#include <stdio.h>
#include <unistd.h>

#include "ferry.h"

int main(void)
{
    static struct ferry_counts c;
    for (int i = 0; i < 5; i++)
        getppid();
    int r = ferry_counts_snapshot(&c);
    printf("active %d, snapshot %d, getppid counted %llu\n", ferry_is_active(), r,
           (unsigned long long)c.calls[110]);
    return 0;
}
