/* Load-time patching: a shim that was preloaded into a program nobody
 * rewrote applies the image cache's patch plans (rewriter/plan.py) to the
 * modules already in memory, libc first of all.  The planner thinks, the
 * shim applies: the bytes are the ones the rewritten file would hold, moved
 * to wherever there is room within reach of the module.
 *
 * The patched text is shared, not written: with the trampolines placed, the
 * windows' bytes depend only on where they went relative to the module, so
 * a copy of the module's file with those bytes in place (plantext.c, one
 * per plan and distance, made once) is mapped over the module's executable
 * segments.  Its pages are the page cache's, shared by every process, and
 * nothing is made writable.  Where that cannot be done (no room to write
 * the copy, text relocations, windows to leave alone for `ferry attach`),
 * each executable segment is made writable once for all its windows.
 *
 * Runs from the constructor, before main, when only one thread exists; at
 * dlopen, for a module no thread has run yet; under attach, with every
 * thread stopped.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "ctl.h"
#include "plan.h"
#include "plantext.h"
#include "raw.h"
#include "shim.h"
#include "util.h"

#define PAGE 4096UL
#define MAX_TARGETS 64

static uint64_t page_up(uint64_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

/* Modules this process has looked for a plan of, by load address: found
 * and applied or not, each is looked for once.  Every change of the module
 * list looks again at every module not in here; one with no plan was
 * looked for (a stat and an openat that fails) at each: a Python that
 * imported 40 extension modules made 380 of each.  Past its end a module
 * is still planned, and looked for again at each change. */
#define MAX_PLANNED 1024
static uint64_t planned[MAX_PLANNED] FERRY_COLD;
static int nplanned FERRY_HOT;

/* Its index in planned[], or -1. */
static int planned_index(uint64_t base)
{
    for (int i = 0; i < nplanned; i++)
        if (planned[i] == base)
            return i;
    return -1;
}

/* The module's name is ld.so's own string (its link_map's), as its phdr is:
 * plans are applied where no module can be unloaded meanwhile (the
 * constructor, ld.so's change hook under its load lock).  A copy of each
 * name made the table 34 KiB of stack, the deepest pages of a start: two
 * page faults in every process. */
struct target {
    const char *path;
    uint64_t base;
    const ElfW(Phdr) *phdr;
    int phnum;
};

/* Text mapped from a plan's copy: /proc/self/maps names the copy there, and
 * whoever reads it for the module's file (the catch-all) is told this. */
#define MAX_REMAPPED 512     /* two a planned module: its text and its trampolines */
static struct {
    uint64_t lo, hi;
    char path[256];
} remapped[MAX_REMAPPED] FERRY_COLD;
static int nremapped FERRY_HOT;

const char *ferry_plans_module_at(uint64_t addr)
{
    for (int i = 0; i < nremapped; i++)
        if (addr >= remapped[i].lo && addr < remapped[i].hi)
            return remapped[i].path;
    return 0;
}

/* Trampolines mapped from the cache: named by their file in
 * /proc/self/maps, but no module of their own (an empty path). */
static void note_tramp(uint64_t at, uint64_t size)
{
    if (nremapped >= MAX_REMAPPED)
        return;
    remapped[nremapped].lo = at;
    remapped[nremapped].hi = page_up(at + size);
    remapped[nremapped].path[0] = 0;
    nremapped++;
}

static void note_remapped(const struct target *t)
{
    for (int i = 0; i < t->phnum && nremapped < MAX_REMAPPED; i++) {
        const ElfW(Phdr) *ph = &t->phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        remapped[nremapped].lo = (t->base + ph->p_vaddr) & ~(PAGE - 1);
        remapped[nremapped].hi = page_up(t->base + ph->p_vaddr + ph->p_filesz);
        size_t n = ferry_strlen(t->path);
        if (n >= sizeof(remapped[0].path))
            n = sizeof(remapped[0].path) - 1;
        ferry_memcpy(remapped[nremapped].path, t->path, n);
        remapped[nremapped].path[n] = 0;
        nremapped++;
    }
}

