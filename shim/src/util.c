#include "util.h"

void *ferry_memset(void *dst, int c, size_t n)
{
    unsigned char *d = dst;
    while (n--)
        *d++ = (unsigned char)c;
    return dst;
}

void *ferry_memcpy(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}

size_t ferry_strlen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

int ferry_memeq(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return 0;
    return 1;
}

/* gcc may emit calls to these even in freestanding code; keep them inside the
 * shim so they never bind to, or interpose on, the program's copies. */
__attribute__((visibility("hidden"))) void *memset(void *dst, int c, size_t n)
{
    return ferry_memset(dst, c, n);
}

__attribute__((visibility("hidden"))) void *memcpy(void *dst, const void *src, size_t n)
{
    return ferry_memcpy(dst, src, n);
}

static void buf_putc(struct ferry_buf *b, char c)
{
    if (b->len + 1 < b->cap)
        b->data[b->len++] = c;
    else
        b->overflow = 1;
}

void ferry_buf_str(struct ferry_buf *b, const char *s)
{
    while (*s)
        buf_putc(b, *s++);
}

void ferry_buf_u64(struct ferry_buf *b, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        buf_putc(b, tmp[--n]);
}

void ferry_buf_i64(struct ferry_buf *b, int64_t v)
{
    if (v < 0) {
        buf_putc(b, '-');
        ferry_buf_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        ferry_buf_u64(b, (uint64_t)v);
    }
}

void ferry_buf_json_str(struct ferry_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, (char)*p);
        } else if (*p < 0x20) {
            ferry_buf_str(b, "\\u00");
            buf_putc(b, hex[*p >> 4]);
            buf_putc(b, hex[*p & 15]);
        } else {
            buf_putc(b, (char)*p);
        }
    }
    buf_putc(b, '"');
}
