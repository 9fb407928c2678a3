/* Finding ntdll's stubs in memory and patching their entries. */
#include <windows.h>
#include <tlhelp32.h>

#include "ferry_dll.h"

#define STUB_SCAN 32
#define STUB_ENTRY 8            /* mov r10, rcx; mov eax, SSN */
#define TRAMP_SIZE 160
#define DATA_SIZE 8192          /* slots, unwind data and the function table */
#define TIMED_FRAME_AT 27       /* where a timed trampoline's frame begins */
#define TIMED_END 138
#define ORIGINAL_AT 144         /* the uncounted entry (13 bytes), after every kind's code */
_Static_assert(TIMED_END <= ORIGINAL_AT && ORIGINAL_AT + 13 <= TRAMP_SIZE, "the uncounted entry fits");
#define REACH 0x7fff0000LL

static int stub_shape(const uint8_t *p)
{
    /* mov r10, rcx (4c 8b d1 or 49 89 ca); mov eax, imm32; syscall; ret */
    if (!((p[0] == 0x4c && p[1] == 0x8b && p[2] == 0xd1) ||
          (p[0] == 0x49 && p[1] == 0x89 && p[2] == 0xca)) || p[3] != 0xb8)
        return 0;
    for (int i = 8; i + 2 < STUB_SCAN; i++)
        if (p[i] == 0x0f && p[i + 1] == 0x05 && p[i + 2] == 0xc3)
            return 1;
    return 0;
}

static int preferred(const char *name)
{
    return name[0] == 'N' && name[1] == 't';
}

static void set_name(struct ferry_stub *s, const char *name)
{
    int i = 0;
    for (; name[i] && i < FERRY_WIN_NAME_MAX - 1; i++)
        s->name[i] = name[i];
    s->name[i] = 0;
}

/* The stubs of the ntdll mapped at `base`, sorted by address, one per entry
 * (an Nt* name preferred over its Zw* alias); their number. */
int ferry_find_stubs(void *base, struct ferry_stub *stubs, int cap)
{
    uint8_t *b = base;
    IMAGE_NT_HEADERS64 *nt = (IMAGE_NT_HEADERS64 *)(b + ((IMAGE_DOS_HEADER *)b)->e_lfanew);
    IMAGE_DATA_DIRECTORY dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_EXPORT];
    if (!dir.VirtualAddress)
        return 0;
    IMAGE_EXPORT_DIRECTORY *ex = (IMAGE_EXPORT_DIRECTORY *)(b + dir.VirtualAddress);
    uint32_t *names = (uint32_t *)(b + ex->AddressOfNames);
    uint16_t *ords = (uint16_t *)(b + ex->AddressOfNameOrdinals);
    uint32_t *funcs = (uint32_t *)(b + ex->AddressOfFunctions);
    int n = 0;
    for (uint32_t k = 0; k < ex->NumberOfNames; k++) {
        uint32_t rva = funcs[ords[k]];
        if (rva >= dir.VirtualAddress && rva < dir.VirtualAddress + dir.Size)
            continue;   /* a forwarder */
        uint8_t *entry = b + rva;
        const char *name = (const char *)(b + names[k]);
        if (!stub_shape(entry))
            continue;
        int i = 0;
        while (i < n && stubs[i].entry < entry)
            i++;
        if (i < n && stubs[i].entry == entry) {
            if (preferred(name) && !preferred(stubs[i].name))
                set_name(&stubs[i], name);
            continue;
        }
        if (n == cap)
            return -1;
        for (int j = n; j > i; j--)
            stubs[j] = stubs[j - 1];
        stubs[i].entry = entry;
        stubs[i].ssn = *(uint32_t *)(entry + 4);
        set_name(&stubs[i], name);
        n++;
    }
    return n;
}

/* Memory for the trampolines within reach of a rel32 from every stub. */
static uint8_t *alloc_near(uint8_t *lo, uint8_t *hi, SIZE_T size)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    uintptr_t gran = si.dwAllocationGranularity;
    for (int dir = 0; dir < 2; dir++) {
        for (uintptr_t step = 1; step < (uintptr_t)(REACH / gran); step++) {
            uintptr_t a = dir == 0 ? (((uintptr_t)lo & ~(gran - 1)) - step * gran)
                                   : ((((uintptr_t)hi + gran - 1) & ~(gran - 1)) + (step - 1) * gran);
            if ((intptr_t)(hi - (uint8_t *)a) > REACH || (intptr_t)((uint8_t *)a + size - lo) > REACH)
                break;
            void *p = VirtualAlloc((void *)a, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
            if (p)
                return p;
        }
    }
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    ferry_copy(p, &v, 4);
}

