/* The program's seccomp filters, copied and run by the shim (sandbox.h).
 *
 * The copies are the program's own classic BPF, run here on the seccomp
 * data of each call the shim would make: the same program, the same data,
 * the same action as the kernel's.  Filters are each thread's and a thread
 * inherits its creator's; the copies are the process's, every filter any
 * thread installed: a thread without one has its shim's calls refused
 * where the kernel would have let them through, never the other way.  What
 * the shim cannot copy (no room, or an earlier filter refuses the mapping)
 * makes every own call refused from then on. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "catchall.h"
#include "engine.h"
#include "raw.h"
#include "sandbox.h"
#include "util.h"

struct kept {
    struct kept *next;   /* the one installed before */
    size_t size;         /* of the mapping */
    unsigned len;
    struct sock_filter insns[];
};

int ferry_sandbox_on FERRY_HOT;
int ferry_sandbox_inherited;
static struct kept *filters;   /* the newest first */
static int strict, unknown;

void ferry_sandbox_look_inherited(void)
{
    /* a process in strict mode cannot exec: never here */
    ferry_sandbox_inherited = ferry_raw1(SYS_prctl, PR_GET_SECCOMP) == SECCOMP_MODE_FILTER;
}

/* what ferry_sandbox_before hands over besides a copy */
static char strict_mark, unknown_mark;

#define SECCOMP_DATA_WORDS (sizeof(struct seccomp_data) / 4)

/* The filter's verdict on `data`.  The kernel checked the program when it
 * took it (jumps forward and in range, loads aligned within the data,
 * scratch slots below 16); what it would not have taken is answered 0, the
 * action that kills. */
static uint32_t run(const struct kept *k, const uint32_t *data)
{
    uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = {0};
    for (unsigned pc = 0; pc < k->len; pc++) {
        const struct sock_filter *in = &k->insns[pc];
        uint32_t K = in->k;
        uint32_t src = BPF_SRC(in->code) == BPF_X ? X : K;
        switch (in->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (K % 4 || K / 4 >= SECCOMP_DATA_WORDS)
                return 0;
            A = data[K / 4];
            break;
        case BPF_LD | BPF_W | BPF_LEN:
            A = sizeof(struct seccomp_data);
            break;
        case BPF_LDX | BPF_W | BPF_LEN:
            X = sizeof(struct seccomp_data);
            break;
        case BPF_LD | BPF_IMM:
            A = K;
            break;
        case BPF_LDX | BPF_IMM:
            X = K;
            break;
        case BPF_LD | BPF_MEM:
        case BPF_LDX | BPF_MEM:
        case BPF_ST:
        case BPF_STX:
            if (K >= BPF_MEMWORDS)
                return 0;
            if (in->code == (BPF_LD | BPF_MEM))
                A = M[K];
            else if (in->code == (BPF_LDX | BPF_MEM))
                X = M[K];
            else
                M[K] = in->code == BPF_ST ? A : X;
            break;
        case BPF_ALU | BPF_NEG:
            A = -A;
            break;
        case BPF_MISC | BPF_TAX:
            X = A;
            break;
        case BPF_MISC | BPF_TXA:
            A = X;
            break;
        case BPF_RET | BPF_K:
            return K;
        case BPF_RET | BPF_A:
            return A;
        case BPF_JMP | BPF_JA:
            pc += K;
            break;
        default:
            if (BPF_CLASS(in->code) == BPF_JMP) {
                int taken;
                switch (BPF_OP(in->code)) {
                case BPF_JEQ: taken = A == src; break;
                case BPF_JGT: taken = A > src; break;
                case BPF_JGE: taken = A >= src; break;
                case BPF_JSET: taken = (A & src) != 0; break;
                default: return 0;
                }
                pc += taken ? in->jt : in->jf;
                break;
            }
            if (BPF_CLASS(in->code) != BPF_ALU)
                return 0;
            switch (BPF_OP(in->code)) {
            case BPF_ADD: A += src; break;
            case BPF_SUB: A -= src; break;
            case BPF_MUL: A *= src; break;
            case BPF_DIV: if (!src) return 0; A /= src; break;
            case BPF_MOD: if (!src) return 0; A %= src; break;
            case BPF_AND: A &= src; break;
            case BPF_OR: A |= src; break;
            case BPF_XOR: A ^= src; break;
            case BPF_LSH: A = src < 32 ? A << src : 0; break;
            case BPF_RSH: A = src < 32 ? A >> src : 0; break;
            default: return 0;
            }
        }
    }
    return 0;
}

/* The verdict of the filters in force and of `extra` (one about to be). */
static int lets_with(const struct kept *extra, long nr, long a, long b, long c, long d, long e, long f)
{
    if (unknown)
        return 0;
    if (strict && nr != SYS_read && nr != SYS_write && nr != SYS_exit && nr != SYS_rt_sigreturn)
        return 0;
    /* a call from the shim's text: no address a filter singles out */
    uint64_t ip = (uint64_t)(uintptr_t)&ferry_sandbox_lets;
    const long args[6] = {a, b, c, d, e, f};
    uint32_t data[SECCOMP_DATA_WORDS];
    data[0] = (uint32_t)nr;
    data[1] = AUDIT_ARCH_X86_64;
    data[2] = (uint32_t)ip;
    data[3] = (uint32_t)(ip >> 32);
    for (int i = 0; i < 6; i++) {
        data[4 + 2 * i] = (uint32_t)(uint64_t)args[i];
        data[5 + 2 * i] = (uint32_t)((uint64_t)args[i] >> 32);
    }
    const struct kept *k = extra ? extra : __atomic_load_n(&filters, __ATOMIC_ACQUIRE);
    for (; k; k = k == extra ? __atomic_load_n(&filters, __ATOMIC_ACQUIRE) : k->next) {
        uint32_t action = run(k, data) & SECCOMP_RET_ACTION_FULL;
        if (action != SECCOMP_RET_ALLOW && action != SECCOMP_RET_LOG)
            return 0;
    }
    return 1;
}

