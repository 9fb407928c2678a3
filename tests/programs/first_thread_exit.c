/* The first thread ends with exit(2), not exit_group: the process ends when
 * its last thread does, with that thread's code as its status.  Under
 * fibers a first thread that ended so before it ever waited was never
 * released: the process hung, its carrier counting it alive for ever.
 *
 * Usage: first_thread_exit alone|others
 *   alone   the only thread writes a line and ends with exit(2) code 3
 *   others  another thread writes a line 50 ms later and ends (pthread_exit);
 *           the first thread ends at once with exit(2) code 5 */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, 0);
    if (write(1, "the other thread\n", 17) != 17)
        return (void *)1;
    pthread_exit(0);
}

int main(int argc, char **argv)
{
    int others = argc > 1 && !strcmp(argv[1], "others");
    pthread_t t;
    if (others && pthread_create(&t, 0, later, 0))
        return 2;
    if (write(1, "the first thread\n", 17) != 17)
        return 1;
    syscall(SYS_exit, others ? 5 : 3);
    return 4;  /* not reached */
}
