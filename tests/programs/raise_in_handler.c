/* Signals a thread sends itself whose handlers make calls of their own, as
 * haproxy's watchdog does (its SIGALRM handler raises SIGURG to dump the
 * thread, and that handler writes):
 *
 *   raise_in_handler nested   SIGUSR1's handler raises SIGUSR2, whose
 *                             handler writes to a pipe
 *   raise_in_handler park     SIGUSR1's handler sleeps 20 ms (a call that
 *                             leaves its thread for a while) while a second
 *                             thread raises a signal on itself
 *
 * With a companion thread (company.h) for the whole run.  Prints what the
 * handlers did. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "company.h"

static int pipefd[2];
static volatile sig_atomic_t usr1, usr2, other;

static void on_usr2(int sig)
{
    (void)sig;
    usr2++;
    if (write(pipefd[1], "2", 1) != 1)
        usr2 = -1;
}

static void on_usr1_nested(int sig)
{
    (void)sig;
    usr1++;
    raise(SIGUSR2);
}

static void on_usr1_park(int sig)
{
    (void)sig;
    usr1++;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, 0);
}

static void on_other(int sig)
{
    (void)sig;
    other++;
}

static void *raiser(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, 0);        /* while the main thread's handler sleeps */
    raise(SIGWINCH);
    return 0;
}

int main(int argc, char **argv)
{
    int park = argc == 2 && !strcmp(argv[1], "park");
    if (argc != 2 || (!park && strcmp(argv[1], "nested"))) {
        fprintf(stderr, "usage: raise_in_handler nested|park\n");
        return 2;
    }
    if (pipe(pipefd) || company_start())
        return perror("setup"), 1;
    signal(SIGUSR1, park ? on_usr1_park : on_usr1_nested);
    signal(SIGUSR2, on_usr2);
    signal(SIGWINCH, on_other);
    pthread_t t;
    for (int i = 0; i < 50; i++) {
        if (park && pthread_create(&t, 0, raiser, 0))
            return perror("pthread_create"), 1;
        raise(SIGUSR1);
        if (park)
            pthread_join(t, 0);
    }
    char buf[64];
    long got = park ? 0 : read(pipefd[0], buf, sizeof(buf));
    company_end();
    printf("usr1 %d, usr2 %d, other %d, piped %ld\n", (int)usr1, (int)usr2, (int)other, got);
    return 0;
}