extern int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
    __attribute__((weak));

/* Addresses where a stopped thread will resume (`ferry attach` passes them):
 * the windows over them stay as they are. */
#define MAX_AVOID 256
static uint64_t avoid[MAX_AVOID] FERRY_COLD;
static int navoid FERRY_HOT;

void ferry_plans_avoid(const char *list)
{
    navoid = 0;
    for (const char *p = list; p && *p && navoid < MAX_AVOID;) {
        uint64_t v = 0;
        int digits = 0;
        for (;; p++, digits++) {
            char c = *p;
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                break;
            v = v * 16 + (uint64_t)d;
        }
        if (digits)
            avoid[navoid++] = v;
        if (*p)
            p++;
    }
}

static int avoided(uint64_t lo, uint64_t hi)
{
    for (int i = 0; i < navoid; i++)
        if (avoid[i] >= lo && avoid[i] < hi)
            return 1;
    return 0;
}

static uint64_t pad8(uint64_t n) { return (n + 7) & ~7UL; }

int ferry_module_has_ctl(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && ph->p_memsz >= sizeof(struct ferry_ctl) &&
            ferry_memeq((void *)(info->dlpi_addr + ph->p_vaddr), FERRY_CTL_MAGIC, FERRY_CTL_MAGIC_LEN))
            return 1;
    }
    return 0;
}

/* Go's linker marks what it builds with a note of owner "Go" (its build
 * id), in a PT_NOTE segment of the first page: executables, and Go code
 * built into a shared library (-buildmode=c-shared) alike. */
int ferry_module_small_stacks(const void *phdrs, int phnum, uint64_t base)
{
    const ElfW(Phdr) *phdr = phdrs;
    for (int i = 0; i < phnum; i++) {
        if (phdr[i].p_type != PT_NOTE)
            continue;
        const unsigned char *p = (const unsigned char *)(base + phdr[i].p_vaddr);
        const unsigned char *end = p + phdr[i].p_filesz;
        while (end - p >= 12) {
            const uint32_t *h = (const uint32_t *)p;
            uint64_t name = (h[0] + 3UL) & ~3UL, desc = (h[1] + 3UL) & ~3UL;
            if ((uint64_t)(end - p - 12) < name + desc)
                break;
            if ((h[0] == 3 || h[0] == 4) && ferry_memeq(p + 12, "Go", 3))  /* Go pads it */
                return 1;
            p += 12 + name + desc;
        }
    }
    return 0;
}

extern char __ehdr_start[] __attribute__((visibility("hidden")));

/* Code address of a module ferry_plans_apply leaves for later (0: none). */
static uint64_t deferred FERRY_HOT;

void ferry_plans_defer(uint64_t addr)
{
    deferred = addr;
}

