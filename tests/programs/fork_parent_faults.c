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
 * alone before then.  The fewest of five forks' windows: a write of the
 * shim's at every call is in each, the kernel's rare own (rseq's update
 * after a preemption) is not.
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

/* The stack below the caller's frame, further than any call below reaches
 * (the shim's entry and handler included), written: sigaction's frames
 * reach a little deeper than getrusage's, and where the stack's random
 * start put a page boundary between the two, that page was a fault in the
 * counted calls, natively too (1 run in ~100, in CI once). */
static __attribute__((noinline)) void write_stack(void)
{
    volatile long deep[2048];
    for (unsigned i = 0; i < sizeof deep / sizeof deep[0]; i++)
        deep[i] = 0;
}

/* Not inlined: its frame (the action it reads back into) below the
 * caller's, where write_stack wrote; inlined, it lay in the caller's own
 * frame, on a page no other write after the fork might touch. */
static __attribute__((noinline)) void set_again(void)
{
    static const int sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGCHLD};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        sigaction(sigs[i], NULL, &sa);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* The faults one fork's window takes; -1 on a setup error. */
static long one_fork(void)
{
    int p[2];
    if (pipe(p))
        return -1;
    long before;
    pid_t child = fork();
    if (child < 0)
        return -1;
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
    write_stack();
    before = minflt();
    before = minflt();
    set_again();
    set_again();
    long after = minflt();
    close(p[1]);
    close(p[0]);
    waitpid(child, NULL, 0);
    return after - before;
}

int main(void)
{
    set_again();  /* the code and stack these calls use, before the forks */
    long fewest = -1;
    for (int i = 0; i < 5; i++) {
        long n = one_fork();
        if (n < 0)
            return 1;
        if (fewest < 0 || n < fewest)
            fewest = n;
    }
    printf("faults %ld\n", fewest);
    return 0;
}
