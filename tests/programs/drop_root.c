/* A server's privilege drop: started as root, it makes threads and calls a
 * worker's call (so that an engine has its threads by then), drops to
 * nobody with glibc's setgroups, setgid and setuid (every thread's), and
 * then each thread tries what only root may:
 *
 *   - truncate(2) of a file only root may write (EACCES natively);
 *   - open_by_handle_at(2) of a handle taken while root (EPERM: it needs
 *     CAP_DAC_READ_SEARCH);
 *
 * and the process counts its tasks whose user is not nobody's in
 * /proc/self/task.  Under -p fibers the engine's worker threads kept root:
 * both calls succeeded, and /proc showed 8 root tasks.
 *
 * Usage: drop_root DIR [fsuid] (DIR: where to make the root-only file).
 * With fsuid the first thread only gives up root's access to files
 * (setfsuid, setfsgid: its own, glibc broadcasts neither) and tries the
 * truncate alone: under -p fibers it went through a worker, as root. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREADS 3
#define NOBODY 65534

static char path[4096];
static struct file_handle *handle;
static int mount_fd;
static pthread_barrier_t dropped;

static const char *outcome(int r)
{
    return r >= 0 ? "allowed" : strerror(errno);
}

static void try_root_calls(int id)
{
    int t = truncate(path, 0);
    int h = open_by_handle_at(mount_fd, handle, O_RDONLY);
    printf("thread %d uid=%d: truncate %s, open_by_handle_at %s\n", id, (int)getuid(), outcome(t),
           outcome(h));
    if (h >= 0)
        close(h);
}

static void *thread_main(void *arg)
{
    pthread_barrier_wait(&dropped);
    try_root_calls((int)(long)arg);
    return 0;
}

static void *thread_waits(void *arg)
{
    pthread_barrier_wait(&dropped);
    return arg;
}

static int tasks_not_nobody(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[300], line[256];
        snprintf(p, sizeof(p), "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(p, "r");
        while (f && fgets(line, sizeof(line), f))
            if (!strncmp(line, "Uid:", 4)) {
                unsigned r, eu, s, fs;
                if (sscanf(line + 4, "%u %u %u %u", &r, &eu, &s, &fs) == 4 &&
                    (r != NOBODY || eu != NOBODY || s != NOBODY || fs != NOBODY))
                    n++;
            }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || getuid() != 0) {
        fprintf(stderr, "usage (as root): drop_root DIR [fsuid]\n");
        return 2;
    }
    snprintf(path, sizeof(path), "%s/root-only", argv[1]);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0 || write(fd, "root's own bytes\n", 17) != 17)
        return 3;
    flock(fd, LOCK_EX);  /* a worker's call: the engine's threads exist from here */
    flock(fd, LOCK_UN);  /* fd stays open: its size is read at the end */
    handle = malloc(sizeof(*handle) + MAX_HANDLE_SZ);
    handle->handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, path, handle, &mount_fd, 0) != 0) {
        perror("name_to_handle_at");
        return 3;
    }
    mount_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (argc == 3) {
        /* another thread alive meanwhile: the first is not alone on its carrier,
         * and its truncate goes to a worker */
        pthread_barrier_init(&dropped, 0, 2);
        pthread_t t;
        pthread_create(&t, 0, thread_waits, 0);
        setfsgid(NOBODY);
        setfsuid(NOBODY);
        int r = truncate(path, 0);
        printf("fsuid %d: truncate %s\n", setfsuid(-1), outcome(r));
        pthread_barrier_wait(&dropped);
        pthread_join(t, 0);
        return 0;
    }
    pthread_barrier_init(&dropped, 0, THREADS + 1);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], 0, thread_main, (void *)(i + 1));
    if (setgroups(0, 0) || setgid(NOBODY) || setuid(NOBODY)) {
        perror("drop");
        return 3;
    }
    pthread_barrier_wait(&dropped);
    try_root_calls(0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], 0);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 3;
    printf("file size %lld, tasks not nobody's: %d\n", (long long)st.st_size, tasks_not_nobody());
    return 0;
}
