/* dlopen_many ROUNDS [-c] LIB...: dlopens each library, one after the
 * other, and calls its site_getppid() ROUNDS times; with -c it dlcloses
 * each before the next, and says how many were loaded where the one before
 * had been.  For the shim's tables of modules (plan.c): more libraries than
 * a process usually has, and a module that takes an unloaded one's place. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long rounds = atol(argv[1]), ok = 0, same = 0;
    int first = 2, close_each = strcmp(argv[2], "-c") == 0;
    if (close_each)
        first++;
    ElfW(Addr) before = 0;
    for (int i = first; i < argc; i++) {
        void *lib = dlopen(argv[i], RTLD_NOW);
        if (!lib) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        long (*fn)(void) = (long (*)(void))dlsym(lib, "site_getppid");
        for (long k = 0; k < rounds; k++)
            ok += fn() > 0;
        struct link_map *map = 0;
        dlinfo(lib, RTLD_DI_LINKMAP, &map);
        same += before && map->l_addr == before;
        before = map->l_addr;
        if (close_each && dlclose(lib)) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
    }
    printf("site_getppid: %ld of %ld calls returned a pid\n", ok, rounds * (argc - first));
    if (close_each)
        printf("%ld loaded where the one before was\n", same);
    return 0;
}
