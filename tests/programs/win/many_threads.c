/* More threads over a life than ferry.dll has blocks for: `many_threads N
 * [AT_ONCE [CALLS]]` runs N threads in waves of AT_ONCE (default 1: one
 * after the other), each making CALLS (default 1) NtYieldExecution calls
 * (SwitchToThread), and prints how many ran.  A wave's threads all hold a
 * block of ferry.dll's at once: each makes a call (a wait that does not
 * wait) and says so before the wave goes on.  Made is not enough: wine may
 * start a thread only after earlier ones of its wave ended and gave their
 * blocks back. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

static HANDLE wave_made;
static int calls = 1;
static volatile LONG started;

static DWORD WINAPI yield_calls(LPVOID arg)
{
    (void)arg;
    WaitForSingleObject(wave_made, 0);
    InterlockedIncrement(&started);
    WaitForSingleObject(wave_made, INFINITE);
    for (int i = 0; i < calls; i++)
        SwitchToThread();
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, at_once = argc > 2 ? atoi(argv[2]) : 1, ran = 0;
    if (argc > 3)
        calls = atoi(argv[3]);
    if (at_once < 1)
        at_once = 1;
    HANDLE *wave = malloc(sizeof(HANDLE) * at_once);
    wave_made = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!wave || !wave_made)
        return 2;
    while (ran < n) {
        int k = 0;
        ResetEvent(wave_made);
        started = 0;
        /* a small stack: a wave of a thousand threads fits in any address space */
        while (k < at_once && ran + k < n) {
            wave[k] = CreateThread(NULL, 64 * 1024, yield_calls, NULL, STACK_SIZE_PARAM_IS_A_RESERVATION,
                                   NULL);
            if (!wave[k])
                break;
            k++;
        }
        while (started < k)
            Sleep(1);
        SetEvent(wave_made);
        for (int i = 0; i < k; i++) {
            WaitForSingleObject(wave[i], INFINITE);
            CloseHandle(wave[i]);
        }
        ran += k;
        if (k == 0 || (k < at_once && ran < n))
            break;
    }
    printf("%d threads ran\n", ran);
    return ran != n;
}
