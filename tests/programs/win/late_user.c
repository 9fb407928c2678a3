/* win32u mapped after start-up: the program imports neither user32 nor
 * win32u; it loads user32 (which brings win32u) with LoadLibrary once it
 * runs, then calls GetAsyncKeyState argv[1] times through it
 * (NtUserGetAsyncKeyState).  ferry.dll must patch win32u when it loads. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

typedef SHORT (WINAPI *key_state)(int);

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, down = 0;
    if (GetModuleHandleA("win32u.dll")) {
        printf("win32u was mapped at start-up\n");
        return 3;
    }
    HMODULE user32 = LoadLibraryA("user32.dll");
    key_state get = user32 ? (key_state)(void (*)(void))GetProcAddress(user32, "GetAsyncKeyState") : 0;
    if (!get) {
        printf("no user32\n");
        return 2;
    }
    for (int i = 0; i < n; i++)
        if (get(VK_F24) & 0x8000)
            down++;
    printf("%d calls, %d with F24 down\n", n, down);
    return 0;
}
