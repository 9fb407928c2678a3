/* A process tree: `spawn_tree DEPTH N FILE` writes N bytes to FILE.DEPTH
 * with one WriteFile each, then, while DEPTH > 0, starts itself with DEPTH-1
 * (through CreateProcessW when DEPTH is odd, through `cmd.exe /c` when it is
 * even), waits for it and exits with its exit code + 1.  Every process of
 * the tree must carry ferry.dll: Ferry's NtWriteFile count is known. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>

int wmain(int argc, wchar_t **argv)
{
    if (argc != 4)
        return 64;
    int depth = _wtoi(argv[1]), n = _wtoi(argv[2]);
    wchar_t name[1024];
    swprintf(name, 1024, L"%ls.%d", argv[3], depth);
    HANDLE h = CreateFileW(name, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return 1;
    DWORD done;
    for (int i = 0; i < n; i++)
        WriteFile(h, "s", 1, &done, NULL);
    CloseHandle(h);
    printf("depth %d wrote %d\n", depth, n);
    fflush(stdout);
    if (depth == 0)
        return 0;
    wchar_t self[1024], cl[4096];
    GetModuleFileNameW(NULL, self, 1024);
    if (depth % 2)
        swprintf(cl, 4096, L"\"%ls\" %d %d \"%ls\"", self, depth - 1, n, argv[3]);
    else
        swprintf(cl, 4096, L"cmd.exe /c \"\"%ls\" %d %d \"%ls\"\"", self, depth - 1, n, argv[3]);
    STARTUPINFOW si = {sizeof(si)};
    PROCESS_INFORMATION pi;
    if (!CreateProcessW(NULL, cl, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
        fprintf(stderr, "CreateProcessW failed: %lu\n", GetLastError());
        return 1;
    }
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = 0;
    GetExitCodeProcess(pi.hProcess, &code);
    return (int)code + 1;
}
