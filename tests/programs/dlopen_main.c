/* dlopen(argv[1]) and call its site_getppid() argv[2] times. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    long (*fn)(void) = (long (*)(void))dlsym(lib, "site_getppid");
    long n = atol(argv[2]), ok = 0;
    for (long i = 0; i < n; i++)
        ok += fn() > 0;
    printf("site_getppid: %ld of %ld calls returned a pid\n", ok, n);
    return 0;
}
