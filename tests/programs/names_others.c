/* names_others: threads name each other (pthread_setname_np and
 * pthread_getname_np of another thread go through
 * /proc/self/task/TID/comm, of the calling thread through prctl), read
 * those files directly, and print what each sees; a worker names the main
 * thread, whose next new thread starts with that name. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WORKERS 4

static pthread_barrier_t step;
static pthread_t main_thread;
static pid_t tids[WORKERS];
static char seen[WORKERS][2][80];  /* what each worker saw, printed by main at the end */

static void say(const char *who, const char *what, int err, const char *name)
{
    printf("%s: %s: %s %s\n", who, what, err ? strerror(err) : "ok", err ? "" : name);
}

static void keep(char *out, const char *what, int err, const char *name)
{
    snprintf(out, 80, "%s: %s %s", what, err ? strerror(err) : "ok", err ? "" : name);
}

static void *worker(void *arg)
{
    long i = (long)arg;
    char name[32] = "";
    tids[i] = (pid_t)syscall(SYS_gettid);
    pthread_barrier_wait(&step);  /* 1: main names every worker */
    pthread_barrier_wait(&step);  /* 2 */
    keep(seen[i][0], "its own name", pthread_getname_np(pthread_self(), name, sizeof(name)), name);
    if (i == 0) {
        /* a name of its own, and one for the main thread */
        prctl(PR_SET_NAME, "renamed-0");
        keep(seen[i][1], "names main", pthread_setname_np(main_thread, "main-named"), "");
    }
    pthread_barrier_wait(&step);  /* 3: main reads the names */
    pthread_barrier_wait(&step);  /* 4 */
    return 0;
}

static char late_name[80];

static void *born_named(void *arg)
{
    char name[32] = "";
    keep(late_name, "its own name", pthread_getname_np(pthread_self(), name, sizeof(name)), name);
    return arg;
}

int main(void)
{
    pthread_t t[WORKERS];
    char name[32] = "", path[64];
    main_thread = pthread_self();
    pthread_barrier_init(&step, 0, WORKERS + 1);
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&t[i], 0, worker, (void *)i);
    pthread_barrier_wait(&step);  /* 1 */
    for (int i = 0; i < WORKERS; i++) {
        char want[16];
        snprintf(want, sizeof(want), "named-%d", i);
        say("main", "names a worker", pthread_setname_np(t[i], want), "");
    }
    say("main", "a name too long", pthread_setname_np(t[0], "a-name-of-sixteen"), "");
    pthread_barrier_wait(&step);  /* 2 */
    pthread_barrier_wait(&step);  /* 3 */
    /* a new thread starts with its creator's name, which worker 0 set */
    pthread_t late;
    pthread_create(&late, 0, born_named, 0);
    pthread_join(late, 0);
    printf("a thread main started then: %s\n", late_name);
    for (int i = 0; i < WORKERS; i++)
        say("main", "a worker's name", pthread_getname_np(t[i], name, sizeof(name)), name);
    say("main", "its own name", pthread_getname_np(pthread_self(), name, sizeof(name)), name);
    /* the file itself: read in two pieces, written with a newline */
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tids[1]);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    char a[4] = "", b[32] = "";
    ssize_t n1 = fd < 0 ? -1 : read(fd, a, 3), n2 = fd < 0 ? -1 : read(fd, b, sizeof(b) - 1),
            n3 = fd < 0 ? -1 : read(fd, b + 20, 5);
    printf("main: read %zd %zd %zd: %.3s|%s", n1, n2, n3, a, n2 > 0 ? b : "\n");
    ssize_t w = fd < 0 ? -1 : write(fd, "line\n", 5);
    printf("main: wrote %zd\n", w);
    if (fd >= 0)
        close(fd);
    say("main", "that worker's name", pthread_getname_np(t[1], name, sizeof(name)), name);
    pthread_barrier_wait(&step);  /* 4 */
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(t[i], 0);
        printf("worker %d: %s\n", i, seen[i][0]);
        if (seen[i][1][0])
            printf("worker %d: %s\n", i, seen[i][1]);
    }
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tids[2]);
    printf("main: a joined worker's file: %s\n", open(path, O_RDONLY) < 0 ? strerror(errno) : "opened");
    return 0;
}
