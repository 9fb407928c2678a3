/* A thread alone on its carrier (its companion waits on a condition
 * variable, so the process is not alone) makes one kind of call N times,
 * as a server at one connection, or an event loop, does per request:
 *
 *   quiet_calls open FILE N     opens and closes FILE
 *   quiet_calls epoll FILE N    waits (no timeout) on an epoll descriptor
 *                               whose pipe always has a byte to read
 *   quiet_calls append FILE N   appends a line to FILE (made afresh)
 *
 * Prints "pid P", then what it did. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: quiet_calls open|epoll|append FILE N\n");
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
    company_end();
    return rc;
}
