/* A thread alone on its carrier opens and closes one file N times (a
 * static-file server at one connection does so per request).
 *
 *   open_alone FILE N   prints "pid P" then "opened N"
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: open_alone FILE N\n");
        return 2;
    }
    printf("pid %d\n", (int)getpid());
    int n = atoi(argv[2]), done = 0;
    for (int i = 0; i < n; i++) {
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0) {
            perror(argv[1]);
            return 1;
        }
        close(fd);
        done++;
    }
    printf("opened %d\n", done);
    return 0;
}
