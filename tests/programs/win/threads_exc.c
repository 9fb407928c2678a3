/* Threads, an exception resumed by a vectored handler, an access violation
 * recovered, and a user APC, each checked by the program itself: under
 * `ferry run` all must behave as under plain wine.  Each of THREADS threads
 * writes argv[2] bytes with one WriteFile per byte to its own file
 * argv[1].<i>, so Ferry's NtWriteFile count is known exactly. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define MY_CODE 0xE0001234

static const char *base;
static int per_thread;
static volatile LONG resumed, apcs;
static volatile int *volatile bad_pointer;
static int fallback = 7;

static DWORD WINAPI writer(LPVOID arg)
{
    char name[1024];
    snprintf(name, sizeof(name), "%s.%d", base, (int)(INT_PTR)arg);
    HANDLE h = CreateFileA(name, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return 1;
    DWORD done;
    for (int i = 0; i < per_thread; i++)
        if (!WriteFile(h, "t", 1, &done, NULL) || done != 1)
            return 1;
    CloseHandle(h);
    return 0;
}

static LONG CALLBACK handler(EXCEPTION_POINTERS *ep)
{
    if (ep->ExceptionRecord->ExceptionCode == MY_CODE) {
        InterlockedIncrement(&resumed);
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    if (ep->ExceptionRecord->ExceptionCode == EXCEPTION_ACCESS_VIOLATION) {
        /* the faulting load reads through rax-free code: point the pointer
         * register at valid memory and retry */
        CONTEXT *c = ep->ContextRecord;
        DWORD64 *regs = &c->Rax;
        for (int r = 0; r < 16; r++)
            if (regs[r] == (DWORD64)(INT_PTR)bad_pointer)
                regs[r] = (DWORD64)(INT_PTR)&fallback;
        bad_pointer = &fallback;
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    return EXCEPTION_CONTINUE_SEARCH;
}

static void CALLBACK apc(ULONG_PTR arg)
{
    InterlockedExchangeAdd(&apcs, (LONG)arg);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 64;
    base = argv[1];
    per_thread = atoi(argv[2]);
    HANDLE t[THREADS];
    for (int i = 0; i < THREADS; i++)
        t[i] = CreateThread(NULL, 0, writer, (LPVOID)(INT_PTR)i, 0, NULL);
    WaitForMultipleObjects(THREADS, t, TRUE, INFINITE);
    DWORD failed = 0, code;
    for (int i = 0; i < THREADS; i++) {
        GetExitCodeThread(t[i], &code);
        failed += code;
        CloseHandle(t[i]);
    }
    AddVectoredExceptionHandler(1, handler);
    for (int i = 0; i < 3; i++)
        RaiseException(MY_CODE, 0, 0, NULL);
    bad_pointer = (volatile int *)(INT_PTR)0x10;
    int value = *bad_pointer;
    QueueUserAPC(apc, GetCurrentThread(), 5);
    QueueUserAPC(apc, GetCurrentThread(), 6);
    DWORD slept = SleepEx(1000, TRUE);
    printf("threads failed %lu, exceptions resumed %ld, recovered %d, apcs %ld, sleep %s\n",
           failed, resumed, value, apcs, slept == WAIT_IO_COMPLETION ? "alerted" : "not alerted");
    fflush(stdout);
    return failed ? 1 : 0;
}
