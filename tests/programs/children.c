/* Ways a process starts children, for the injector tests: each mode execs
 * /bin/echo (or /bin/true) so that the child's own process can be checked. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int wait_for(pid_t pid)
{
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* An environment array of ENV_ENTRIES entries that ends where its mapping
 * ends (the next page is not there), or that runs from one page into the
 * next: the exec hook reads the array in batches, and must neither stop
 * short nor read past it. */
enum { ENV_ENTRIES = 80 };

static char **env_array(int at_page_end)
{
    char *page = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return NULL;
    char **env;
    if (at_page_end) {
        munmap(page + 4096, 4096);
        env = (char **)(page + 4096) - (ENV_ENTRIES + 1);
    } else {
        env = (char **)(page + 4096) - 20;
    }
    for (int i = 0; i < ENV_ENTRIES; i++) {
        env[i] = malloc(40);
        snprintf(env[i], 40, "CHILD_VAR_%02d=value %d", i, i * 7);
    }
    env[ENV_ENTRIES] = NULL;
    return env;
}

/* The path "/usr/bin/env" ending where its mapping ends (the next page is
 * not there), or running from one page into the next: the exec hook reads
 * the path and the environment's first pointers in one read, up to the
 * path's page end, and must read the rest of a path that goes on. */
static char *path_at(int at_page_end)
{
    static const char path[] = "/usr/bin/env";
    char *page = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return NULL;
    char *at = page + 4096 - (at_page_end ? sizeof(path) : 6);
    if (at_page_end)
        munmap(page + 4096, 4096);
    memcpy(at, path, sizeof(path));
    return at;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    char *echo_argv[] = {"echo", "child of", (char *)mode, NULL};
    if (!strcmp(mode, "spawn-envp")) {
        char *empty_env[] = {NULL};
        pid_t pid;
        if (posix_spawn(&pid, "/bin/echo", NULL, NULL, echo_argv, empty_env))
            return 1;
        return wait_for(pid);
    }
    if (!strcmp(mode, "system"))
        return system("echo child of system") == 0 ? 0 : 1;
    if (!strcmp(mode, "vfork")) {
        pid_t pid = vfork();
        if (pid == 0) {
            execv("/bin/echo", echo_argv);
            _exit(127);
        }
        return wait_for(pid);
    }
    if (!strcmp(mode, "fexecve") || !strcmp(mode, "execveat")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (!strcmp(mode, "fexecve")) {
                int fd = open("/bin/echo", O_RDONLY | O_CLOEXEC);
                fexecve(fd, echo_argv, environ);
            } else {
                syscall(SYS_execveat, AT_FDCWD, "/bin/echo", echo_argv, environ, 0);
            }
            _exit(127);
        }
        return wait_for(pid);
    }
    if (!strcmp(mode, "daemon")) {
        int done[2];
        if (pipe2(done, O_CLOEXEC))
            return 1;
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            if (fork() == 0) {
                close(done[0]);
                execl("/bin/echo", "echo", "child of daemon", (char *)NULL);
                _exit(127);
            }
            _exit(0);
        }
        close(done[1]);
        char c;
        read(done[0], &c, 1);  /* returns when the grandchild's exec closes the pipe */
        int rc = wait_for(pid);
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);  /* let the grandchild finish before we do */
        return rc;
    }
    if (!strcmp(mode, "env-at-page-end") || !strcmp(mode, "env-across-pages")) {
        char **env = env_array(!strcmp(mode, "env-at-page-end"));
        if (!env)
            return 1;
        char *env_argv[] = {"env", NULL};
        pid_t pid;
        fflush(stdout);
        if (posix_spawn(&pid, "/usr/bin/env", NULL, NULL, env_argv, env))
            return 1;
        return wait_for(pid);
    }
    if (!strcmp(mode, "path-at-page-end") || !strcmp(mode, "path-across-pages")) {
        char *path = path_at(!strcmp(mode, "path-at-page-end"));
        char **env = env_array(1);
        if (!path || !env)
            return 1;
        char *env_argv[] = {"env", NULL};
        pid_t pid;
        fflush(stdout);
        if (posix_spawn(&pid, path, NULL, NULL, env_argv, env))
            return 1;
        return wait_for(pid);
    }
    fprintf(stderr, "usage: children spawn-envp|system|vfork|fexecve|execveat|daemon|"
                    "env-at-page-end|env-across-pages|path-at-page-end|path-across-pages\n");
    return 2;
}
