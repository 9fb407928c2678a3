/* vfork_signal: a signal that is pending when a vfork parent resumes.
 *
 *   vfork_signal exit N   N rounds: the vfork child signals its parent
 *                         (SIGUSR1, which the waiting parent cannot take
 *                         yet) and _exits
 *   vfork_signal exec N   the same, but the child execs /bin/true
 *   vfork_signal respawn N  the same, and the handler too starts a vfork
 *                         child that execs /bin/true, before the parent's
 *                         vfork call has returned: the record of the
 *                         first child, which the parent writes after its
 *                         vfork, is still to write then
 *
 * The parent takes the signal the moment it runs again, before the vfork
 * call returns to its caller: its handler makes HANDLER_CALLS getppid()
 * calls there.  Every call is the parent's, counted in its own process,
 * however early after the child it comes.  Output: one line, the same at
 * every run. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define HANDLER_CALLS 3

static volatile sig_atomic_t handled, respawn;

static void on_usr1(int sig)
{
    (void)sig;
    for (int i = 0; i < HANDLER_CALLS; i++)
        syscall(SYS_getppid);
    if (respawn) {
        pid_t pid = vfork();
        if (pid == 0) {
            execl("/bin/true", "true", (char *)0);
            _exit(127);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
            _exit(3);
    }
    handled++;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "exit") && strcmp(argv[1], "exec") && strcmp(argv[1], "respawn"))) {
        fprintf(stderr, "usage: vfork_signal exit|exec|respawn N\n");
        return 2;
    }
    respawn = !strcmp(argv[1], "respawn");
    int exec = respawn || !strcmp(argv[1], "exec");
    long rounds = atol(argv[2]);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    for (long i = 0; i < rounds; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
            /* the parent waits for us: the signal stays pending until we go */
            kill(getppid(), SIGUSR1);
            if (exec)
                execl("/bin/true", "true", (char *)0);
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
            return 1;
    }
    printf("%ld rounds, %d handled\n", rounds, (int)handled);
    return 0;
}
