/* Sets its process title as nginx, postgres and Python's setproctitle do: the
 * title is written over the argument area and the rest of the area is padded
 * with NULs, so /proc/PID/cmdline is the title followed by many empty
 * strings.  Prints "ready" once the title is set, then waits for stdin to
 * close (at most 60 s). */
#include <poll.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char *start = argv[0];
    char *end = argv[argc - 1] + strlen(argv[argc - 1]);
    const char *title = "proctitle: worker process";
    memset(start, 0, (size_t)(end - start));
    if ((size_t)(end - start) > strlen(title))
        strcpy(start, title);
    puts("ready");
    fflush(stdout);
    struct pollfd p = {0, POLLIN, 0};
    poll(&p, 1, 60000);
    return 0;
}
