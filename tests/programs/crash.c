/* crash MODE: dies the way MODE says, so the same signal (or status) must end
 * the original and the rewritten program.
 *   segv   dereferences NULL            (SIGSEGV)
 *   abort  calls abort()                (SIGABRT)
 *   kill   raise(SIGTERM)               (SIGTERM)
 *   exit   exit(42) after some output   (status 42) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *s)
{
    if (write(2, s, strlen(s)) < 0)
        _exit(99);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    /* Buffered stdout is lost when a signal kills the process: same in both. */
    printf("buffered output of %s\n", mode);

    if (strcmp(mode, "segv") == 0) {
        say("about to dereference NULL\n");
        volatile uintptr_t addr = 0;
        *(volatile int *)addr = 42;
    } else if (strcmp(mode, "abort") == 0) {
        say("about to abort\n");
        abort();
    } else if (strcmp(mode, "kill") == 0) {
        say("about to raise SIGTERM\n");
        raise(SIGTERM);
    } else if (strcmp(mode, "exit") == 0) {
        say("about to exit 42\n");
        exit(42);
    } else {
        say("usage: crash segv|abort|kill|exit\n");
        return 2;
    }
    say("still alive?\n");
    return 1;
}
