/* Running a call as its stub would, uncounted, and knowing which calls
 * belong to the thread that makes them. */
#include <windows.h>

#include "wagg.h"

#define STATUS_INVALID_SYSTEM_SERVICE 0xC000001CL

typedef uint64_t (*call16)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                           uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                           uint64_t, uint64_t);

/* per stub index, learnt from its name on first use */
enum { KNOWN = 1, OWN_THREAD = 2, THREAD_ARG = 4, WIDE_RESULT = 8 };
static uint8_t kinds[FERRY_WIN_MAX_STUBS];

static int prefix(const char *s, const char *p)
{
    while (*p && *s == *p)
        s++, p++;
    return !*p;
}

static int contains(const char *s, const char *w)
{
    for (; *s; s++)
        if (prefix(s, w))
            return 1;
    return 0;
}

static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Calls that are about the calling thread whatever their arguments: its
 * context and exceptions, its alerts and APCs, its callbacks, its windows
 * and GDI state (win32u's calls keep per-thread queues). */
static const char *const own_thread[] = {
    "NtContinue", "NtContinueEx", "NtRaiseException", "NtCallbackReturn", "NtTestAlert",
    "NtWaitForAlertByThreadId", "NtTerminateProcess", "NtCreateUserProcess",
    0,
};

static uint8_t kind_of(unsigned index)
{
    uint8_t k = __atomic_load_n(&kinds[index], __ATOMIC_RELAXED);
    if (k)
        return k;
    const struct ferry_stub *s = ferry_stub_at(index);
    k = KNOWN;
    if (s) {
        for (int i = 0; own_thread[i]; i++)
            if (same(s->name, own_thread[i]))
                k |= OWN_THREAD;
        if (prefix(s->name, "NtUser") || prefix(s->name, "NtGdi"))
            k |= OWN_THREAD | WIDE_RESULT;   /* and their results are handles or counts */
        else if (contains(s->name, "Thread"))
            k |= THREAD_ARG;                 /* NtCurrentThread() or 0 as the thread: the caller */
    }
    __atomic_store_n(&kinds[index], k, __ATOMIC_RELAXED);
    return k;
}

long long wagg_native(unsigned index, const uint64_t *a)
{
    if ((long long)(int)index == FERRY_NR_NOP)
        return 0;
    const struct ferry_stub *s = ferry_stub_at(index);
    if (!s || !s->original)
        return (long long)(int32_t)STATUS_INVALID_SYSTEM_SERVICE;
    uint64_t r = ((call16)s->original)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                                       a[10], a[11], a[12], a[13], a[14], a[15]);
    return kind_of(index) & WIDE_RESULT ? (long long)r : (long long)(int32_t)r;
}

long long wagg_run(const struct ferry_call *c)
{
    if (c->nr == FERRY_NR_NOP)
        return 0;
    if (c->nr < 0 || c->nr >= ferry_stub_count())
        return (long long)(int32_t)STATUS_INVALID_SYSTEM_SERVICE;
    return wagg_native((unsigned)c->nr, (const uint64_t *)c->args);
}

int wagg_must_native(long long nr, const long long *args)
{
    if (nr == FERRY_NR_NOP || nr < 0 || nr >= ferry_stub_count())
        return 0;
    uint8_t k = kind_of((unsigned)nr);
    if (k & OWN_THREAD)
        return 1;
    return (k & THREAD_ARG) && (args[0] == 0 || args[0] == -2);
}

int wagg_index(const char *name)
{
    int n = ferry_stub_count();
    for (int i = 0; i < n; i++)
        if (same(ferry_stub_at((unsigned)i)->name, name))
            return i;
    return -1;
}

__declspec(dllexport) int ferry_call_number(const char *name)
{
    int i = name ? wagg_index(name) : -1;
    return i >= 0 ? i : -ENOENT;
}
