/* The TSC rate is the machine's: no process should spin to learn it.  The
 * first enabled process of a run finds it (the kernel's own conversion, or
 * the measurement kept for this boot in the image cache, or a measurement
 * of 1 ms kept there for the next runs) and hands it down to every later
 * one as FERRY_TSC, one of the run's settings. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "raw.h"
#include "store.h"
#include "tscrate.h"
#include "util.h"


static int parse_rate(const char *s, uint64_t *tsc, uint64_t *ns)
{
    uint64_t t, n;
    if (!ferry_parse_pair(s, &t, &n) || !t || !n)
        return 0;
    *tsc = t;
    *ns = n;
    return 1;
}

/* From the first page of a perf event's mapping (what perf uses to turn TSC
 * into time): ns = ticks * mult >> shift, valid when cap_user_time says so
 * (not under a hypervisor clock that the TSC does not follow). */
static int kernel_rate(uint64_t *tsc, uint64_t *ns)
{
    struct perf_event_attr attr;
    ferry_memset(&attr, 0, sizeof(attr));
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_DUMMY;
    attr.size = sizeof(attr);
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    long fd = ferry_raw6(SYS_perf_event_open, (long)&attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    long p = ferry_raw6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ferry_raw1(SYS_close, fd);
    if (IS_ERR(p))
        return 0;
    const struct perf_event_mmap_page *pg = (const void *)p;
    int ok = pg->cap_user_time && pg->time_mult && pg->time_shift < 63;
    if (ok) {
        *tsc = 1ULL << pg->time_shift;
        *ns = pg->time_mult;
    }
    ferry_raw2(SYS_munmap, p, 4096);
    return ok;
}

/* `<cache>/tsc-<boot id>`: a rate measured since this machine booted. */
static int rate_path(const char *cache_root, char *out, size_t cap)
{
    if (!cache_root || !cache_root[0])
        return -ENOENT;
    char boot[40];
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, "/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return (int)fd;
    long n = ferry_raw3(SYS_read, fd, boot, 36);
    ferry_raw1(SYS_close, fd);
    if (n != 36)
        return -EIO;
    boot[36] = 0;
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, cache_root);
    ferry_buf_str(&b, "/tsc-");
    ferry_buf_str(&b, boot);
    out[b.overflow ? 0 : b.len] = 0;
    return b.overflow ? -ENAMETOOLONG : 0;
}

static int kept_rate(const char *path, uint64_t *tsc, uint64_t *ns)
{
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    char buf[48];
    struct stat st;
    long n = -1;
    /* the user's own, and nobody else's to change */
    if (ferry_raw2(SYS_fstat, fd, &st) == 0 && st.st_uid == (uid_t)ferry_raw0(SYS_geteuid) &&
        !(st.st_mode & 022))
        n = ferry_raw3(SYS_read, fd, buf, sizeof(buf) - 1);
    ferry_raw1(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return parse_rate(buf, tsc, ns);
}

static void keep_rate(const char *path, uint64_t tsc, uint64_t ns)
{
    char tmp[2200], text[48];
    struct ferry_buf b = {tmp, 0, sizeof(tmp), 0};
    ferry_buf_str(&b, path);
    ferry_buf_str(&b, ".tmp");
    ferry_buf_i64(&b, ferry_raw0(SYS_getpid));
    if (b.overflow)
        return;
    tmp[b.len] = 0;
    struct ferry_buf t = {text, 0, sizeof(text), 0};
    ferry_buf_u64(&t, tsc);
    ferry_buf_str(&t, ":");
    ferry_buf_u64(&t, ns);
    ferry_buf_str(&t, "\n");
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         0644);
    if (fd < 0)
        return;
    long w = ferry_raw3(SYS_write, fd, text, t.len);
    ferry_raw1(SYS_close, fd);
    if (w == (long)t.len && !t.overflow)
        ferry_raw4(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path);
    else
        ferry_raw3(SYS_unlinkat, AT_FDCWD, tmp, 0);
}

void ferry_tsc_rate(const char *handed_down, const char *cache_root, uint64_t *tsc, uint64_t *ns)
{
    if ((handed_down && parse_rate(handed_down, tsc, ns)) || kernel_rate(tsc, ns))
        return;
    char path[2100];
    int have_path = rate_path(cache_root, path, sizeof(path)) == 0;
    if (have_path && kept_rate(path, tsc, ns))
        return;
    uint64_t n0 = ferry_mono_ns(), t0 = ferry_rdtsc(), n1;
    do
        n1 = ferry_mono_ns();
    while (n1 - n0 < 1000000);  /* 1 ms */
    *tsc = ferry_rdtsc() - t0;
    *ns = n1 - n0;
    if (have_path)
        keep_rate(path, *tsc, *ns);
}
