/* fork_parent_faults: the page faults a parent takes, after a fork, for
 * setting its signals' handlers again, as a shell does for each command.
 *
 * After a fork every page of the parent's is its child's too, write-
 * protected in both: the first write to each is a fault.  The parent
 * first makes the writes any call makes (its stack, the rusage it reads,
 * its thread's words), then sets the handlers of four signals again, twice
 * over, and prints the faults that took: natively 0; under the shim as
 * many as the pages of its own variables those calls wrote.  The child
 * waits on a pipe until the parent is done, so that nothing is its own
 * alone before then.
 *
 * stdout: "faults N".  Exit 0, 1 on a setup error. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void set_again(void)
{
    static const int sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGCHLD};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        sigaction(sigs[i], NULL, &sa);
        sigaction(sigs[i], &sa, NULL);
    }
}

int main(void)
{
    int p[2];
    if (pipe(p))
        return 1;
    set_again();  /* the code and stack these calls use, before the fork */
    long before = minflt();
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        char c;
        close(p[1]);
        while (read(p[0], &c, 1) < 0)
            ;
        _exit(0);
    }
    /* what any call writes after a fork: the stack, the rusage, the thread's
     * own words (under the shim, the catch-all's selector among them) */
    (void)getppid();
    before = minflt();
    before = minflt();
    set_again();
    set_again();
    long after = minflt();
    close(p[1]);
    waitpid(child, NULL, 0);
    printf("faults %ld\n", after - before);
    return 0;
}
