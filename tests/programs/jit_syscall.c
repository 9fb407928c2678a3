/* Writes `syscall; ret` into an executable mapping of its own and calls it
 * argv[1] times with getppid's number, in each of argv[2] threads (default:
 * the main thread only): code no rewriter ever saw, which only the catch-all
 * can count.  Prints how many calls returned the parent's pid. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *code;
static long per_thread;
static long parent;

static long call_code(long nr)
{
    long ret;
    /* built with -mno-red-zone: the call's return address may land below rsp */
    __asm__ volatile("call *%1" : "=a"(ret) : "r"(code), "a"(nr) : "rcx", "r11", "memory");
    return ret;
}

static void *run(void *arg)
{
    long ok = 0;
    for (long i = 0; i < per_thread; i++)
        ok += call_code(SYS_getppid) == parent;
    *(long *)arg = ok;
    return NULL;
}

int main(int argc, char **argv)
{
    per_thread = argc > 1 ? atol(argv[1]) : 1;
    long threads = argc > 2 ? atol(argv[2]) : 0;
    static const unsigned char bytes[] = {0x0f, 0x05, 0xc3};  /* syscall; ret */
    code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED)
        return 1;
    memcpy(code, bytes, sizeof(bytes));
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC))
        return 1;
    parent = getppid();
    long ok = 0, total = per_thread * (threads ? threads : 1);
    if (!threads) {
        run(&ok);
    } else {
        pthread_t t[64];
        long got[64];
        for (long i = 0; i < threads && i < 64; i++)
            pthread_create(&t[i], NULL, run, &got[i]);
        for (long i = 0; i < threads && i < 64; i++) {
            pthread_join(t[i], NULL);
            ok += got[i];
        }
    }
    printf("jit getppid: %ld of %ld calls returned the parent's pid\n", ok, total);
    return ok == total ? 0 : 1;
}
