/* The patched text of a module, shared by every process that patches it
 * from the same plan with its trampolines at the same distance (FX!32's
 * translated images, used at load time).
 *
 * The copy is the module's file byte for byte but the windows, kept beside
 * the plan as `<plan>.<plan inode>-<plan mtime>@<distance>`: a new plan is a
 * new file (atomic replace), so a copy never outlives its plan.  It is made
 * by the first process that needs it (written to a temporary name, synced,
 * renamed) and mapped private and read-only over the module's executable
 * segments: the pages are the page cache's, clean, the same in every process,
 * where writing the windows made private copies of the pages in each.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "plantext.h"
#include "raw.h"
#include "util.h"

#define PAGE 4096UL

static uint64_t page_down(uint64_t n) { return n & ~(PAGE - 1); }
static uint64_t page_up(uint64_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

static int text_name(char *out, size_t cap, const struct ferry_plantext_key *k, int64_t delta)
{
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, k->plan_path);
    ferry_buf_str(&b, ".");
    ferry_buf_u64(&b, k->plan.st_ino);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, (uint64_t)k->plan.st_mtim.tv_sec * 1000000000ULL +
                          (uint64_t)k->plan.st_mtim.tv_nsec);
    ferry_buf_str(&b, "@");
    ferry_buf_i64(&b, delta);
    out[b.overflow ? 0 : b.len] = 0;
    return b.overflow ? -ENAMETOOLONG : 0;
}

/* Text that ld.so relocated (DT_TEXTREL) is not the file's: never shared. */
static int has_textrel(uint64_t base, const ElfW(Phdr) *phdr, int phnum)
{
    for (int i = 0; i < phnum; i++) {
        if (phdr[i].p_type != PT_DYNAMIC)
            continue;
        for (const ElfW(Dyn) *d = (const void *)(base + phdr[i].p_vaddr); d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
                return 1;
    }
    return 0;
}

struct put_ctx {
    long fd;
    const ElfW(Phdr) *phdr;
    int phnum;
};

static int put_window(uint64_t vaddr, const unsigned char *bytes, uint32_t len, void *data)
{
    struct put_ctx *c = data;
    for (int i = 0; i < c->phnum; i++) {
        const ElfW(Phdr) *ph = &c->phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || vaddr < ph->p_vaddr ||
            vaddr + len > ph->p_vaddr + ph->p_filesz)
            continue;
        uint64_t off = vaddr - ph->p_vaddr + ph->p_offset;
        return ferry_raw4(SYS_pwrite64, c->fd, bytes, len, off) == (long)len ? 0 : -EIO;
    }
    return -EINVAL;
}

static int copy_file(long dst, long src, uint64_t size)
{
    uint64_t done = 0;
    while (done < size) {
        long n = ferry_raw6(SYS_copy_file_range, src, 0, dst, 0, (long)(size - done), 0);
        if (n == -ENOSYS || n == -EXDEV || n == -EINVAL)
            n = ferry_raw4(SYS_sendfile, dst, src, 0, (long)(size - done));
        if (n <= 0)
            return n < 0 ? (int)n : -EIO;
        done += (uint64_t)n;
    }
    return 0;
}

/* File `name` made whole by `fill` under a temporary name, synced, then
 * renamed: no process ever maps a half-written one.  Its descriptor, or
 * -errno. */
static long make_file(const char *name, int (*fill)(long fd, void *ctx), void *ctx)
{
    char tmp[2800];
    struct ferry_buf b = {tmp, 0, sizeof(tmp), 0};
    ferry_buf_str(&b, name);
    ferry_buf_str(&b, ".tmp");
    ferry_buf_i64(&b, ferry_raw0(SYS_getpid));
    if (b.overflow)
        return -ENAMETOOLONG;
    tmp[b.len] = 0;
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         0644);
    if (fd < 0)
        return fd;
    int rc = fill(fd, ctx);
    /* a copy cut short by a crash must never be run: durable before named */
    if (!rc)
        rc = (int)ferry_raw1(SYS_fdatasync, fd);
    if (!rc)
        rc = (int)ferry_raw4(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, name);
    if (rc) {
        ferry_raw1(SYS_close, fd);
        ferry_raw3(SYS_unlinkat, AT_FDCWD, tmp, 0);
        return rc;
    }
    return fd;
}

struct copy_ctx {
    const struct ferry_plantext_key *k;
    const struct windows *w;
    const ElfW(Phdr) *phdr;
    int phnum;
};

/* The module's file with the windows in place. */
static int fill_copy(long fd, void *data)
{
    const struct copy_ctx *x = data;
    const struct ferry_plantext_key *k = x->k;
    long src = ferry_raw4(SYS_openat, AT_FDCWD, k->module_path, O_RDONLY | O_CLOEXEC, 0);
    struct stat st;
    int rc = src < 0 ? (int)src : 0;
    /* the file the plan is for, still: its identity is in the plan's name */
    if (!rc && (ferry_raw2(SYS_fstat, src, &st) != 0 || st.st_ino != k->module.st_ino ||
                st.st_dev != k->module.st_dev || st.st_size != k->module.st_size ||
                st.st_mtim.tv_sec != k->module.st_mtim.tv_sec ||
                st.st_mtim.tv_nsec != k->module.st_mtim.tv_nsec))
        rc = -ESTALE;
    if (!rc)
        rc = copy_file((long)fd, src, (uint64_t)st.st_size);
    if (src >= 0)
        ferry_raw1(SYS_close, src);
    struct put_ctx c = {fd, x->phdr, x->phnum};
    if (!rc)
        rc = ferry_windows_each(x->w, put_window, &c);
    return rc;
}

