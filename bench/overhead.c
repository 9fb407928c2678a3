/* getppid in a loop through libc: prints the ns per call of the best of R
 * rounds of N calls.  Run natively and rewritten by bench/overhead.py. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    double best = 1e30;
    volatile pid_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            sink += getppid();
        double per = (now_ns() - t0) / n;
        if (per < best)
            best = per;
    }
    printf("%.2f\n", best);
    return sink == 0 ? 1 : 0;
}
