/* Prints its environment block, sorted as Windows keeps it: a program under
 * `ferry run` must see its own variables and none of Ferry's. */
#include <windows.h>
#include <stdio.h>

int main(void)
{
    char *env = GetEnvironmentStringsA();
    for (char *p = env; *p; p += strlen(p) + 1)
        printf("%s\n", p);
    FreeEnvironmentStringsA(env);
    return 0;
}
