/* A descriptor number that comes back as another kind of file: a socket
 * the engine has read from is closed with close_range, and the number is
 * made again by inotify_init, a call the engine does not see.  A read of
 * it must give the inotify event waiting there, not what a socket's
 * receive says of such a file (ENOTSOCK).  Usage: fib_fd_reuse DIR (where
 * it makes a file).  A second thread is alive meanwhile: under -p fibers
 * the calls of a program's only thread do not go to the engine. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "company.h"

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    if (company_start())
        return 2;
    int sv[2];
    char c;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || write(sv[1], "x", 1) != 1 || read(sv[0], &c, 1) != 1)
        return perror("socketpair"), 2;
    int n = sv[0];
    if (syscall(SYS_close_range, n, n, 0))
        return perror("close_range"), 2;
    int p = (int)syscall(SYS_inotify_init);
    if (p != n) {
        printf("inotify_init gave %d, not %d\n", p, n);
        return 1;
    }
    char path[4096], ev[4096];
    snprintf(path, sizeof(path), "%s/made", argv[1]);
    int f;
    if (inotify_add_watch(p, argv[1], IN_CREATE) < 0 || (f = open(path, O_CREAT | O_WRONLY, 0600)) < 0)
        return perror(argv[1]), 2;
    close(f);
    long r = read(p, ev, sizeof(ev));
    struct inotify_event *e = (struct inotify_event *)ev;
    if (r > 0)
        printf("read of the inotify descriptor: %s %s\n", (e->mask & IN_CREATE) ? "IN_CREATE" : "?", e->name);
    else
        printf("read of the inotify descriptor: %ld %s\n", r, strerrorname_np(errno));
    company_end();
    return 0;
}
