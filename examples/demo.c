/* The bundled example of `make demo`: a program that makes a known set of
 * system calls through libc, the way a closed-source binary would. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GETPPID_CALLS 1000

static void *worker(void *arg)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "thread %ld says hello\n", (long)arg);
    write(STDOUT_FILENO, buf, (size_t)n);
    return NULL;
}

int main(void)
{
    pid_t parent = 0;
    for (int i = 0; i < GETPPID_CALLS; i++)
        parent = getppid();
    printf("called getppid %d times (parent is %s)\n", GETPPID_CALLS, parent > 0 ? "alive" : "?");
    fflush(stdout);

    int fd = open("/etc/hostname", O_RDONLY);
    char buf[256];
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
    if (fd >= 0)
        close(fd);
    printf("read %s from /etc/hostname\n", n > 0 ? "some bytes" : "nothing");
    fflush(stdout);

    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)1L);
    pthread_join(t, NULL);

    pid_t child = fork();
    if (child == 0) {
        printf("child %s\n", getppid() > 0 ? "running" : "orphaned");
        fflush(stdout);
        _exit(7);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child exited with %d\n", WEXITSTATUS(status));
    return 0;
}
