/* A futex wait on a word whose page was taken away ends with EFAULT, as
 * the kernel says, even after earlier waits on that word read it.
 *
 * For each way of taking a page away (munmap, mprotect to PROT_NONE, mremap
 * elsewhere, a MAP_FIXED mapping with no access over it, a guard region
 * from madvise where the kernel has MADV_GUARD_INSTALL): waits twice on a
 * word of a fresh page with the wrong value (EAGAIN: the word was read),
 * takes the page away, and waits again.  Also a wait on a word of page 0.
 * Another thread keeps yielding meanwhile, so that under fibers the main
 * thread is never alone on its carrier (alone, its calls go straight to
 * the kernel).
 *
 * Prints one line per case, the same natively and under Ferry (the
 * engine reads a futex word for a fiber's wait itself); exit 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

#define PAGE 4096

static const char *wait_on(void *word)
{
    long r = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 6, NULL, NULL, 0);
    return r == 0 ? "woken" : strerror(errno);
}

static void one(const char *how)
{
    /* far below where mappings are made (top-down from below the stack): once
     * unmapped, no mapping of anyone's (the shim's own records, under
     * Ferry) takes the address before the last wait, which would then read
     * that mapping instead of failing */
    char *p = mmap((void *)0x100000000000UL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        printf("%s: mmap: %s\n", how, strerror(errno));
        return;
    }
    uint32_t *word = (uint32_t *)(p + 64);
    *word = 5;
    const char *first = wait_on(word);
    const char *second = wait_on(word);
    int r = 0;
    if (!strcmp(how, "munmap")) {
        r = munmap(p, 2 * PAGE);
    } else if (!strcmp(how, "mprotect")) {
        r = mprotect(p, PAGE, PROT_NONE);
    } else if (!strcmp(how, "mremap")) {
        char *to = mmap(NULL, 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        r = mremap(p, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to) == MAP_FAILED ? -1 : 0;
    } else if (!strcmp(how, "fixed")) {
        r = mmap(p, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED ? -1 : 0;
    } else if (!strcmp(how, "guard")) {
        if (madvise(p, PAGE, MADV_GUARD_INSTALL) != 0) {
            printf("%s: not on this kernel\n", how);
            return;
        }
    }
    if (r != 0) {
        printf("%s: %s\n", how, strerror(errno));
        return;
    }
    printf("%s: before %s, %s; after %s\n", how, first, second, wait_on(word));
}

static atomic_int done;

static void *yielder(void *arg)
{
    (void)arg;
    while (!atomic_load(&done))
        sched_yield();
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, yielder, NULL) != 0)
        return 2;
    const char *hows[] = {"munmap", "mprotect", "mremap", "fixed", "guard"};
    for (unsigned i = 0; i < sizeof(hows) / sizeof(hows[0]); i++)
        one(hows[i]);
    printf("page 0: %s\n", wait_on((void *)64));
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    return 0;
}
