/* A program whose own TLS is larger than a page (haproxy's is 42 KiB): the
 * shim's TLS block lies below it, further from the thread pointer than a
 * minimal thread block reaches.  Two threads fill their copy of it, then the
 * main thread, with a companion (company.h), makes calls the engine gives
 * to its workers (flock, getdents64), which touch the shim's TLS on the
 * worker's thread.
 * Prints what it did. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "company.h"

static __thread char big[64 * 1024];

static void *fill(void *arg)
{
    memset(big, *(const char *)arg, sizeof(big));
    return (void *)(long)(big[sizeof(big) - 1] == *(const char *)arg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: big_tls DIR\n");
        return 2;
    }
    pthread_t t;
    void *ok;
    char c = 'x';
    if (pthread_create(&t, 0, fill, &c) || pthread_join(t, &ok))
        return perror("pthread"), 1;
    fill(&(char){'m'});
    if (company_start())
        return perror("pthread"), 1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/lock", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f)
        return perror(path), 1;
    int locked = flock(fileno(f), LOCK_EX) == 0 && flock(fileno(f), LOCK_UN) == 0;
    DIR *d = opendir(argv[1]);
    int entries = 0;
    while (d && readdir(d))
        entries++;
    company_end();
    printf("thread %ld, main %d, flock %d, entries %d\n", (long)ok, big[0] == 'm', locked, entries);
    return 0;
}
