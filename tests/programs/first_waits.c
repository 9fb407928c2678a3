/* A process's first waits end as they would natively: epoll_wait, poll and
 * select with nothing to wait for return 0 when their timeout runs out, in
 * the process and in its fork child, and nothing interrupts them.
 *
 * Under fibers the engine made the pools' io_uring rings at its start and
 * closed them at once (its carriers have rings of their own); a ring closed
 * makes the kernel interrupt its creator's next wait (its exit work, on a
 * kernel worker, some ms later, though no signal is sent), and a wait that
 * is not restarted said EINTR: every nginx worker logged its first
 * epoll_wait as failed.
 *
 * A second thread then waits too (the engine's path, with two threads), and
 * the fork child waits alone again.
 *
 * Prints one line per wait, the same natively and under every profile;
 * exits 1 if a wait did not time out. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

static int waits(const char *who)
{
    int bad = 0, ep = epoll_create1(0);
    struct epoll_event ev;
    int r = epoll_wait(ep, &ev, 1, 50);
    printf("%s: epoll_wait -> %d %s\n", who, r, r < 0 ? strerror(errno) : "");
    bad |= r != 0;
    r = poll(0, 0, 50);
    printf("%s: poll -> %d %s\n", who, r, r < 0 ? strerror(errno) : "");
    bad |= r != 0;
    struct timeval tv = {0, 50000};
    r = select(0, 0, 0, 0, &tv);
    printf("%s: select -> %d %s\n", who, r, r < 0 ? strerror(errno) : "");
    bad |= r != 0;
    close(ep);
    fflush(stdout);
    return bad;
}

static void *second(void *bad)
{
    *(int *)bad = waits("second thread");
    return 0;
}

int main(void)
{
    int bad = waits("process"), bad2 = 1;
    pthread_t t;
    if (pthread_create(&t, 0, second, &bad2) || pthread_join(t, 0) || bad2)
        bad = 1;
    pid_t c = fork();
    if (c == 0)
        _exit(waits("fork child"));
    int status = 0;
    if (c < 0 || waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status))
        bad = 1;
    return bad;
}
