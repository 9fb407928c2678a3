/* A thread alone on its carrier (its companion waits on a condition
 * variable, so the process is not alone) makes one kind of call N times,
 * as a server at one connection, or an event loop, does per request:
 *
 *   quiet_calls open FILE N     opens and closes FILE
 *   quiet_calls epoll FILE N    waits (no timeout) on an epoll descriptor
 *                               whose pipe always has a byte to read
 *   quiet_calls append FILE N   appends a line to FILE (made afresh)
 *   quiet_calls notify FILE N   writes 1 to a blocking eventfd (a thread
 *                               pool's "job done", nginx's and libuv's)
 *   quiet_calls send FILE N     sends FILE (in the page cache) with
 *                               sendfile to a nonblocking socket, and
 *                               reads it at the socket's other end
 *   quiet_calls memory FILE N   writes a line to a memfd (a tmpfs file),
 *                               with write, pwrite and writev in turn, and
 *                               reads it back with read, pread and readv
 *
 * Prints "pid P", then what it did. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "company.h"

static int opens(const char *path, int n)
{
    for (int i = 0; i < n; i++) {
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            return perror(path), 1;
        close(fd);
    }
    printf("opened %d\n", n);
    return 0;
}

static int waits(int n)
{
    int p[2], ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN}, got[4];
    if (ep < 0 || pipe(p) || write(p[1], "x", 1) != 1 || epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev))
        return perror("epoll"), 1;
    int ready = 0;
    for (int i = 0; i < n; i++)
        ready += epoll_wait(ep, got, 4, -1) == 1 && got[0].events == EPOLLIN;
    printf("waited %d, ready %d\n", n, ready);
    return 0;
}

static int appends(const char *path, int n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0)
        return perror(path), 1;
    char line[32];
    long total = 0;
    for (int i = 0; i < n; i++) {
        int len = snprintf(line, sizeof(line), "line %d\n", i);
        long k = write(fd, line, (size_t)len);
        if (k != len)
            return perror("write"), 1;
        total += k;
    }
    close(fd);
    printf("appended %ld bytes\n", total);
    return 0;
}

/* nginx's way: the value written lives in static memory, not on the stack */
static const uint64_t one = 1;

static int notifies(int n)
{
    int fd = eventfd(0, 0);
    if (fd < 0)
        return perror("eventfd"), 1;
    for (int i = 0; i < n; i++)
        if (write(fd, &one, sizeof(one)) != sizeof(one))
            return perror("write"), 1;
    uint64_t count = 0;
    if (read(fd, &count, sizeof(count)) != sizeof(count))
        return perror("read"), 1;
    close(fd);
    printf("notified %llu\n", (unsigned long long)count);
    return 0;
}

static int sends(const char *path, int n)
{
    int sv[2], fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv))
        return perror(path), 1;
    char want[4096], got[4096];
    if (sb.st_size > (off_t)sizeof(want) || pread(fd, want, (size_t)sb.st_size, 0) != sb.st_size)
        return fprintf(stderr, "%s: want a small file\n", path), 1;
    long same = 0;
    for (int i = 0; i < n; i++) {
        off_t off = 0;
        if (sendfile(sv[0], fd, &off, (size_t)sb.st_size) != sb.st_size || off != sb.st_size)
            return perror("sendfile"), 1;
        same += recv(sv[1], got, sizeof(got), 0) == sb.st_size && !memcmp(got, want, (size_t)sb.st_size);
    }
    printf("sent %d, same %ld\n", n, same);
    return 0;
}

static int memory(int n)
{
    int fd = memfd_create("quiet", 0);
    if (fd < 0)
        return perror("memfd_create"), 1;
    long same = 0;
    for (int i = 0; i < n; i++) {
        char line[32], got[32];
        int len = snprintf(line, sizeof(line), "line %d\n", i);
        off_t at = lseek(fd, 0, SEEK_CUR);
        struct iovec w = {line, (size_t)len}, r = {got, (size_t)len};
        long k = i % 3 == 0 ? write(fd, line, (size_t)len)
                 : i % 3 == 1 ? pwrite(fd, line, (size_t)len, at) : writev(fd, &w, 1);
        if (k != len)
            return perror("write"), 1;
        if (i % 3 == 1)
            lseek(fd, len, SEEK_CUR);
        k = i % 3 == 0 ? (lseek(fd, at, SEEK_SET), read(fd, got, (size_t)len))
            : i % 3 == 1 ? pread(fd, got, (size_t)len, at) : (lseek(fd, at, SEEK_SET), readv(fd, &r, 1));
        same += k == len && !memcmp(got, line, (size_t)len);
    }
    printf("memory %d, same %ld, size %ld\n", n, same, (long)lseek(fd, 0, SEEK_END));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: quiet_calls open|epoll|append|notify|send|memory FILE N\n");
        return 2;
    }
    if (company_start())
        return 2;
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    int n = atoi(argv[3]), rc = 2;
    if (!strcmp(argv[1], "open"))
        rc = opens(argv[2], n);
    else if (!strcmp(argv[1], "epoll"))
        rc = waits(n);
    else if (!strcmp(argv[1], "append"))
        rc = appends(argv[2], n);
    else if (!strcmp(argv[1], "notify"))
        rc = notifies(n);
    else if (!strcmp(argv[1], "send"))
        rc = sends(argv[2], n);
    else if (!strcmp(argv[1], "memory"))
        rc = memory(n);
    company_end();
    return rc;
}
