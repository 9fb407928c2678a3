/* The Linux server's disk-mode page file: the thesis's request pattern in
 * system calls (openat, fstat, read, close), which the cluster model's
 * fibers send through the ring like their socket calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http.h"

int page_file_check(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    close(fd);
    return 0;
}

long page_file_read(const char *path, char **buf, size_t *cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    if (size > *cap) {
        char *b = realloc(*buf, size);
        if (!b) {
            close(fd);
            return -1;
        }
        *buf = b;
        *cap = size;
    }
    while (got < size) {
        ssize_t k = read(fd, *buf + got, size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;     /* shrunk since fstat: serve what is there */
        got += (size_t)k;
    }
    close(fd);
    return (long)got;
}
