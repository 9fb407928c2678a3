/* A signal handler on an alternate stack of SIGSTKSZ (8 KiB, what programs
 * give it) that writes to a pipe from code made at run time, and reads it
 * back through libc, in the first thread and in another: ten signals each.
 * Natively the handler has what the kernel's frame leaves of the stack
 * (~4.5 KiB with AVX-512's state).  A call from code no plan rewrote is
 * caught (SIGSYS, one more frame of the kernel's on the same stack); the
 * shim's C path ran below that frame too and overran the stack (a fault).
 * Where the kernel's frame is larger (AT_MINSIGSTKSZ), the stack is twice
 * that and some: room for the program's signal and for SIGSYS's.  The stack
 * has a guard page below it, so an overrun faults rather than writes over
 * something.  Prints "10 10" and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_MINSIGSTKSZ
#define AT_MINSIGSTKSZ 51
#endif

static int pipe_fds[2];
static long (*jit_write)(long fd, const void *buf, long n);
static __thread int handled;

static void handler(int sig)
{
    (void)sig;
    char out[] = "ok", in[2];
    if (jit_write(pipe_fds[1], out, 2) != 2 || read(pipe_fds[0], in, 2) != 2 || memcmp(in, out, 2))
        _exit(3);
    handled++;
}

static void *signalled(void *arg)
{
    (void)arg;
    size_t size = 8192, kernel = getauxval(AT_MINSIGSTKSZ), page = 4096;
    if (2 * kernel + 512 > size)
        size = 2 * kernel + 512;
    size_t len = (size + page - 1) / page * page;
    char *m = mmap(NULL, len + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE))
        return NULL;
    /* the stack ends where the guard begins: an overrun of `size` faults */
    stack_t ss = {.ss_sp = m + page + len - size, .ss_size = size};
    if (sigaltstack(&ss, NULL))
        return NULL;
    for (int i = 0; i < 10; i++)
        pthread_kill(pthread_self(), SIGUSR1);
    return (void *)(long)handled;
}

int main(void)
{
    /* mov eax, SYS_write; syscall; ret */
    static const unsigned char bytes[] = {0xb8, SYS_write, 0, 0, 0, 0x0f, 0x05, 0xc3};
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED || pipe(pipe_fds))
        return 1;
    memcpy(code, bytes, sizeof(bytes));
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC))
        return 1;
    jit_write = (long (*)(long, const void *, long))code;
    struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_ONSTACK};
    sigaction(SIGUSR1, &sa, NULL);
    long first = (long)signalled(NULL);
    pthread_t t;
    void *other = NULL;
    if (pthread_create(&t, NULL, signalled, NULL) || pthread_join(t, &other))
        return 1;
    printf("%ld %ld\n", first, (long)other);
    return first == 10 && (long)other == 10 ? 0 : 1;
}
