/* Small freestanding helpers: the shim links no libc code on its paths, so
 * that nothing it runs can reach a rewritten syscall site or take a libc lock. */
#ifndef FERRY_UTIL_H
#define FERRY_UTIL_H

#include <stddef.h>
#include <stdint.h>

void *ferry_memset(void *dst, int c, size_t n);
void *ferry_memcpy(void *dst, const void *src, size_t n);
size_t ferry_strlen(const char *s);
int ferry_memeq(const void *a, const void *b, size_t n);

/* An append-only text buffer that never overflows (it truncates and says so
 * through `overflow`). */
struct ferry_buf {
    char *data;
    size_t len;
    size_t cap;
    int overflow;
};

void ferry_buf_str(struct ferry_buf *b, const char *s);
void ferry_buf_u64(struct ferry_buf *b, uint64_t v);
void ferry_buf_i64(struct ferry_buf *b, int64_t v);
/* A JSON string literal, quotes included. */
void ferry_buf_json_str(struct ferry_buf *b, const char *s);

#endif
