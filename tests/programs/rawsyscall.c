/* rawsyscall N: system calls made through glibc's syscall(2) function.
 * Exactly N syscall(SYS_getppid), N + 1 syscall(SYS_write, 1, ...) (N lines
 * and the summary), one syscall(SYS_close, -1) (fails with EBADF) and a
 * six-argument syscall(SYS_mmap, ...) / syscall(SYS_munmap, ...).  stdio is
 * never used for output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100;
    long first = 0, same = 0, writes_ok = 0;
    char line[256];

    for (long i = 0; i < n; i++) {
        long p = syscall(SYS_getppid);
        if (i == 0)
            first = p;
        same += p == first && p > 0;
    }
    for (long i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "raw write %ld\n", i);
        writes_ok += syscall(SYS_write, 1, line, (size_t)len) == len;
    }

    errno = 0;
    long rc = syscall(SYS_close, -1);
    int close_errno = errno;

    long map = syscall(SYS_mmap, NULL, 8192L, (long)(PROT_READ | PROT_WRITE),
                       (long)(MAP_PRIVATE | MAP_ANONYMOUS), -1L, 0L);
    int map_ok = map != -1 && map != 0;
    if (map_ok) {
        char *m = (char *)map;
        memset(m, 0x5a, 8192);
        map_ok = m[0] == 0x5a && m[8191] == 0x5a;
        map_ok = map_ok && syscall(SYS_munmap, map, 8192L) == 0;
    }

    int len = snprintf(line, sizeof line,
                       "getppid: %ld calls, all equal: %s\nwrites ok: %ld/%ld\n"
                       "close(-1): %ld errno %s\nmmap+munmap: %s\n",
                       n, same == n ? "yes" : "no", writes_ok, n, rc, strerror(close_errno),
                       map_ok ? "ok" : "FAILED");
    syscall(SYS_write, 1, line, (size_t)len);
    return 0;
}
