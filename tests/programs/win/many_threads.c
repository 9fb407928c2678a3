/* More threads than ferry.dll has blocks for: `many_threads N` runs N
 * threads one after the other, each making one NtYieldExecution call
 * (SwitchToThread), and prints how many ran. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

static DWORD WINAPI yield_once(LPVOID arg)
{
    (void)arg;
    SwitchToThread();
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, ran = 0;
    for (int i = 0; i < n; i++) {
        HANDLE t = CreateThread(NULL, 0, yield_once, NULL, 0, NULL);
        if (!t)
            break;
        WaitForSingleObject(t, INFINITE);
        CloseHandle(t);
        ran++;
    }
    printf("%d threads ran\n", ran);
    return ran != n;
}
