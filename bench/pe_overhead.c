/* bench/pe_overhead (a Windows program, built with mingw-w64 by
 * bench/pe_overhead.py): the per-call cost of NtYieldExecution and of a
 * 1-byte WriteFile, best of 5 runs of N calls, in ns per call.
 *
 *   pe_overhead.exe yield N
 *   pe_overhead.exe write N FILE
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_clock.h"

int main(int argc, char **argv)
{
    if (argc < 3)
        return 64;
    long n = atol(argv[2]);
    yield_fn yield = (yield_fn)(void (*)(void))GetProcAddress(GetModuleHandleA("ntdll.dll"),
                                                              "NtYieldExecution");
    HANDLE h = INVALID_HANDLE_VALUE;
    if (strcmp(argv[1], "write") == 0) {
        if (argc < 4)
            return 64;
        h = CreateFileA(argv[3], GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
        if (h == INVALID_HANDLE_VALUE)
            return 1;
    }
    double best = 1e300;
    for (int rep = 0; rep < 5; rep++) {
        DWORD done;
        double t0 = now_ns();
        if (h == INVALID_HANDLE_VALUE)
            for (long i = 0; i < n; i++)
                yield();
        else
            for (long i = 0; i < n; i++)
                WriteFile(h, "x", 1, &done, NULL);
        double per = (now_ns() - t0) / (double)n;
        if (per < best)
            best = per;
        if (h != INVALID_HANDLE_VALUE)
            SetFilePointer(h, 0, NULL, FILE_BEGIN);
    }
    printf("%.1f\n", best);
    return 0;
}
