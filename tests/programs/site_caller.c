/* Linked against libsite.so: calls its site_getppid() argv[1] times, so the
 * library's own site runs from a library the program needs (not dlopened). */
#include <stdio.h>
#include <stdlib.h>

long site_getppid(void);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10, ok = 0;
    for (long i = 0; i < n; i++)
        ok += site_getppid() > 0;
    printf("site_getppid: %ld of %ld calls returned a pid\n", ok, n);
    return 0;
}
