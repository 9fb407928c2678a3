/* Fibers: a stack with a guard page, a glibc thread control block of its
 * own (errno, malloc's per-thread cache, stdio locks' owner state... stay
 * per fiber), and the context the scheduler switches to.
 *
 * The thread control block comes from ld.so's own allocator (the one
 * pthread_create uses), so every module's static TLS is laid out and
 * initialized as for a new thread.  Its header (struct pthread) is then a
 * copy of the carrier's, with the pointers into the carrier's header moved
 * to the fiber's: the stack guard and pointer guard (fs:0x28, fs:0x30) and
 * the tid stay those of the carrier thread the fiber runs on, which is
 * what mangled pointers (setjmp, atexit) and lock owners compare against.
 */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agg.h"
#include "catchall.h"
#include "raw.h"
#include "store.h"
#include "util.h"

/* GLIBC_PRIVATE, resolved at load time when ld.so and libc have them. */
extern void *_dl_allocate_tls(void *mem) __attribute__((weak));
extern void _dl_deallocate_tls(void *tcb, int dealloc_tcb) __attribute__((weak));
extern const uint32_t _thread_db_sizeof_pthread __attribute__((weak));
extern void __call_tls_dtors(void) __attribute__((weak));
extern void _dl_get_tls_static_info(size_t *size, size_t *align) __attribute__((weak));

__thread struct agg_fiber *agg_self __attribute__((tls_model("initial-exec")));
__thread struct agg_carrier *agg_carrier __attribute__((tls_model("initial-exec")));
int ferry_agg_fsgsbase = -1;

#define PAGE 4096UL
#define AT_HWCAP2 26
#define HWCAP2_FSGSBASE (1UL << 1)

/* libc's copy of the auxiliary vector: /proc/self/auxv cannot be opened by
 * a process that changed its user (a server's children dropping root are
 * no longer dumpable), and without the answer every fiber switch would
 * cost an arch_prctl. */
extern unsigned long getauxval(unsigned long type) __attribute__((weak));

/* Before any switch: the switch takes an unset answer for yes. */
void agg_fsgsbase_detect(void)
{
    if (ferry_agg_fsgsbase >= 0)
        return;
    int yes = 0;
    if (getauxval) {
        yes = !!(getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE);
    } else {
        unsigned long aux[2 * 64];
        long fd = ferry_raw4(SYS_openat, -100, "/proc/self/auxv", 0 /* O_RDONLY */, 0);
        if (fd >= 0) {
            long n = ferry_raw3(SYS_read, fd, aux, sizeof(aux));
            ferry_raw1(SYS_close, fd);
            for (long i = 0; i + 1 < n / 8; i += 2)
                if (aux[i] == AT_HWCAP2)
                    yes = !!(aux[i + 1] & HWCAP2_FSGSBASE);
        }
    }
    __atomic_store_n(&ferry_agg_fsgsbase, yes, __ATOMIC_RELEASE);
}

/* tcbhead_t.multiple_threads on x86-64 (fs:0x18): SINGLE_THREAD_P of
 * glibc before 2.34 */
#define TCB_MULTIPLE_THREADS 0x18
#define RTLD_LAZY_ 1
#define RTLD_NOLOAD_ 4
extern void *dlopen(const char *file, int mode) __attribute__((weak));
extern void *dlsym(void *handle, const char *name) __attribute__((weak));
extern void _IO_enable_locks(void) __attribute__((weak));

/* A fiber is a thread to the program: glibc must know the process has
 * more than one, as pthread_create tells it the first time (the creator's
 * block, the single-threaded flag, stdio's locks).  Otherwise its mutexes
 * lock and unlock with a plain store, which wakes none of the fibers parked
 * on them, and two fibers' printf share a buffer unlocked.  The flag is
 * libc's own: a program that names __libc_single_threaded has a copy of
 * its own (copy relocation), which the weak reference finds instead. */
static void multi_threaded(unsigned long creator)
{
    *(int *)(creator + TCB_MULTIPLE_THREADS) = 1;
    static int done;
    if (done)
        return;
    done = 1;
    if (&__libc_single_threaded)
        __libc_single_threaded = 0;
    if (dlopen && dlsym) {
        void *libc = dlopen("libc.so.6", RTLD_LAZY_ | RTLD_NOLOAD_);
        char *own = libc ? dlsym(libc, "__libc_single_threaded") : 0;
        if (own)
            *own = 0;
    }
    if (_IO_enable_locks)
        _IO_enable_locks();
}

