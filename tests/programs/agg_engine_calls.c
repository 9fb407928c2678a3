/* Calls the engine runs, some failing, then an end that leaves the carrier
 * no time to tidy up.  Usage: agg_engine_calls native|thread|fiber N END
 *   native: on the main thread (under -p fibers, the main thread is a fiber)
 *   thread: the same, with a second thread alive (agg_common.h)
 *   fiber:  in a fiber of a group made through the API (-p aggregate)
 *   N:      rounds of: read on a closed descriptor (EBADF), open with
 *           O_CREAT in a missing directory (ENOENT: an open that writes
 *           stays on the ring even where the quiet path opens files), read
 *           of /dev/zero (1 byte)
 *   END:    exit  -- _exit right after the last call (exit_group)
 *           signal -- SIGTERM to itself, whose handler calls _exit
 *           return -- return from main (the fiber ends first)
 * Prints the number of failed calls, which the run's report must match. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "agg_common.h"

static long rounds;
static const char *end;
static int failed;

static void on_term(int sig)
{
    (void)sig;
    _exit(0);
}

static void work(void *arg)
{
    (void)arg;
    char c;
    int zero = open("/dev/zero", O_RDONLY);
    if (zero < 0)
        agg_die("open /dev/zero", errno);
    for (long i = 0; i < rounds; i++) {
        failed += read(1000 + (int)(i % 16), &c, 1) < 0;
        failed += open("/nonexistent-ferry-test/file", O_RDONLY | O_CREAT, 0600) < 0;
        failed += read(zero, &c, 1) != 1;
    }
    /* said before the end: nothing of the program runs after the last call */
    printf("failed %d\n", failed);
    fflush(stdout);
    if (strcmp(end, "exit") == 0)
        _exit(0);
    if (strcmp(end, "signal") == 0) {
        signal(SIGTERM, on_term);
        kill(getpid(), SIGTERM);
    }
    close(zero);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s native|thread|fiber N exit|signal|return\n", argv[0]);
        return 2;
    }
    rounds = atol(argv[2]);
    end = argv[3];
    agg_run(argv[1], work, 0);
    return 0;
}
