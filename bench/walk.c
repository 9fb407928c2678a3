/* bench/walk: a syscall-heavy file-tree walk, for bench/trace_overhead.py.
 *
 *   walk DIR PASSES
 *
 * Walks DIR PASSES times with opendir/readdir/lstat, and reads every regular
 * file through open/read/close (64 KiB reads).  Prints "files bytes dirs" of the
 * last pass; the checksum of the data read keeps the reads honest.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned long files, dirs, bytes, sum;
static char buf[65536];

static void walk(char *path, size_t len)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    dirs++;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        size_t n = strlen(e->d_name);
        if (len + 1 + n + 1 > 4096)
            continue;
        path[len] = '/';
        memcpy(path + len + 1, e->d_name, n + 1);
        struct stat st;
        if (lstat(path, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                walk(path, len + 1 + n);
            } else if (S_ISREG(st.st_mode)) {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                    ssize_t r;
                    while ((r = read(fd, buf, sizeof buf)) > 0) {
                        bytes += (unsigned long)r;
                        sum += (unsigned char)buf[r - 1];
                    }
                    close(fd);
                    files++;
                }
            }
        }
        path[len] = '\0';
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: walk DIR PASSES\n");
        return 2;
    }
    int passes = atoi(argv[2]);
    static char path[4096];
    for (int i = 0; i < passes; i++) {
        files = dirs = bytes = 0;
        size_t len = strlen(argv[1]);
        if (len >= sizeof path)
            return 2;
        memcpy(path, argv[1], len + 1);
        walk(path, len);
    }
    printf("%lu %lu %lu %lu\n", files, bytes, dirs, sum);
    return 0;
}
