/* bench/pe_cluster_wake (a Windows program; not run by pe_cluster.py): the
 * two ways one thread can put another to sleep and wake it under wine,
 * measured as a hand-off between two threads taking turns, in ns per
 * hand-off: RtlWaitOnAddress / RtlWakeAddressSingle (what ferry.dll's pools
 * use) and NtWaitForAlertByThreadId / NtAlertThreadByThreadId.
 *
 *   x86_64-w64-mingw32-gcc -O2 -o pe_cluster_wake.exe bench/pe_cluster_wake.c -lntdll
 *   wine pe_cluster_wake.exe [N]
 */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>

NTSTATUS NTAPI RtlWaitOnAddress(const void *, const void *, SIZE_T, const LARGE_INTEGER *);
void NTAPI RtlWakeAddressSingle(const void *);
typedef LONG (NTAPI *alert_fn)(HANDLE);
typedef LONG (NTAPI *wait_alert_fn)(void *, const LARGE_INTEGER *);

static alert_fn alert;
static wait_alert_fn wait_alert;
static volatile LONG turn;
static volatile DWORD tids[2];
static int by_tid;
static long n = 20000;

static DWORD WINAPI side(void *p)
{
    int me = (int)(INT_PTR)p;
    tids[me] = GetCurrentThreadId();
    while (!tids[!me])
        Sleep(0);
    for (long i = 0; i < n; i++) {
        while (turn != me) {
            if (by_tid) {
                wait_alert((void *)&turn, 0);
            } else {
                LONG other = !me;
                RtlWaitOnAddress((void *)&turn, &other, sizeof(other), 0);
            }
        }
        turn = !me;
        if (by_tid)
            alert((HANDLE)(ULONG_PTR)tids[!me]);
        else
            RtlWakeAddressSingle((void *)&turn);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n = atol(argv[1]);
    HMODULE nt = GetModuleHandleA("ntdll.dll");
    alert = (alert_fn)(void (*)(void))GetProcAddress(nt, "NtAlertThreadByThreadId");
    wait_alert = (wait_alert_fn)(void (*)(void))GetProcAddress(nt, "NtWaitForAlertByThreadId");
    for (by_tid = 0; by_tid < 2; by_tid++) {
        if (by_tid && (!alert || !wait_alert))
            break;
        turn = 0;
        tids[0] = tids[1] = 0;
        LARGE_INTEGER a, b, f;
        QueryPerformanceFrequency(&f);
        QueryPerformanceCounter(&a);
        HANDLE t[2] = {CreateThread(0, 0, side, (void *)0, 0, 0), CreateThread(0, 0, side, (void *)1, 0, 0)};
        WaitForMultipleObjects(2, t, TRUE, INFINITE);
        QueryPerformanceCounter(&b);
        printf("%-16s %.0f ns per hand-off\n", by_tid ? "alert-by-tid" : "wait-on-address",
               (double)(b.QuadPart - a.QuadPart) * 1e9 / (double)f.QuadPart / (2.0 * n));
    }
    return 0;
}
