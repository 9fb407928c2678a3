/* Writes one byte N times (argv[2]) to file argv[1] with WriteFile, each a
 * separate NtWriteFile, then says how many it wrote: the PE tests compare
 * Ferry's count of NtWriteFile with N, and the output with plain wine's. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: write_count FILE N\n");
        return 64;
    }
    int n = atoi(argv[2]);
    HANDLE h = CreateFileA(argv[1], GENERIC_WRITE, 0, NULL, CREATE_ALWAYS,
                           FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE) {
        fprintf(stderr, "cannot create %s: error %lu\n", argv[1], GetLastError());
        return 1;
    }
    DWORD done;
    for (int i = 0; i < n; i++) {
        if (!WriteFile(h, "x", 1, &done, NULL) || done != 1) {
            fprintf(stderr, "WriteFile failed at %d: error %lu\n", i, GetLastError());
            return 1;
        }
    }
    CloseHandle(h);
    printf("wrote %d bytes\n", n);
    fflush(stdout);
    return n % 7;
}
