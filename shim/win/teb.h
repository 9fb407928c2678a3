/* The calling thread's TEB, read and written at an offset through %gs.
 * ferry.dll keeps its per-thread words in the TEB's inline TLS slots (the
 * trampolines read them there directly), and the fiber engine swaps two of
 * a thread's own fields per fiber (wagg_fiber.c). */
#ifndef FERRY_TEB_H
#define FERRY_TEB_H

#include <stdint.h>

#define TEB_LAST_ERROR 0x68       /* LastErrorValue (GetLastError) */
#define TEB_TLS_SLOTS 0x1480      /* TlsSlots[64]: inline TLS slot i at + 8 * i */
#define TEB_WINSOCK_DATA 0x1738   /* WinSockData: ws2_32's per-thread data */

static inline uint64_t ferry_teb_get(uint64_t off)
{
    uint64_t v;
    __asm__ volatile("movq %%gs:(%1), %0" : "=r"(v) : "r"(off));
    return v;
}

static inline void ferry_teb_set(uint64_t off, uint64_t v)
{
    __asm__ volatile("movq %0, %%gs:(%1)" : : "r"(v), "r"(off) : "memory");
}

static inline uint32_t ferry_teb_get32(uint64_t off)
{
    uint32_t v;
    __asm__ volatile("movl %%gs:(%1), %0" : "=r"(v) : "r"(off));
    return v;
}

static inline void ferry_teb_set32(uint64_t off, uint32_t v)
{
    __asm__ volatile("movl %0, %%gs:(%1)" : : "r"(v), "r"(off) : "memory");
}

#endif
