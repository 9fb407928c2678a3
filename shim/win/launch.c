/* ferry-launch.exe DETOURS.DLL FERRY.DLL PARENT PROGRAM ARGS...: starts PROGRAM with
 * ARGS exactly as given (the command line wine itself makes: the program's
 * path quoted, then the arguments as they came) with FERRY.DLL
 * loaded before the program's code runs, through Detours'
 * DetourCreateProcessWithDllExW (it adds the DLL to the new process's
 * imports while it is suspended), waits for it and exits with its exit code.
 * PARENT is the process the run knows as the program's parent (`ferry run`,
 * or the Linux process that ran wine), given to ferry.dll in
 * FERRY_WIN_PARENT: this launcher is Ferry's machinery, not in the tree.
 * FERRY_WIN_IMAGE, when set, is the file to start in PROGRAM's place (its
 * image rewritten by `ferry instrument`, in the cache): the program's command
 * line still names PROGRAM, as it would natively.
 * Detours is Microsoft's; its DLL comes from the `detoursdll` package at
 * set-up time, loaded here by path. */
#include <windows.h>

#include "ferry_dll.h"

typedef BOOL (WINAPI *create_with_dll)(LPCWSTR, LPWSTR, LPSECURITY_ATTRIBUTES, LPSECURITY_ATTRIBUTES,
                                       BOOL, DWORD, LPVOID, LPCWSTR, LPSTARTUPINFOW,
                                       LPPROCESS_INFORMATION, LPCSTR, void *);

/* The rest of `cl` after its first `n` arguments (the C runtime's rules). */
static WCHAR *skip_args(WCHAR *cl, int n, WCHAR **args, int cap)
{
    for (int k = 0; k < n; k++) {
        while (*cl == L' ' || *cl == L'\t')
            cl++;
        WCHAR *start = cl;
        int quoted = 0;
        while (*cl && (quoted || (*cl != L' ' && *cl != L'\t'))) {
            if (*cl == L'"')
                quoted = !quoted;
            cl++;
        }
        if (k < cap)
            args[k] = start;
        if (*cl)
            *cl++ = 0;
    }
    while (*cl == L' ' || *cl == L'\t')
        cl++;
    return cl;
}

static void unquote(WCHAR *s)
{
    WCHAR *d = s;
    for (; *s; s++)
        if (*s != L'"')
            *d++ = *s;
    *d = 0;
}

static void say(const char *msg)
{
    DWORD n = 0, w;
    while (msg[n])
        n++;
    WriteFile(GetStdHandle(STD_ERROR_HANDLE), msg, n, &w, 0);
}

int main(void)
{
    WCHAR *args[5] = {0};
    WCHAR *rest = skip_args(GetCommandLineW(), 5, args, 5);
    if (!args[4] || !*args[4]) {
        say("usage: ferry-launch DETOURS.DLL FERRY.DLL PARENT PROGRAM [ARGS...]\n");
        return 2;
    }
    for (int i = 1; i < 5; i++)
        unquote(args[i]);
    SetEnvironmentVariableW(L"FERRY_WIN_PARENT", args[3]);
    WCHAR *program = args[4];
    static WCHAR image[2048];
    DWORD ni = GetEnvironmentVariableW(L"FERRY_WIN_IMAGE", image, 2048);
    SetEnvironmentVariableW(L"FERRY_WIN_IMAGE", 0);
    HMODULE detours = LoadLibraryW(args[1]);
    create_with_dll create = detours ? (create_with_dll)(void (*)(void))
        GetProcAddress(detours, "DetourCreateProcessWithDllExW") : 0;
    if (!create) {
        say("ferry-launch: cannot load DetourCreateProcessWithDllExW from detours.dll\n");
        return 2;
    }
    static char dll[2048];
    static WCHAR cl[32768];
    if (!WideCharToMultiByte(CP_ACP, 0, args[2], -1, dll, sizeof(dll), 0, 0))
        return 2;
    int n = 0;
    cl[n++] = L'"';
    for (WCHAR *p = program; *p && n < 32700; p++)
        cl[n++] = *p;
    cl[n++] = L'"';
    if (*rest) {
        cl[n++] = L' ';
        for (WCHAR *p = rest; *p && n < 32766; p++)
            cl[n++] = *p;
    }
    cl[n] = 0;
    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    GetStartupInfoW(&si);
    si.cb = sizeof(si);
    /* ERROR_INTERNAL_ERROR: wine's new process ended before any of its code
     * ran; it is started again (ferry_dll.h, FERRY_WIN_START_TRIES, says why) */
    BOOL started = FALSE;
    for (int tries = 0; tries < FERRY_WIN_START_TRIES && !started; tries++) {
        if (tries)
            Sleep(FERRY_WIN_START_PAUSE_MS);
        started = create(ni && ni < 2048 ? image : program, cl, 0, 0, TRUE, 0, 0, 0, &si, &pi, dll, 0);
        if (!started && GetLastError() != ERROR_INTERNAL_ERROR)
            break;
    }
    if (!started) {
        /* the Windows error says why (a flake under load in CI showed only
         * this line, with no cause to read) */
        char msg[80] = "ferry-launch: cannot start the program (Windows error ";
        DWORD err = GetLastError(), n = 0;
        while (msg[n])
            n++;
        char digits[12];
        int k = 0;
        do
            digits[k++] = (char)('0' + err % 10);
        while ((err /= 10) && k < 11);
        while (k)
            msg[n++] = digits[--k];
        msg[n++] = ')';
        msg[n++] = '\n';
        msg[n] = 0;
        say(msg);
        return 2;
    }
    CloseHandle(pi.hThread);
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = 1;
    GetExitCodeProcess(pi.hProcess, &code);
    ExitProcess(code);
}