static uint32_t rel32(const uint8_t *from_end, const uint8_t *to)
{
    return (uint32_t)(int32_t)(to - from_end);
}

static int same(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* Calls that do not return to their caller: counted, never timed (a timed
 * call's frame would be left behind). */
static int never_returns(const char *name)
{
    static const char *const names[] = {
        "NtContinue", "NtContinueEx", "NtRaiseException", "NtTerminateThread",
        "NtTerminateProcess", "NtCallbackReturn", "NtSetContextThread", 0,
    };
    for (int i = 0; names[i]; i++)
        if (same(name, names[i]))
            return 1;
    return 0;
}

static void emit_counted(uint8_t *t, const struct ferry_stub *s);

/* The data page's slots, read by the trampolines through rip-relative calls. */
enum { SLOT_CLAIM = 0, SLOT_EXIT = 8, SLOT_COPY = 16, SLOT_ACCOUNT = 24, SLOT_CREATE = 32,
       SLOT_TERMINATE = 40, SLOT_ROUTE = 48, SLOT_TERMINATE_THREAD = 56,
       UNWIND_AT = 64, TABLE_AT = 128 };

/* NtCreateUserProcess, NtTerminateProcess and NtTerminateThread: counted, then handed to
 * ferry.dll's C (the function in `slot`) with the caller's frame as it is;
 * the stub itself is what follows the jump (returned: the call's own code). */
static uint8_t *emit_hook(uint8_t *t, uint8_t *data, int slot, const struct ferry_stub *s)
{
    static const uint8_t code[6] = {0xff, 0x25, 0, 0, 0, 0};   /* jmp [hook] */
    ferry_copy(t, code, sizeof(code));
    put32(t + 2, rel32(t + 6, data + slot));
    emit_counted(t + 6, s);
    return t + 6;
}

/* NtTerminateProcess(0 or the current process, status): the status is kept
 * (wine's ExitProcess calls it with 0 before the DLLs hear of the exit,
 * Windows' with the current process) */
static uint8_t *emit_exit_status(uint8_t *t, uint8_t *exit_slot)
{
    static const uint8_t code[17] = {
        0x48, 0x85, 0xc9,                             /* test rcx, rcx */
        0x74, 0x06,                                   /* je keep */
        0x48, 0x83, 0xf9, 0xff,                       /* cmp rcx, -1 */
        0x75, 0x06,                                   /* jne on */
        0x89, 0x15, 0, 0, 0, 0,                       /* keep: mov [exit_slot], edx */
    };
    ferry_copy(t, code, sizeof(code));
    put32(t + 13, rel32(t + 17, exit_slot));
    return t + sizeof(code);
}

/* The counting part, shared by both kinds: 27 bytes, rax = the thread's block. */
static uint8_t *emit_count(uint8_t *t, uint8_t *data, uint32_t index, uint32_t tls_offset)
{
    static const uint8_t code[27] = {
        0x65, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0,     /* mov rax, gs:[tls slot] */
        0x48, 0x85, 0xc0,                             /* test rax, rax */
        0x75, 0x06,                                   /* jnz count */
        0xff, 0x15, 0, 0, 0, 0,                       /* call [claim] */
        0x48, 0xff, 0x80, 0, 0, 0, 0,                 /* count: inc qword [rax + calls[i]] */
    };
    ferry_copy(t, code, sizeof(code));
    put32(t + 5, tls_offset);
    put32(t + 16, rel32(t + 20, data + SLOT_CLAIM));
    put32(t + 23, 64 + 8 * index);                    /* FERRY_BLK_CALLS */
    return t + sizeof(code);
}

/* Counted only: then the stub's own first two instructions and the rest of it. */
static void emit_counted(uint8_t *t, const struct ferry_stub *s)
{
    static const uint8_t code[13] = {
        0x4c, 0x8b, 0xd1,                             /* mov r10, rcx */
        0xb8, 0, 0, 0, 0,                             /* mov eax, SSN */
        0xe9, 0, 0, 0, 0,                             /* jmp stub + 8 */
    };
    ferry_copy(t, code, sizeof(code));
    put32(t + 4, s->ssn);
    put32(t + 9, rel32(t + 13, s->entry + 8));
}

/* The TEB offset of the route word (0: no trampoline routes) */
static uint32_t route_slot;

void ferry_route_calls(uint32_t slot)
{
    route_slot = slot;
}

/* Counted, then routed when the route word is set (a carrier runs a fiber:
 * wagg_route.c), else on into the stub: for a thread that is not a carrier
 * one compare and a branch not taken.  The route entry gets the call's
 * index in eax and the native tail in r11 (both free: the stub sets eax,
 * and r11 is volatile). */
static void emit_routed(uint8_t *t, uint8_t *data, const struct ferry_stub *s, uint32_t index)
{
    static const uint8_t check[12] = {
        0x65, 0x48, 0x83, 0x3c, 0x25, 0, 0, 0, 0, 0x00, /* cmp qword gs:[route], 0 */
        0x75, 13,                                     /* jne route (past the native tail) */
    };
    static const uint8_t route[18] = {
        0xb8, 0, 0, 0, 0,                             /* route: mov eax, index */
        0x4c, 0x8d, 0x1d, 0, 0, 0, 0,                 /* lea r11, [native] */
        0xff, 0x25, 0, 0, 0, 0,                       /* jmp [route entry] */
    };
    ferry_copy(t, check, sizeof(check));
    put32(t + 5, route_slot);
    uint8_t *native = t + sizeof(check);
    emit_counted(native, s);
    uint8_t *r = native + 13;
    ferry_copy(r, route, sizeof(route));
    put32(r + 1, index);
    put32(r + 8, rel32(r + 12, native));
    put32(r + 14, rel32(r + 18, data + SLOT_ROUTE));
}

/* Counted and timed: a frame of 0xa8 bytes (its unwind data registered, so
 * that an exception raised in a callback of the call unwinds through it),
 * the stack arguments copied into it, the stub called, the time accounted.
 * `t` is the frame's first instruction (TIMED_FRAME_AT in the trampoline). */
static void emit_timed(uint8_t *t, uint8_t *data, const struct ferry_stub *s, uint32_t index)
{
    static const uint8_t code[TIMED_END - TIMED_FRAME_AT] = {
        0x48, 0x81, 0xec, 0xa8, 0, 0, 0,              /* sub rsp, 0xa8 */
        0xff, 0x15, 0, 0, 0, 0,                       /* call [copy_args] */
        0x4c, 0x8b, 0xda,                             /* mov r11, rdx */
        0x0f, 0x31,                                   /* rdtsc */
        0x48, 0xc1, 0xe2, 0x20,                       /* shl rdx, 32 */
        0x48, 0x09, 0xd0,                             /* or rax, rdx */
        0x48, 0x89, 0x84, 0x24, 0xa0, 0, 0, 0,        /* mov [rsp+0xa0], rax: enter */
        0x49, 0x8b, 0xd3,                             /* mov rdx, r11 */
        0x4c, 0x8b, 0xd1,                             /* mov r10, rcx */
        0xb8, 0, 0, 0, 0,                             /* mov eax, SSN */
        0xe8, 0, 0, 0, 0,                             /* call stub + 8 */
        0x49, 0x89, 0xc3,                             /* mov r11, rax: the status */
        0x0f, 0x31,                                   /* rdtsc */
        0x48, 0xc1, 0xe2, 0x20,                       /* shl rdx, 32 */
        0x48, 0x09, 0xd0,                             /* or rax, rdx */
        0x4c, 0x8b, 0x84, 0x24, 0xa0, 0, 0, 0,        /* mov r8, [rsp+0xa0]: enter */
        0x4c, 0x89, 0x9c, 0x24, 0xa0, 0, 0, 0,        /* mov [rsp+0xa0], r11 */
        0x48, 0x8b, 0xd0,                             /* mov rdx, rax: exit */
        0x49, 0x8b, 0xcb,                             /* mov rcx, r11: status */
        0x41, 0xb9, 0, 0, 0, 0,                       /* mov r9d, index */
        0xff, 0x15, 0, 0, 0, 0,                       /* call [account] */
        0x48, 0x8b, 0x84, 0x24, 0xa0, 0, 0, 0,        /* mov rax, [rsp+0xa0]: status */
        0x48, 0x81, 0xc4, 0xa8, 0, 0, 0,              /* add rsp, 0xa8 */
        0xc3,                                         /* ret */
    };
    ferry_copy(t, code, sizeof(code));
    put32(t + 9, rel32(t + 13, data + SLOT_COPY));
    put32(t + 40, s->ssn);
    put32(t + 45, rel32(t + 49, s->entry + 8));
    put32(t + 85, index);
    put32(t + 91, rel32(t + 95, data + SLOT_ACCOUNT));
}

/* One UNWIND_INFO for every timed frame: a 7-byte prolog allocating 0xa8. */
static void write_unwind(uint8_t *u)
{
    static const uint8_t info[8] = {
        0x01, 0x07, 0x02, 0x00,                       /* version 1, prolog 7, 2 codes */
        0x07, 0x01,                                   /* at 7: UWOP_ALLOC_LARGE, size/8 next */
        0xa8 / 8, 0x00,
    };
    ferry_copy(u, info, sizeof(info));
}

/* The process's other threads, suspended while the entries change, so that
 * none runs a stub half patched.  At most `cap`; their number. */
static int suspend_others(HANDLE *held, int cap)
{
    DWORD me = GetCurrentThreadId(), pid = GetCurrentProcessId();
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
    if (snap == INVALID_HANDLE_VALUE)
        return 0;
    THREADENTRY32 te;
    te.dwSize = sizeof(te);
    int n = 0;
    for (BOOL ok = Thread32First(snap, &te); ok && n < cap; ok = Thread32Next(snap, &te)) {
        if (te.th32OwnerProcessID != pid || te.th32ThreadID == me)
            continue;
        HANDLE h = OpenThread(THREAD_SUSPEND_RESUME | THREAD_GET_CONTEXT | THREAD_SET_CONTEXT, FALSE,
                              te.th32ThreadID);
        if (h && SuspendThread(h) != (DWORD)-1)
            held[n++] = h;
        else if (h)
            CloseHandle(h);
    }
    CloseHandle(snap);
    return n;
}

/* A suspended thread between a stub's two first instructions (it ran
 * `mov r10, rcx`, not yet `mov eax, SSN`, whose bytes the jump replaces) is
 * moved past the second, as if it had run it. */
static void step_past_entries(HANDLE *held, int nheld, struct ferry_stub *stubs, int n)
{
    for (int k = 0; k < nheld; k++) {
        CONTEXT c;
        c.ContextFlags = CONTEXT_CONTROL | CONTEXT_INTEGER;
        if (!GetThreadContext(held[k], &c))
            continue;
        for (int i = 0; i < n; i++) {
            if (c.Rip == (DWORD64)(uintptr_t)(stubs[i].entry + 3)) {
                c.Rax = stubs[i].ssn;
                c.Rip = (DWORD64)(uintptr_t)(stubs[i].entry + STUB_ENTRY);
                SetThreadContext(held[k], &c);
                break;
            }
        }
    }
}

static void resume_all(HANDLE *held, int nheld)
{
    for (int k = 0; k < nheld; k++) {
        ResumeThread(held[k]);
        CloseHandle(held[k]);
    }
}

/* The trampolines of stubs[0..n), in memory within reach of them; NULL if
 * none could be made.  Trampoline i is at the result + DATA_SIZE + i * TRAMP_SIZE. */
static uint8_t *make_trampolines(struct ferry_stub *stubs, int n, uint32_t first, uint32_t tls_offset,
                                 int timed, struct ferry_hooks *hooks)
{
    uint8_t *lo = stubs[0].entry, *hi = stubs[n - 1].entry + STUB_SCAN;
    /* the data (slots, unwind data, function table), then the trampolines,
     * made read-only and executable */
    SIZE_T size = DATA_SIZE + (SIZE_T)n * TRAMP_SIZE;
    uint8_t *area = alloc_near(lo, hi, size);
    if (!area)
        return 0;
    void *slots[8] = {(void *)ferry_claim_entry, 0, (void *)ferry_copy_args, (void *)ferry_account,
                      (void *)ferry_create_user_process, (void *)ferry_terminate_process,
                      (void *)wagg_route_entry, (void *)ferry_terminate_thread};
    ferry_copy(area, slots, sizeof(slots));
    *(int32_t *)(area + SLOT_EXIT) = 259;             /* STILL_ACTIVE until NtTerminateProcess */
    if (hooks)
        hooks->exit_status = (int32_t *)(area + SLOT_EXIT);
    write_unwind(area + UNWIND_AT);
    RUNTIME_FUNCTION *table = (RUNTIME_FUNCTION *)(area + TABLE_AT);
    int ntable = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *t = area + DATA_SIZE + i * TRAMP_SIZE;
        for (int k = 0; k < TRAMP_SIZE; k++)
            t[k] = 0xcc;
        uint32_t index = first + (uint32_t)i;    /* the call's number in the process file */
        /* the engine's workers run a call the program made once, counted
         * where it made it: this entry only loads the SSN and runs the stub */
        emit_counted(t + ORIGINAL_AT, &stubs[i]);
        stubs[i].original = t + ORIGINAL_AT;
        int terminate = hooks && same(stubs[i].name, "NtTerminateProcess");
        if (terminate)
            t = emit_exit_status(t, area + SLOT_EXIT);
        t = emit_count(t, area, index, tls_offset);
        /* a hooked call's uncounted entry is its hook: ferry.dll still
         * takes part in it (a child gets ferry.dll wherever it is created) */
        if (hooks && same(stubs[i].name, "NtCreateUserProcess"))
            hooks->create_original = emit_hook(stubs[i].original = t, area, SLOT_CREATE, &stubs[i]);
        else if (terminate)
            hooks->terminate_original = emit_hook(stubs[i].original = t, area, SLOT_TERMINATE, &stubs[i]);
        else if (hooks && same(stubs[i].name, "NtTerminateThread"))
            hooks->terminate_thread_original = emit_hook(stubs[i].original = t, area,
                                                         SLOT_TERMINATE_THREAD, &stubs[i]);
        else if (timed && !never_returns(stubs[i].name)) {
            emit_timed(t, area, &stubs[i], index);
            table[ntable].BeginAddress = (DWORD)(t - area);
            table[ntable].EndAddress = (DWORD)(t - area + TIMED_END - TIMED_FRAME_AT);
            table[ntable].UnwindData = UNWIND_AT;
            ntable++;
        } else if (route_slot && !never_returns(stubs[i].name))
            emit_routed(t, area, &stubs[i], index);
        else
            emit_counted(t, &stubs[i]);
    }
    DWORD old;
    if (!VirtualProtect(area + DATA_SIZE, size - DATA_SIZE, PAGE_EXECUTE_READ, &old))
        return 0;
    FlushInstructionCache(GetCurrentProcess(), area + DATA_SIZE, size - DATA_SIZE);
    if (ntable)
        RtlAddFunctionTable(table, (DWORD)ntable, (DWORD64)(uintptr_t)area);
    return area;
}

/* Patch every stub; 0, or -1 if none could be (nothing is then changed). */
int ferry_patch_stubs(struct ferry_stub *stubs, int n, uint32_t first, uint32_t tls_offset,
                      int timed, struct ferry_hooks *hooks)
{
    if (n <= 0)
        return -1;
    uint8_t *area = make_trampolines(stubs, n, first, tls_offset, timed, hooks);
    if (!area)
        return -1;
    uint8_t *lo = stubs[0].entry, *hi = stubs[n - 1].entry + STUB_SCAN;
    DWORD old;
    if (!VirtualProtect(lo, (SIZE_T)(hi - lo), PAGE_EXECUTE_READWRITE, &old))
        return -1;
    static HANDLE held[256];
    int nheld = suspend_others(held, 256);
    step_past_entries(held, nheld, stubs, n);
    for (int i = 0; i < n; i++) {
        uint8_t *e = stubs[i].entry;
        if ((uintptr_t)e & 7)
            continue;   /* one aligned store or nothing: never half a patch */
        uint8_t *t = area + DATA_SIZE + i * TRAMP_SIZE;
        uint8_t jmp[8];
        ferry_copy(jmp, e, 8);
        jmp[0] = 0xe9;
        put32(jmp + 1, rel32(e + 5, t));
        uint64_t v;
        ferry_copy(&v, jmp, 8);
        __atomic_store_n((uint64_t *)e, v, __ATOMIC_SEQ_CST);
    }
    FlushInstructionCache(GetCurrentProcess(), lo, (SIZE_T)(hi - lo));
    resume_all(held, nheld);
    VirtualProtect(lo, (SIZE_T)(hi - lo), old, &old);
    return 0;
}

int ferry_link_stubs(struct ferry_stub *stubs, int n, uint32_t first, uint32_t tls_offset, int timed,
                     uint64_t *const *slots)
{
    if (n <= 0)
        return -1;
    uint8_t *area = make_trampolines(stubs, n, first, tls_offset, timed, 0);
    if (!area)
        return -1;
    for (int i = 0; i < n; i++)
        __atomic_store_n(slots[i], (uint64_t)(uintptr_t)(area + DATA_SIZE + i * TRAMP_SIZE),
                         __ATOMIC_RELEASE);
    return 0;
}