int ferry_module_holds_code(const struct dl_phdr_info *info, uint64_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && addr >= lo && addr - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

static int has_slash(const char *s)
{
    for (; *s; s++)
        if (*s == '/')
            return 1;
    return 0;
}

/* The modules to plan, filled in by dl_iterate_phdr, those looked for
 * already left out: a scan takes at most MAX_TARGETS of them, and the next
 * scan the rest (the table once held every module but the loaded copies of
 * Ferry's, so a process's modules after the 64th were never planned and
 * their calls caught on every run).  Only the entries used are written:
 * clearing the whole table faulted in fresh stack pages on every process
 * start. */
struct targets {
    int n;
    int seen;               /* modules looked at */
    int unloaded;           /* a module was unloaded since the last scan */
    uint64_t present[MAX_PLANNED / 64];     /* planned[i] is still loaded */
    struct target t[MAX_TARGETS];
};

/* Unloads so far (dl_iterate_phdr's dlpi_subs) at the last scan: an
 * unloaded module leaves its address to the next one, which must not pass
 * for it (ld.so calls the hook once a dlclose is done, too). */
static unsigned long long planned_subs FERRY_HOT;

/* planned[] keeps the modules the last scan found still loaded. */
static void forget_unloaded(const struct targets *all)
{
    int kept = 0;
    for (int i = 0; i < nplanned; i++)
        if (all->present[i / 64] >> (i % 64) & 1)
            planned[kept++] = planned[i];
    nplanned = kept;
}

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
    struct targets *all = data;
    if (!all->seen++ && size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs) &&
        info->dlpi_subs != planned_subs) {
        planned_subs = info->dlpi_subs;
        all->unloaded = 1;
    }
    int k = planned_index(info->dlpi_addr);
    if (k >= 0) {
        all->present[k / 64] |= 1ULL << (k % 64);
        return 0;
    }
    /* The main program has no name here and the vDSO no file ("linux-vdso.so.1",
     * no directory in it): a plan is for a file, found by its path; the shim
     * never patches itself (a program may link it for its API). */
    if (!info->dlpi_name || !has_slash(info->dlpi_name) || all->n >= MAX_TARGETS ||
        ferry_module_has_ctl(info) || info->dlpi_addr == (uint64_t)(uintptr_t)__ehdr_start ||
        (deferred && ferry_module_holds_code(info, deferred)))
        return 0;
    struct target *t = &all->t[all->n++];
    t->path = info->dlpi_name;
    t->base = info->dlpi_addr;
    t->phdr = info->dlpi_phdr;
    t->phnum = info->dlpi_phnum;
    return 0;
}

/* Room for `size` bytes as near `want` as we can get (rel32 reaches 2 GiB).
 * 16 MiB below first, then `want` itself, then further either way: `want`
 * is where the module's own layout has them, just past its end, and there
 * a preloaded shim loads right after libc, so that trying it first failed
 * (EEXIST) in every process a plan was applied in. */
