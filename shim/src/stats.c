/* Writing the counts as JSON (the schema is documented in docs/stats.md). */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "ferry.h"
#include "raw.h"
#include "shim.h"
#include "util.h"

#define STATS_BUF_SIZE (64 * 1024)
#define PATH_BUF_SIZE 4096

/* Expand "%p" to the pid and "%%" to "%"; anything else is copied. */
static int expand_path(const char *pattern, char *out, size_t cap)
{
    struct ferry_buf b = {out, 0, cap, 0};
    long pid = ferry_raw0(SYS_getpid);
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            ferry_buf_i64(&b, pid);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            ferry_buf_str(&b, "%");
            p++;
        } else {
            char one[2] = {*p, 0};
            ferry_buf_str(&b, one);
        }
    }
    out[b.len] = 0;
    return b.overflow ? -1 : 0;
}

static void format_stats(struct ferry_buf *b, const struct ferry_counts *c)
{
    char exe[PATH_BUF_SIZE];
    long n = ferry_raw3(SYS_readlink, "/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = 0;

    ferry_buf_str(b, "{\"format\": \"ferry-stats\", \"version\": 1, \"pid\": ");
    ferry_buf_i64(b, ferry_raw0(SYS_getpid));
    ferry_buf_str(b, ", \"ppid\": ");
    ferry_buf_i64(b, ferry_raw0(SYS_getppid));
    ferry_buf_str(b, ", \"exe\": ");
    ferry_buf_json_str(b, exe);
    ferry_buf_str(b, ", \"modules\": ");
    ferry_buf_u64(b, c->modules);
    ferry_buf_str(b, ", \"invalid\": ");
    ferry_buf_u64(b, c->invalid);
    ferry_buf_str(b, ", \"calls\": {");
    int first = 1;
    for (int i = 0; i < FERRY_NR_MAX; i++) {
        if (!c->calls[i])
            continue;
        ferry_buf_str(b, first ? "\"" : ", \"");
        ferry_buf_i64(b, i);
        ferry_buf_str(b, "\": ");
        ferry_buf_u64(b, c->calls[i]);
        first = 0;
    }
    ferry_buf_str(b, "}}\n");
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        long w = ferry_raw3(SYS_write, fd, p, n);
        if (w == -4 /* EINTR */)
            continue;
        if (w < 0)
            return (int)w;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

__attribute__((visibility("default"))) int ferry_stats_write(const char *pattern)
{
    char path[PATH_BUF_SIZE], tmp[PATH_BUF_SIZE + 32];
    if (!pattern || !*pattern)
        return -22;
    if (expand_path(pattern, path, sizeof(path)) < 0)
        return -36; /* ENAMETOOLONG */

    struct ferry_buf t = {tmp, 0, sizeof(tmp), 0};
    ferry_buf_str(&t, path);
    ferry_buf_str(&t, ".tmp.");
    ferry_buf_i64(&t, ferry_raw0(SYS_gettid));
    tmp[t.len] = 0;

    /* The counts and the text are large for a thread's stack (a vfork child
     * or a small pthread stack may be running this), so map them. */
    long mem = ferry_raw6(SYS_mmap, 0, sizeof(struct ferry_counts) + STATS_BUF_SIZE,
                          PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem < 0 && mem > -4096)
        return (int)mem;
    struct ferry_counts *c = (struct ferry_counts *)mem;
    char *text = (char *)mem + sizeof(*c);
    int rc = ferry_counts_snapshot(c);
    struct ferry_buf b = {text, 0, STATS_BUF_SIZE, 0};
    if (rc == 0) {
        format_stats(&b, c);
        rc = b.overflow ? -27 /* EFBIG */ : 0;
    }
    if (rc == 0) {
        long fd = ferry_raw4(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                             0644);
        if (fd < 0) {
            rc = (int)fd;
        } else {
            rc = write_all((int)fd, text, b.len);
            ferry_raw1(SYS_close, fd);
            if (rc == 0)
                rc = (int)ferry_raw2(SYS_rename, tmp, path);
            if (rc < 0)
                ferry_raw1(SYS_unlink, tmp);
        }
    }
    ferry_raw2(SYS_munmap, mem, sizeof(struct ferry_counts) + STATS_BUF_SIZE);
    return rc;
}
