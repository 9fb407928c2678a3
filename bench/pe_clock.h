/* The Windows benchmark programs' clock and the call they time. */
#ifndef FERRY_BENCH_PE_CLOCK_H
#define FERRY_BENCH_PE_CLOCK_H

#include <windows.h>

typedef LONG (NTAPI *yield_fn)(void);   /* NtYieldExecution */

static double now_ns(void)
{
    LARGE_INTEGER c, f;
    QueryPerformanceCounter(&c);
    QueryPerformanceFrequency(&f);
    return (double)c.QuadPart * 1e9 / (double)f.QuadPart;
}

#endif