static size_t pthread_size(void)
{
    /* sizeof(struct pthread) of glibc 2.36 on x86-64, should libc not say */
    return &_thread_db_sizeof_pthread ? _thread_db_sizeof_pthread : 2304;
}


/* The thread block sits at the top of the fiber's mapping, as glibc puts a
 * thread's at the top of its stack: the TCB at `tcb`, static TLS below it.
 * The fiber's hot state (stack top, its struct, its TLS) then shares a few
 * pages, which matters with a thousand fibers in one batch. */
static void *new_tcb(struct agg_fiber *f, void *tcb)
{
    if (!_dl_allocate_tls(tcb))
        return 0;
    unsigned long old = ferry_tp(), nw = (unsigned long)tcb;
    size_t size = pthread_size();
    void *dtv = ((void **)tcb)[1];
    ferry_memcpy(tcb, (void *)old, size);
    ((void **)tcb)[1] = dtv;
    unsigned long *w = tcb;
    for (size_t i = 0; i < size / 8; i++)
        if (w[i] >= old && w[i] < old + size)
            w[i] = w[i] - old + nw;
    *(int *)(nw + TCB_MULTIPLE_THREADS) = 1;
    if (f)
        multi_threaded(old);
    /* the shim's own per-thread state: the fiber counts into its carrier's
     * block and knows itself */
    FERRY_TLS_IN(nw, ferry_thr)->blk = FERRY_THR->blk;
    *FERRY_TLS_IN(nw, agg_carrier) = agg_carrier;
    *FERRY_TLS_IN(nw, agg_self) = f;
    if (f && agg_carrier)
        ferry_catchall_adopt(nw, agg_carrier->tp);
    return tcb;
}