int ferry_sandbox_lets(long nr, long a, long b, long c, long d, long e, long f)
{
    if (!__atomic_load_n(&ferry_sandbox_on, __ATOMIC_ACQUIRE))
        return 1;
    return lets_with(0, nr, a, b, c, d, e, f);
}

/* What must be done while the shim's calls are still let through: the
 * engine's ticks and the catch-all's caught calls end in rt_sigreturn (the
 * catch-all lets this thread's calls, and its later threads', reach the
 * kernel bare, as they do natively), and in strict mode the engine's
 * workers must look for work unwoken. */
static void prepare(const struct kept *extra, int to_strict)
{
    if (to_strict || !lets_with(extra, SYS_rt_sigreturn, 0, 0, 0, 0, 0, 0)) {
        agg_tick_stop_all();
        ferry_catchall_detach();
    }
    if (to_strict)
        agg_workers_poll();
}

int ferry_tsc_forbidden FERRY_HOT;
static char tsc_mark;

void *ferry_sandbox_before(const struct ferry_regs *r)
{
    unsigned long op;
    const void *prog;
    if (r->rax == SYS_prctl && r->rdi == PR_SET_TSC && r->rsi == PR_TSC_SIGSEGV) {
        /* before: the kernel turns it off on its way back */
        __atomic_store_n(&ferry_tsc_forbidden, 1, __ATOMIC_RELAXED);
        return &tsc_mark;
    }
    if (r->rax == SYS_prctl && r->rdi == PR_SET_TSC && r->rsi == PR_TSC_ENABLE) {
        __atomic_store_n(&ferry_tsc_forbidden, 0, __ATOMIC_RELAXED);
        return 0;
    }
    if (r->rax == SYS_seccomp) {
        op = (unsigned long)r->rdi;
        prog = (const void *)r->rdx;
    } else if (r->rax == SYS_prctl && r->rdi == PR_SET_SECCOMP) {
        op = r->rsi == SECCOMP_MODE_STRICT ? SECCOMP_SET_MODE_STRICT
             : r->rsi == SECCOMP_MODE_FILTER ? SECCOMP_SET_MODE_FILTER : ~0UL;
        prog = (const void *)r->rdx;
    } else {
        return 0;
    }
    if (op == SECCOMP_SET_MODE_STRICT) {
        prepare(0, 1);
        __atomic_store_n(&ferry_tsc_forbidden, 1, __ATOMIC_RELAXED);  /* strict mode turns it off too */
        return &strict_mark;
    }
    if (op != SECCOMP_SET_MODE_FILTER)
        return 0;
    /* a bad pointer or length: the kernel refuses the call too */
    struct sock_fprog fp;
    if (ferry_safe_read(&fp, prog, sizeof(fp)) != sizeof(fp) || !fp.len || fp.len > BPF_MAXINSNS)
        return 0;
    size_t size = (sizeof(struct kept) + fp.len * sizeof(struct sock_filter) + 4095) & ~(size_t)4095;
    long p = ferry_raw6(SYS_mmap, 0, (long)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (IS_ERR(p)) {
        prepare(0, 1);
        return &unknown_mark;
    }
    struct kept *k = (struct kept *)p;
    k->size = size;
    k->len = fp.len;
    size_t n = fp.len * sizeof(struct sock_filter);
    if (ferry_safe_read(k->insns, fp.filter, n) != (long)n) {
        ferry_raw2(SYS_munmap, p, size);
        return 0;
    }
    k->next = 0;
    prepare(k, 0);
    return k;
}

void ferry_sandbox_after(void *copy, long nr, unsigned long flags, long result)
{
    if (!copy)
        return;
    /* a new listener's descriptor is a success too; a thread that could
     * not be synchronized is named by a positive result, a failure */
    int took = result == 0 || (result > 0 && nr == SYS_seccomp && (flags & SECCOMP_FILTER_FLAG_NEW_LISTENER));
    if (took)
        agg_threads_confined(nr == SYS_seccomp && (flags & SECCOMP_FILTER_FLAG_TSYNC));
    if (copy == &tsc_mark) {
        if (!took)
            __atomic_store_n(&ferry_tsc_forbidden, 0, __ATOMIC_RELAXED);
        return;
    }
    if (copy == &strict_mark && !took)
        __atomic_store_n(&ferry_tsc_forbidden, 0, __ATOMIC_RELAXED);
    if (copy == &strict_mark || copy == &unknown_mark) {
        if (!took)
            return;
        if (copy == &strict_mark)
            strict = 1;
        else
            unknown = 1;
    } else {
        struct kept *k = copy;
        if (!took) {
            ferry_raw2(SYS_munmap, (long)k, k->size);
            return;
        }
        k->next = __atomic_load_n(&filters, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&filters, &k->next, k, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
    }
    __atomic_store_n(&ferry_sandbox_on, 1, __ATOMIC_RELEASE);
}
