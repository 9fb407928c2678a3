/* bench/pe_cluster's Linux side: sched_yield(2) per call, best of 5 runs of
 * N, in ns: the kernel's part of what NtYieldExecution costs under wine
 * (wine runs it as sched_yield after its own PE-to-Unix switch). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    double best = 1e300;
    for (int rep = 0; rep < 5; rep++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++)
            sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double per = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n;
        best = per < best ? per : best;
    }
    printf("%.1f\n", best);
    return 0;
}