static char *stack_get(struct agg_carrier *c, size_t size)
{
    for (unsigned i = 0; c && i < c->nstack_cache; i++)
        if (c->stack_cache_size[i] == size) {
            char *s = c->stack_cache[i];
            c->nstack_cache--;
            c->stack_cache[i] = c->stack_cache[c->nstack_cache];
            c->stack_cache_size[i] = c->stack_cache_size[c->nstack_cache];
            return s;
        }
    /* system calls a carrier makes for its fibers: crossings too */
    if (c)
        agg_stat(c->g, AGG_ST(crossings), 2);
    long p = ferry_raw6(SYS_mmap, 0, (long)size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if ((unsigned long)p > -4096UL)
        return 0;
    ferry_raw3(SYS_mprotect, p, PAGE, PROT_NONE);  /* the guard page: overflow faults */
    return (char *)p;
}

static void stack_put(struct agg_carrier *c, char *s, size_t size)
{
    if (c && c->nstack_cache < AGG_STACK_CACHE) {
        c->stack_cache[c->nstack_cache] = s;
        c->stack_cache_size[c->nstack_cache++] = size;
        return;
    }
    if (c)
        agg_stat(c->g, AGG_ST(crossings), 1);
    agg_usermem_changed();  /* the program's code ran on it */
    ferry_raw2(SYS_munmap, s, size);
}

static void fiber_main(void *arg)
{
    struct agg_fiber *f = arg;
    agg_creds_follow(&f->carrier->creds_seen);
    f->fn(f->arg);
    /* C++ thread_local destructors registered by this fiber */
    f->busy = 1;
    if (__call_tls_dtors)
        __call_tls_dtors();
    agg_fiber_finish(f);
}

void agg_ctx_start(struct agg_ctx *ctx, void *top, void (*fn)(void *), void *arg)
{
    unsigned long *stop = (unsigned long *)((uintptr_t)top & ~(uintptr_t)15);
    /* what ferry_agg_switch pops: control words, r15..r12, rbx, rbp, return */
    stop[-1] = (unsigned long)ferry_agg_fiber_entry;
    stop[-2] = 0;                               /* rbp */
    stop[-3] = 0;                               /* rbx */
    stop[-4] = (unsigned long)arg;              /* r12 */
    stop[-5] = (unsigned long)fn;               /* r13 */
    stop[-6] = 0;                               /* r14 */
    stop[-7] = 0;                               /* r15 */
    stop[-8] = 0x1f80UL | (0x37fUL << 32);      /* default MXCSR, x87 control word */
    ctx->rsp = &stop[-8];
}

/* A mapping for a context that runs program code: a guard page, the stack,
 * `extra` bytes just under the static TLS, and the thread block at the top
 * (its TCB at *tcb).  `c` caches mappings of one size. */
static char *block_new(struct agg_carrier *c, size_t stack, size_t extra, size_t *size,
                       uintptr_t *tcb, uintptr_t *tls_low)
{
    agg_fsgsbase_detect();
    if (!_dl_allocate_tls || !_dl_deallocate_tls || !_dl_get_tls_static_info)
        return 0;
    size_t tls_size, tls_align;
    _dl_get_tls_static_info(&tls_size, &tls_align);
    if (tls_align < 64)
        tls_align = 64;
    size_t tcb_size = pthread_size();
    extra += tls_size + tls_align + 64;
    *size = ((stack + extra + PAGE - 1) & ~(PAGE - 1)) + PAGE;
    char *map = stack_get(c, *size);
    if (!map)
        return 0;
    uintptr_t top = (uintptr_t)map + *size;
    *tcb = (top - tcb_size) & ~(uintptr_t)(tls_align - 1);
    *tls_low = *tcb + tcb_size - tls_size;
    return map;
}

int agg_fiber_new(struct agg_carrier *c, struct agg_fiber **out, void (*fn)(void *), void *arg)
{
    size_t size;
    uintptr_t tcb, tls_low;
    char *map = block_new(c, c->g->cfg.fiber_stack, sizeof(struct agg_fiber), &size, &tcb, &tls_low);
    if (!map)
        return _dl_allocate_tls ? -ENOMEM : -ENOSYS;
    struct agg_fiber *f = (struct agg_fiber *)((tls_low - sizeof(struct agg_fiber)) & ~(uintptr_t)63);
    ferry_memset(f, 0, sizeof(*f));
    f->stack = map;
    f->stack_size = size;
    f->stack_lo = map + PAGE;     /* past the guard */
    f->stack_top = map + size;
    f->tcb = new_tcb(f, (void *)tcb);
    if (!f->tcb) {
        stack_put(c, map, size);
        return -ENOMEM;
    }
    f->carrier = c;
    f->fn = fn;
    f->arg = arg;
    agg_ctx_start(&f->ctx, f, fiber_main, f);
    f->ctx.fsbase = (unsigned long)f->tcb;
    agg_count_fiber(c);
    agg_stat(c->g, AGG_ST(fibers), 1);
    if (out)
        *out = f;
    return 0;
}

/* A thread of the shim's own that may end up running program code (a
 * carrier): its stack and a thread block like a fiber's, with no fiber in
 * it.  Returns the mapping (its stack's top is the thread block's bottom),
 * 0 when out of memory or when ld.so cannot make thread blocks. */
char *agg_thread_block(size_t stack, size_t *size, unsigned long *tp, char **stack_top)
{
    uintptr_t tcb, tls_low;
    char *map = block_new(0, stack, 0, size, &tcb, &tls_low);
    if (!map)
        return 0;
    if (!new_tcb(0, (void *)tcb)) {
        ferry_raw2(SYS_munmap, map, *size);
        return 0;
    }
    FERRY_TLS_IN(tcb, ferry_thr)->blk = 0;  /* it counts into a block of its own, if ever */
    *tp = tcb;
    *stack_top = (char *)(tls_low & ~(uintptr_t)63);
    return map;
}

/* On the carrier's scheduler context, once nobody will look at f again. */
void agg_fiber_free(struct agg_carrier *c, struct agg_fiber *f)
{
    char *map = f->stack;
    size_t size = f->stack_size;
    _dl_deallocate_tls(f->tcb, 0);  /* its dtv; the block is the mapping's */
    stack_put(c, map, size);
}

void agg_stacks_release(struct agg_carrier *c)
{
    agg_usermem_changed();
    while (c->nstack_cache) {
        c->nstack_cache--;
        ferry_raw2(SYS_munmap, c->stack_cache[c->nstack_cache], c->stack_cache_size[c->nstack_cache]);
    }
}
