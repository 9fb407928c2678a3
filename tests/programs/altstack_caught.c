/* sigaltstack made by code no rewrite reaches (a page of machine code made
 * at run time: the catch-all serves it), in a process the shim takes for
 * one with Go code (an ELF note of owner "Go", as Go's linker writes): its
 * SIGSYS handler then runs on the thread's alternate stack.  Each answer,
 * and the state libc reads back after it, must be the kernel's:
 *
 *   - a change from the program's stack is made (the shim answered 0 but
 *     the kernel dropped it: rt_sigreturn installs the frame's copy only
 *     when the handler is not on the stack in force, and it was);
 *   - disabling it, SS_AUTODISARM kept;
 *   - from a handler running on it: SS_ONSTACK, and a change is EPERM.
 *
 * Prints one line per step. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define SIZE (64 * 1024)
#define AUTODISARM (1U << 31)

struct go_note {
    uint32_t namesz, descsz, type;
    char name[4];
    char desc[4];
};
__attribute__((used, section(".note.go.buildid"), aligned(4)))
static const struct go_note go_note = {3, 4, 4, "Go", "id!"};

static long (*raw)(long nr, long a, long b);
static char *A, *B;

static const char *which(const void *p)
{
    return p == A ? "A" : p == B ? "B" : p ? "other" : "none";
}

static void say(const char *step, long r, const stack_t *old)
{
    if (r < 0)
        printf("%s: %s\n", step, strerror((int)-r));
    else if (old)
        printf("%s: 0, it was %s size %zu flags 0x%x\n", step, which(old->ss_sp), old->ss_size,
               (unsigned)old->ss_flags);
    else
        printf("%s: 0\n", step);
    stack_t now;
    sigaltstack(0, &now);
    printf("  libc sees %s size %zu flags 0x%x\n", which(now.ss_sp), now.ss_size, (unsigned)now.ss_flags);
}

static long set(char *sp, int flags, stack_t *old)
{
    stack_t ss = {sp, flags, sp ? SIZE : 0};
    return raw(SYS_sigaltstack, (long)&ss, (long)old);
}

static void on_usr1(int sig)
{
    (void)sig;
    stack_t old;
    long r = raw(SYS_sigaltstack, 0, (long)&old);
    printf("handler asks: %ld, %s flags 0x%x\n", r, which(old.ss_sp), (unsigned)old.ss_flags);
    printf("handler sets B: %s\n", set(B, 0, 0) ? "refused" : "done");
}

int main(void)
{
    setvbuf(stdout, 0, _IONBF, 0);
    /* mov rax, rdi; mov rdi, rsi; mov rsi, rdx; syscall; ret */
    static const unsigned char code[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x0f, 0x05, 0xc3};
    void *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 2;
    memcpy(page, code, sizeof(code));
    raw = (long (*)(long, long, long))page;
    A = malloc(SIZE);
    B = malloc(SIZE);
    stack_t old;
    say("set A", set(A, 0, &old), &old);
    say("set B", set(B, 0, &old), &old);
    say("disable", set(0, SS_DISABLE, &old), &old);
    say("set A, autodisarm", set(A, (int)AUTODISARM, &old), &old);
    say("set A", set(A, 0, &old), &old);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, 0);
    raise(SIGUSR1);
    say("after the handler", raw(SYS_sigaltstack, 0, (long)&old), &old);
    return 0;
}
