/* System calls made by the shim itself.
 *
 * They run from the shim's own text, which is never rewritten, so they can
 * never re-enter the shim; nothing here touches errno or any libc state.
 */
#ifndef FERRY_RAW_H
#define FERRY_RAW_H

static inline long ferry_raw6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

#define ferry_raw0(n) ferry_raw6((n), 0, 0, 0, 0, 0, 0)
#define ferry_raw1(n, a) ferry_raw6((n), (long)(a), 0, 0, 0, 0, 0)
#define ferry_raw2(n, a, b) ferry_raw6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define ferry_raw3(n, a, b, c) ferry_raw6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define ferry_raw4(n, a, b, c, d) \
    ferry_raw6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

#endif
