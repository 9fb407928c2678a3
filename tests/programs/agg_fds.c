/* The engine's descriptors stay out of the program's way.  Usage:
 * agg_fds native|fiber (fiber: a group made through the API, -p aggregate;
 * native under -p fibers: the main thread is a fiber).  Started with stdout
 * closed, it prints on stderr: the number its first open gets, then, for
 * every io_uring or eventfd it did not make (the engine's), whatever is not
 * as it should be (low, inheritable, closable by the program, a dup2 onto it
 * that breaks the engine), then whether the engine still works after a
 * close_range of everything, and the descriptors an exec'd child has. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agg_common.h"

#define LOW 64

static int engine_fds(int *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        char path[300], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k < 0)
            continue;
        target[k] = 0;
        if (strstr(target, "[io_uring]") || strstr(target, "[eventfd]"))
            out[n++] = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return n;
}

/* Calls through the engine (a fiber's read, a raw batch) still give their results. */
static void engine_works(const char *when)
{
    char c = 1;
    int zero = open("/dev/zero", O_RDONLY);
    if (zero < 0 || read(zero, &c, 1) != 1 || c != 0)
        fprintf(stderr, "%s: a read of /dev/zero failed: %d\n", when, errno);
    if (zero >= 0)
        close(zero);
    if (agg_group) {
        struct ferry_call call = {.nr = FERRY_NR_NOP};
        int r = ferry_submit(agg_group, 0, &call, 1, FERRY_WAIT_ALL, 0, 0);
        if (r != 1 || !call.done || call.result != 0)
            fprintf(stderr, "%s: a raw batch failed: %d %ld\n", when, r, call.result);
    }
}

static void child_fds(void)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(2, 1);
        execl("/bin/ls", "ls", "/proc/self/fd", (char *)0);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    fprintf(stderr, "child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void work(void *arg)
{
    (void)arg;
    int fd = open("/dev/null", O_RDONLY);
    fprintf(stderr, "first open %d\n", fd);
    int fds[16];
    int n = engine_fds(fds, 16);
    for (int i = 0; i < n; i++) {
        int e = fds[i];
        if (e < LOW)
            fprintf(stderr, "engine fd %d is low\n", e);
        if (!(fcntl(e, F_GETFD) & FD_CLOEXEC))
            fprintf(stderr, "engine fd %d is inherited by exec\n", e);
        errno = 0;
        if (close(e) != -1 || errno != EBADF)
            fprintf(stderr, "close of engine fd %d: errno %d\n", e, errno);
        if (dup2(fd, e) != e)
            fprintf(stderr, "dup2 onto engine fd %d: errno %d\n", e, errno);
        else
            close(e);
    }
    engine_works("after dup2");
    close_range(3, ~0U, 0);
    engine_works("after close_range");
    child_fds();
    fprintf(stderr, "done\n");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s native|fiber\n", argv[0]);
        return 2;
    }
    agg_run(argv[1], work, 0);
    return 0;
}
