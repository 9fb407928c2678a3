/* exec_top_env PROGRAM: execs PROGRAM with an empty environment whose
 * array is the NULL word the kernel leaves at the very top of the stack,
 * so that the array ends the stack's last page.  Run under `setarch -R`,
 * that page is the last of the user address space. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: exec_top_env PROGRAM\n");
        return 2;
    }
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo, hi, end = 0;
    while (maps && fgets(line, sizeof(line), maps))
        if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            end = hi;
    if (!end) {
        fprintf(stderr, "exec_top_env: no [stack] in /proc/self/maps\n");
        return 1;
    }
    char **env = (char **)(end - sizeof(char *));
    if (*env) {
        fprintf(stderr, "exec_top_env: the stack's last word is not NULL\n");
        return 1;
    }
    printf("stack ends at %#lx\n", end);
    fflush(stdout);
    char *args[] = {argv[1], 0};
    execve(argv[1], args, env);
    perror(argv[1]);
    return 127;
}
