/* The Windows server's disk-mode page file: the thesis's request pattern in
 * Windows calls (CreateFile, GetFileSizeEx, ReadFile, CloseHandle: NtCreateFile,
 * NtQueryInformationFile, NtReadFile, NtClose), which under aggregation
 * ferry.dll routes like the socket calls. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "http.h"

/* Shared so that the page can be replaced or deleted while it is open, as
 * on Linux; a directory cannot be opened this way, so what opens is a file. */
static HANDLE open_page(const char *path)
{
    return CreateFileA(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                       OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
}

int page_file_check(const char *path)
{
    HANDLE f = open_page(path);
    if (f != INVALID_HANDLE_VALUE) {
        CloseHandle(f);
        return 0;
    }
    switch (GetLastError()) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME:
        return -ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
        return -EACCES;
    default:
        return -EIO;
    }
}

long page_file_read(const char *path, char **buf, size_t *cap)
{
    HANDLE f = open_page(path);
    if (f == INVALID_HANDLE_VALUE)
        return -1;
    LARGE_INTEGER size;
    if (!GetFileSizeEx(f, &size) || size.QuadPart > LONG_MAX) {
        CloseHandle(f);
        return -1;
    }
    size_t want = (size_t)size.QuadPart, got = 0;
    if (want > *cap) {
        char *b = realloc(*buf, want);
        if (!b) {
            CloseHandle(f);
            return -1;
        }
        *buf = b;
        *cap = want;
    }
    while (got < want) {
        DWORD k;
        if (!ReadFile(f, *buf + got, (DWORD)(want - got > 1u << 30 ? 1u << 30 : want - got), &k, NULL) || !k)
            break;     /* shrunk since the size was taken: serve what is there */
        got += k;
    }
    CloseHandle(f);
    return (long)got;
}
