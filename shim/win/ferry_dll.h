/* ferry.dll: Ferry's shim for Windows x64 programs (and wine).
 *
 * At DllMain it finds ntdll's system-call stubs in the ntdll actually loaded
 * (by shape, named from its export table), gives each a trampoline within
 * +-2 GiB and replaces each stub's entry with a jump to it in one 8-byte
 * atomic write.  A trampoline counts the call in the calling thread's block
 * of the process file and runs the stub's own first two instructions, then
 * the rest of the stub: the stack and every register the stub reads are as
 * the caller left them.  The process file has libferry.so's layout
 * (shim/src/procfile.h); its call numbers index a name table it carries.
 */
#ifndef FERRY_DLL_H
#define FERRY_DLL_H

#include <stdint.h>

/* A child wine could not start is started again, by ferry.dll's
 * NtCreateUserProcess hook and by ferry-launch alike.  Wine's
 * NtCreateUserProcess says STATUS_INTERNAL_ERROR (CreateProcessW: 1359)
 * when the new process ended before it told wineserver its start was done:
 * before the loader ran a line of Windows code in it (no DLL, no entry
 * point), so with no effect a program could see.  A fork that fails in
 * wine's spawn_process gives exactly this: plain wine in a pids cgroup near
 * its limit fails CreateProcessW with 1359 (and 8 when the first of its two
 * forks fails).  CI saw it twice (once in the hook, once in ferry-launch), a
 * machine of ours never, in about 6,000 starts with and without Ferry, idle
 * and loaded: a machine short of tasks for a moment is the likely cause,
 * never Ferry's code, which a child runs only after that point.  So the
 * child is started again, a few times, and ferry.dll counts it in the
 * parent's process file (start_retries, in the report), rather than make a
 * program fail where plain wine, in the same run, started the same child. */
#define FERRY_WIN_STATUS_INTERNAL_ERROR ((long)(int32_t)0xC00000E5u)
#define FERRY_WIN_START_TRIES 3
#define FERRY_WIN_START_PAUSE_MS 20

#define FERRY_WIN_MAX_STUBS 512        /* FERRY_NR_MAX: a stub's index is its call number */
#define FERRY_WIN_NAME_MAX 64

struct ferry_stub {
    uint8_t *entry;                     /* in the loaded ntdll */
    uint32_t ssn;
    char name[FERRY_WIN_NAME_MAX];
    void *original;                     /* the call, uncounted (a trampoline's tail): wagg_native */
};

/* ferry_dll.c: the stubs table (index = call number), for the engine */
int ferry_stub_count(void);
const struct ferry_stub *ferry_stub_at(unsigned index);

/* patch.c */
int ferry_find_stubs(void *ntdll, struct ferry_stub *stubs, int cap);
/* What ferry.dll takes part in among ntdll's calls (ferry_patch_stubs fills it) */
struct ferry_hooks {
    int32_t *exit_status;        /* the status this process's NtTerminateProcess gave */
    void *create_original;       /* NtCreateUserProcess's own code, after its hook */
    void *terminate_original;    /* NtTerminateProcess's */
    void *terminate_thread_original;    /* NtTerminateThread's */
};

/* stubs[0..n) of one module, call numbers from `first`; `hooks` for ntdll's
 * (NULL for any other module) */
int ferry_patch_stubs(struct ferry_stub *stubs, int n, uint32_t first, uint32_t tls_offset,
                      int timed, struct ferry_hooks *hooks);
/* stubs[0..n) (sorted by entry) given trampolines without touching their
 * entries: slot i gets trampoline i (a rewritten module's stubs jump through it) */
int ferry_link_stubs(struct ferry_stub *stubs, int n, uint32_t first, uint32_t tls_offset, int timed,
                     uint64_t *const *slots);

/* Route every counted stub through the route hook (wagg_route.c) when the
 * TEB word at `slot` is set; before the stubs are patched */
void ferry_route_calls(uint32_t slot);
void wagg_route_entry(void);

/* modules.c: the modules `ferry instrument` rewrote (a control block each) */
struct _UNICODE_STRING;
/* The stubs of the module at `base` if it is one, into out[0..cap) (named
 * after the stub of `named` with the same SSN), their slots into slots[];
 * their number (0: not a rewritten module). */
int ferry_rewritten_stubs(uint8_t *base, struct ferry_stub *out, uint64_t **slots, int cap,
                          const struct ferry_stub *named, int nnamed);
/* `fn` on every module loaded now, and the file name of one. */
void ferry_each_module(void (*fn)(uint8_t *base, const struct _UNICODE_STRING *full));
void ferry_base_name(const struct _UNICODE_STRING *full, char *out, int cap);

/* children (ferry_dll.c): NtCreateUserProcess's replacement */
long __stdcall ferry_create_user_process(void *ph, void *th, uint32_t pa, uint32_t ta, void *poa,
                                         void *toa, uint32_t pflags, uint32_t tflags, void *params,
                                         void *info, void *attrs);

/* NtTerminateProcess's replacement: another process ended is recorded */
long __stdcall ferry_terminate_process(void *process, long status);
/* NtTerminateThread's: a thread's own end gives its block back */
long __stdcall ferry_terminate_thread(void *thread, long status);

/* claim.S: the trampolines' slow path, and the C it calls (ferry_dll.c) */
void ferry_claim_entry(void);
void *ferry_claim_block(void);
void ferry_copy_args(void);
/* a timed call's end (trace mode): ferry_dll.c */
void ferry_account(int64_t status, uint64_t exit_tsc, uint64_t enter_tsc, uint32_t index);

/* ferry.dll's own calls (loading Detours, the engine's waits, wakes and
 * thread starts) kept out of the program's counts: between begin and end
 * the calling thread counts into a block nobody reads (ferry_dll.c) */
uint64_t ferry_own_begin(void);
void ferry_own_end(uint64_t was);
void ferry_own_thread(void);            /* first thing in a thread of ferry.dll's */
/* CreateThread for ferry.dll's own threads (their start counts nothing) */
void *ferry_own_thread_create(unsigned long (__stdcall *fn)(void *), void *arg, uint64_t stack);

/* freestanding helpers (ferry_dll.c) */
uint64_t ferry_ticks_ns(uint64_t ticks);    /* TSC ticks -> ns, as calibrated at start */
void ferry_zero(void *p, uint64_t n);
void ferry_copy(void *d, const void *s, uint64_t n);

#endif
