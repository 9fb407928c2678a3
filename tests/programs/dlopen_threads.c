/* One thread per library named on the command line, started together: each
 * dlopens its library and calls its site_getppid() argv[1] times.  The
 * first call a process's catch-all catches is the one that writes ld.so's
 * hook (shim.c): here several threads' dlopens race to be that call. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t start;
static long rounds;

static void *load(void *path)
{
    pthread_barrier_wait(&start);
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return (void *)-1L;
    }
    long (*fn)(void) = (long (*)(void))dlsym(lib, "site_getppid");
    long ok = 0;
    for (long i = 0; i < rounds; i++)
        ok += fn() > 0;
    return (void *)ok;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    rounds = atol(argv[1]);
    int n = argc - 2;
    pthread_t t[64];
    if (n > 64)
        return 2;
    pthread_barrier_init(&start, 0, (unsigned)n);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], 0, load, argv[i + 2]);
    long total = 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("site_getppid: %ld of %ld calls returned a pid\n", total, rounds * n);
    return 0;
}
