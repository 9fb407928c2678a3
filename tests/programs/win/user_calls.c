/* Calls into win32u's stubs through user32: GetAsyncKeyState argv[1] times
 * (NtUserGetAsyncKeyState under wine and Windows 10+); no window, so it runs
 * headless.  Ferry must count the NtUser* calls as it counts ntdll's. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, down = 0;
    for (int i = 0; i < n; i++)
        if (GetAsyncKeyState(VK_F24) & 0x8000)
            down++;
    printf("%d calls, %d with F24 down\n", n, down);
    return 0;
}
