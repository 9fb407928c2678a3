/* Calls the engine reads the arguments of, on memory the program has just
 * taken away: each answers EFAULT as natively.  Usage: agg_fault native|fiber
 *   native: on the main thread
 *   fiber:  in a fiber of a group made through the API (-p aggregate),
 *           with a second fiber yielding meanwhile, so that the first is
 *           never alone on its carrier (alone, its calls go to the kernel)
 *
 * For a futex wait and a poll: two calls whose argument lies on a fresh
 * page (EAGAIN, and a poll of a pipe with nothing to read: its entry was
 * read), then the page is unmapped, then the call again.  Prints one line
 * per call, the same natively and under Ferry. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agg_common.h"

#define PAGE 4096

static volatile int done;

static void yielder(void *arg)
{
    (void)arg;
    while (!done)
        ferry_fiber_yield();
}

static const char *outcome(long r)
{
    return r >= 0 ? "ok" : strerror(errno);
}

static void futex_case(void)
{
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint32_t *word = (uint32_t *)(p + 64);
    *word = 5;
    const char *a = outcome(syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 6, NULL, NULL, 0));
    const char *b = outcome(syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 6, NULL, NULL, 0));
    munmap(p, PAGE);
    printf("futex: before %s, %s; after %s\n", a, b,
           outcome(syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 6, NULL, NULL, 0)));
}

static void poll_case(void)
{
    int fds[2];
    if (pipe(fds))
        agg_die("pipe", errno);
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct pollfd *pfd = (struct pollfd *)(p + 64);
    *pfd = (struct pollfd){.fd = fds[0], .events = POLLIN};
    const char *a = outcome(poll(pfd, 1, 0));
    const char *b = outcome(poll(pfd, 1, 0));
    munmap(p, PAGE);
    printf("poll: before %s, %s; after %s\n", a, b, outcome(poll(pfd, 1, 0)));
    close(fds[0]);
    close(fds[1]);
}

static void run(void *arg)
{
    int fiber = arg != NULL;
    struct ferry_fiber *y = NULL;
    if (fiber && ferry_fiber_spawn(&y, yielder, NULL))
        agg_die("ferry_fiber_spawn", -1);
    futex_case();
    poll_case();
    done = 1;
    if (y)
        ferry_fiber_join(y);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "native";
    agg_run(mode, run, strcmp(mode, "fiber") == 0 ? (void *)1 : NULL);
    return 0;
}
