/* A child ended by TerminateProcess: `kill_child` starts itself as
 * `kill_child wait EVENT`, which signals EVENT and sleeps for ever; the
 * parent then ends it with TerminateProcess(child, 7), waits for it and
 * prints the exit code it got.  The child never returns from a call of its
 * own: the report must still say how it ended.  `kill_child N` calls
 * TerminateProcess N times (the later ones find the child ended): the calls
 * ferry.dll makes in its hook must not be counted as the program's. */
#include <windows.h>
#include <stdio.h>
#include <wchar.h>

int wmain(int argc, wchar_t **argv)
{
    if (argc == 3 && wcscmp(argv[1], L"wait") == 0) {
        HANDLE ready = OpenEventW(EVENT_MODIFY_STATE, FALSE, argv[2]);
        if (!ready || !SetEvent(ready))
            return 1;
        Sleep(INFINITE);
        return 2;
    }
    int times = argc == 2 ? _wtoi(argv[1]) : 1;
    wchar_t name[64], self[MAX_PATH], cmd[MAX_PATH + 128];
    swprintf(name, 64, L"ferry_kill_child_%lu", GetCurrentProcessId());
    HANDLE ready = CreateEventW(NULL, TRUE, FALSE, name);
    GetModuleFileNameW(NULL, self, MAX_PATH);
    swprintf(cmd, MAX_PATH + 128, L"\"%ls\" wait %ls", self, name);
    STARTUPINFOW si = {sizeof(si)};
    PROCESS_INFORMATION pi;
    if (!ready || !CreateProcessW(self, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi))
        return 3;
    if (WaitForSingleObject(ready, 60000) != WAIT_OBJECT_0)
        return 4;
    if (!TerminateProcess(pi.hProcess, 7))
        return 5;
    WaitForSingleObject(pi.hProcess, INFINITE);
    for (int i = 1; i < times; i++)
        TerminateProcess(pi.hProcess, 7);
    DWORD code = 0;
    GetExitCodeProcess(pi.hProcess, &code);
    printf("child ended with %lu\n", code);
    return 0;
}
