/* `ferry detach` while a call that runs in its trampoline (vfork) is under
 * way: the vfork child detaches the shim (ferry_detach, as `ferry detach`
 * has the process call it) and exits; the parent, still inside vfork's
 * trampoline, must come back from it and go on.  Without a shim (dlsym finds
 * no ferry_detach) it goes on the same way. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    int (*detach)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ferry_detach");
    pid_t pid = vfork();
    if (pid == 0) {
        if (detach)
            detach();
        _exit(7);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("parent went on; child exit %d\n", WEXITSTATUS(status));
    return 0;
}