static uint64_t place(uint64_t want, uint64_t size)
{
    for (long k = 0; k < 96; k++) {
        long j = k < 2 ? 1 - k : k;
        long step = (j & 1 ? -1 : 1) * ((j + 1) / 2) * (long)(16UL << 20);
        uint64_t hint = (want + (uint64_t)step) & ~(PAGE - 1);
        long p = ferry_raw6(SYS_mmap, (long)hint, (long)size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (!IS_ERR(p) && (uint64_t)p == hint)
            return hint;
        if (!IS_ERR(p))
            ferry_raw2(SYS_munmap, p, size);  /* an old kernel took it as a hint */
    }
    return 0;
}

/* A plan's windows, each with its jump moved by `delta` (where the
 * trampolines went, less where the rewritten file has them). */
struct windows {
    const char *first, *end;
    uint32_t count;
    int64_t delta;
};

int ferry_windows_each(const struct windows *w,
                       int (*fn)(uint64_t vaddr, const unsigned char *bytes, uint32_t len, void *ctx),
                       void *ctx)
{
    const char *win = w->first;
    for (uint32_t i = 0; i < w->count; i++) {
        const struct ferry_plan_window *h = (const void *)win;
        uint64_t vaddr = h->vaddr;
        uint32_t len = h->size;
        const unsigned char *bytes = (const unsigned char *)(h + 1);
        if ((const char *)(h + 1) + len > w->end || len < 5 || len > 64 || bytes[0] != 0xe9)
            return -EINVAL;
        unsigned char patch[64];
        ferry_memcpy(patch, bytes, len);
        int32_t disp;
        ferry_memcpy(&disp, patch + 1, 4);
        disp = (int32_t)((int64_t)disp + w->delta);
        ferry_memcpy(patch + 1, &disp, 4);
        win += sizeof(*h) + pad8(len);
        int rc = fn(vaddr, patch, len, ctx);
        if (rc)
            return rc;
    }
    return 0;
}

/* The fallback: every executable segment with windows is made writable once
 * (and stays executable: under attach or dlopen other threads run), its
 * windows written, and its protection given back. */
struct write_ctx {
    const struct target *t;
    const ElfW(Phdr) *seg;
};

static int write_window(uint64_t vaddr, const unsigned char *bytes, uint32_t len, void *data)
{
    struct write_ctx *c = data;
    const ElfW(Phdr) *ph = c->seg;
    if (vaddr < ph->p_vaddr || vaddr + len > ph->p_vaddr + ph->p_filesz)
        return 0;  /* another segment's */
    if (avoided(c->t->base + vaddr, c->t->base + vaddr + len))
        return 0;  /* that site keeps running its own syscall */
    ferry_memcpy((void *)(c->t->base + vaddr), bytes, len);
    return 0;
}

static int count_in(uint64_t vaddr, const unsigned char *bytes, uint32_t len, void *data)
{
    (void)bytes;
    struct write_ctx *c = data;
    if (vaddr < c->seg->p_vaddr || vaddr + len > c->seg->p_vaddr + c->seg->p_filesz)
        return -EINVAL;
    return 0;
}

static int write_windows(const struct target *t, const struct windows *w)
{
    int written = 0;
    for (int i = 0; i < t->phnum; i++) {
        const ElfW(Phdr) *ph = &t->phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uint64_t lo = (t->base + ph->p_vaddr) & ~(PAGE - 1);
        uint64_t hi = page_up(t->base + ph->p_vaddr + ph->p_filesz);
        if (ferry_raw3(SYS_mprotect, lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
            return -1;
        struct write_ctx c = {t, ph};
        int rc = ferry_windows_each(w, write_window, &c);
        ferry_raw3(SYS_mprotect, lo, hi - lo, PROT_READ | PROT_EXEC);
        if (rc)
            return -1;
        written = 1;
    }
    return written ? 0 : -1;
}

/* Whether every window lies in one executable segment of the file. */
static int windows_in_text(const struct target *t, const struct windows *w)
{
    const char *win = w->first;
    for (uint32_t i = 0; i < w->count; i++) {
        const struct ferry_plan_window *h = (const void *)win;
        uint32_t len = h->size;
        int inside = 0;
        for (int k = 0; k < t->phnum && !inside; k++) {
            const ElfW(Phdr) *ph = &t->phdr[k];
            struct write_ctx c = {t, ph};
            inside = ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
                     count_in(h->vaddr, 0, len, &c) == 0;
        }
        if (!inside || (const char *)(h + 1) + len > w->end)
            return 0;
        win += sizeof(*h) + pad8(len);
    }
    return 1;
}

static int any_avoided(const struct target *t, const struct windows *w)
{
    const char *win = w->first;
    for (uint32_t i = 0; i < w->count; i++) {
        const struct ferry_plan_window *h = (const void *)win;
        if (avoided(t->base + h->vaddr, t->base + h->vaddr + h->size))
            return 1;
        win += sizeof(*h) + pad8(h->size);
    }
    return 0;
}

static struct ferry_ctl *apply(const char *data, uint64_t size, const struct target *t,
                               const struct ferry_plantext_key *key)
{
    uint64_t base = t->base;
    const struct ferry_plan_header *h = (const void *)data;
    if (size < sizeof(*h) || !ferry_memeq(h->magic, FERRY_PLAN_MAGIC, FERRY_PLAN_MAGIC_LEN) || h->ctl_vaddr < h->tramp_vaddr)
        return 0;
    const char *tramp = data + sizeof(*h);
    const char *ctl = tramp + pad8(h->tramp_size);
    const uint32_t *refs = (const uint32_t *)(ctl + pad8(h->ctl_size));
    const char *win = (const char *)refs + pad8(4UL * h->nrefs);
    if ((uint64_t)(win - data) > size)
        return 0;
    uint64_t dist = h->ctl_vaddr - h->tramp_vaddr;
    uint64_t total = page_up(dist + h->ctl_size);
    uint64_t at = place(base + h->tramp_vaddr, total);
    if (!at)
        return 0;
    int64_t delta = (int64_t)(at - (base + h->tramp_vaddr));
    /* Trampolines on pages of their own (the control block, written by each
     * process, is not on them) are shared, mapped from the cache, and the
     * control block after them too, until written. */
    int own_pages = dist >= page_up(h->tramp_size) && !(dist & (PAGE - 1));
    int mapped = own_pages && ferry_plantext_tramp_map(key, delta, at, h->tramp_size, dist, h->ctl_size) == 0;
    if (!mapped) {
        ferry_memcpy((void *)(at + dist), ctl, h->ctl_size);
        ferry_memcpy((void *)at, tramp, h->tramp_size);
        for (uint32_t i = 0; i < h->nrefs; i++) {
            if (refs[i] + 4 > h->tramp_size)
                return 0;
            int32_t *field = (int32_t *)(at + refs[i]);
            *field = (int32_t)((int64_t)*field - delta);
        }
        mapped = own_pages && ferry_plantext_tramp_keep(key, delta, at, h->tramp_size, dist, h->ctl_size) == 0 &&
                 ferry_plantext_tramp_map(key, delta, at, h->tramp_size, dist, h->ctl_size) == 0;
        if (!mapped)
            ferry_raw3(SYS_mprotect, at, page_up(h->tramp_size), PROT_READ | PROT_EXEC);
    }
    if (mapped)
        note_tramp(at, h->tramp_size);
    struct windows w = {win, data + size, h->nwindows, delta};
    if (!windows_in_text(t, &w))
        return 0;
    int shared = !any_avoided(t, &w) &&
                 ferry_plantext_map(key, delta, &w, base, t->phdr, t->phnum) == 0;
    if (shared)
        note_remapped(t);
    else if (write_windows(t, &w))
        return 0;
    return (struct ferry_ctl *)(at + dist);
}

static int apply_all(const char *cache_root, const struct target *targets, int n,
                     void (*enable)(struct ferry_ctl *, const char *, uint64_t, int))
{
    int applied = 0;
    for (int i = 0; i < n; i++) {
        if (nplanned < MAX_PLANNED)
            planned[nplanned++] = targets[i].base;
        /* with a plan or not: its calls are caught meanwhile */
        if (ferry_module_small_stacks(targets[i].phdr, targets[i].phnum, targets[i].base))
            ferry_small_stacks_found();
        char path[2600];
        struct ferry_plantext_key key;
        ferry_memset(&key, 0, sizeof(key));
        key.plan_path = path;
        key.module_path = targets[i].path;
        if (!ferry_identity_path(cache_root, "plans", targets[i].path, path, sizeof(path),
                                 &key.module))
            continue;
        long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0)
            continue;
        struct stat st;
        long map = -1;
        if (ferry_raw2(SYS_fstat, fd, &st) == 0 && st.st_size > 0)
            map = ferry_raw6(SYS_mmap, 0, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        ferry_raw1(SYS_close, fd);
        if (IS_ERR(map))
            continue;
        key.plan = st;
        struct ferry_ctl *ctl = apply((const char *)map, (uint64_t)st.st_size, &targets[i], &key);
        ferry_raw2(SYS_munmap, map, st.st_size);
        if (ctl && ferry_memeq(ctl->magic, FERRY_CTL_MAGIC, FERRY_CTL_MAGIC_LEN)) {
            enable(ctl, targets[i].path, targets[i].base,
                   ferry_module_small_stacks(targets[i].phdr, targets[i].phnum, targets[i].base));
            applied++;
        }
    }
    return applied;
}

int ferry_plans_apply(const char *cache_root, void (*enable)(struct ferry_ctl *, const char *, uint64_t, int))
{
    if (!dl_iterate_phdr || !cache_root || !cache_root[0])
        return 0;
    struct targets all;
    int applied = 0;
    do {
        all.n = all.seen = all.unloaded = 0;
        ferry_memset(all.present, 0, sizeof(all.present));
        dl_iterate_phdr(collect, &all);
        if (all.unloaded)
            forget_unloaded(&all);
        applied += apply_all(cache_root, all.t, all.n, enable);
        /* a full table leaves modules for another scan; each full scan
         * remembers MAX_TARGETS more until the memory is full */
    } while (all.n == MAX_TARGETS && nplanned < MAX_PLANNED);
    return applied;
}
