/* Finds the auxiliary vector as Go's runtime, musl and static programs do:
 * the words after the environment's NULL, walking from argv.  Prints the
 * page size and the entries it read there, then (`again`) runs itself once
 * more, so that a child the shim's exec hook enabled is checked too. */
#include <elf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char **p = argv + argc + 1;
    while (*p)
        p++;
    unsigned long *aux = (unsigned long *)(p + 1), page = 0, random = 0, n = 0;
    for (; aux[0] != AT_NULL && n < 256; aux += 2, n++) {
        if (aux[0] == AT_PAGESZ)
            page = aux[1];
        if (aux[0] == AT_RANDOM)
            random = aux[1];
    }
    printf("%s: page %lu, random %s, ended %s\n", argc > 1 ? argv[1] : "-", page,
           random ? "yes" : "no", n < 256 ? "yes" : "no");
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "again")) {
        execl("/proc/self/exe", argv[0], "child", (char *)0);
        perror("exec");
        return 1;
    }
    return 0;
}