/* The file at `name`, if it is one this process may trust: made by the
 * plan's owner, writable by nobody else, `size` bytes long. */
static long open_trusted(const char *name, const struct ferry_plantext_key *k, uint64_t size)
{
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return fd;
    struct stat st;
    if (ferry_raw2(SYS_fstat, fd, &st) != 0 || st.st_uid != k->plan.st_uid || (st.st_mode & 022) ||
        (uint64_t)st.st_size != size || !S_ISREG(st.st_mode)) {
        ferry_raw1(SYS_close, fd);
        return -ESTALE;
    }
    return fd;
}

/* Segment `ph` from the copy: mapped elsewhere first, then moved over the
 * original in one step, so that a failure leaves the original in place. */
static int map_segment(long fd, uint64_t base, const ElfW(Phdr) *ph)
{
    uint64_t lo = page_down(base + ph->p_vaddr);
    uint64_t len = page_up(base + ph->p_vaddr + ph->p_filesz) - lo;
    uint64_t off = page_down(ph->p_offset);
    if ((ph->p_vaddr & (PAGE - 1)) != (ph->p_offset & (PAGE - 1)))
        return -EINVAL;
    long p = ferry_raw6(SYS_mmap, 0, (long)len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, (long)off);
    if (IS_ERR(p))
        return (int)p;
    long q = ferry_raw6(SYS_mremap, p, (long)len, (long)len, MREMAP_MAYMOVE | MREMAP_FIXED, (long)lo, 0);
    if (IS_ERR(q)) {
        ferry_raw2(SYS_munmap, p, len);
        return (int)q;
    }
    return 0;
}

int ferry_plantext_map(const struct ferry_plantext_key *k, int64_t delta, const struct windows *w,
                       uint64_t base, const ElfW(Phdr) *phdr, int phnum)
{
    if (has_textrel(base, phdr, phnum))
        return -EINVAL;
    char name[2700];
    if (text_name(name, sizeof(name), k, delta))
        return -ENAMETOOLONG;
    long fd = open_trusted(name, k, (uint64_t)k->module.st_size);
    struct copy_ctx x = {k, w, phdr, phnum};
    if (fd == -ENOENT)
        fd = make_file(name, fill_copy, &x);
    if (fd < 0)
        return (int)fd;
    int rc = 0;
    for (int i = 0; i < phnum && !rc; i++)
        if (phdr[i].p_type == PT_LOAD && (phdr[i].p_flags & PF_X))
            rc = map_segment(fd, base, &phdr[i]);
    ferry_raw1(SYS_close, fd);
    return rc;
}

/* The trampolines, as placed `delta` bytes from where the rewritten file
 * has them, and the control block after them, beside the copy: `<copy's
 * name>.tramp-ctl` (`.tramp` held the trampolines alone). */
static int tramp_name(char *out, size_t cap, const struct ferry_plantext_key *k, int64_t delta)
{
    if (text_name(out, cap - 12, k, delta))
        return -ENAMETOOLONG;
    size_t n = ferry_strlen(out);
    ferry_memcpy(out + n, ".tramp-ctl", 11);
    return 0;
}

int ferry_plantext_tramp_map(const struct ferry_plantext_key *k, int64_t delta, uint64_t at, uint64_t size,
                             uint64_t ctl_at, uint64_t ctl_size)
{
    char name[2700];
    if (tramp_name(name, sizeof(name), k, delta))
        return -ENAMETOOLONG;
    long fd = open_trusted(name, k, ctl_at + ctl_size);
    if (fd < 0)
        return (int)fd;
    /* the control block first: should its mapping fail, nothing changed */
    long c = ferry_raw6(SYS_mmap, (long)(at + ctl_at), (long)page_up(ctl_size), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_FIXED, fd, (long)ctl_at);
    long p = IS_ERR(c) ? c
                       : ferry_raw6(SYS_mmap, (long)at, (long)page_up(size), PROT_READ | PROT_EXEC,
                                    MAP_PRIVATE | MAP_FIXED, fd, 0);
    ferry_raw1(SYS_close, fd);
    return IS_ERR(p) ? (int)p : 0;
}

struct tramp_ctx {
    const void *bytes, *ctl;
    uint64_t size, ctl_at, ctl_size;
};

static int fill_tramp(long fd, void *data)
{
    const struct tramp_ctx *t = data;
    if (ferry_raw4(SYS_pwrite64, fd, t->bytes, t->size, 0) != (long)t->size ||
        ferry_raw4(SYS_pwrite64, fd, t->ctl, t->ctl_size, t->ctl_at) != (long)t->ctl_size)
        return -EIO;
    return 0;
}

int ferry_plantext_tramp_keep(const struct ferry_plantext_key *k, int64_t delta, uint64_t at, uint64_t size,
                              uint64_t ctl_at, uint64_t ctl_size)
{
    char name[2700];
    if (tramp_name(name, sizeof(name), k, delta))
        return -ENAMETOOLONG;
    struct tramp_ctx t = {(const void *)at, (const void *)(at + ctl_at), size, ctl_at, ctl_size};
    long fd = make_file(name, fill_tramp, &t);
    if (fd < 0)
        return (int)fd;
    ferry_raw1(SYS_close, fd);
    return 0;
}
