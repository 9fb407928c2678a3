/* The exec hook (the DIGITAL FX!32 agent's job): a process about to exec
 * another program makes sure that program will carry the shim too.
 *
 * The image cache keeps, for each program it rewrote, a symlink named by the
 * original file's identity (dev, inode, size, mtime) and by the build id of
 * the shim the image carries: one stat tells whether a rewritten image exists
 * that carries this very shim (rewriter/cache.py, exec_name).  When it does, that
 * image is executed instead, with the same argv; a #! script gets its
 * rewritten interpreter.  Whatever runs, the run's FERRY_* variables go back
 * into its environment, even an empty one (`env -i`, posix_spawn with envp).
 *
 * Nothing here allocates: a vfork child runs this on its parent's stack,
 * below the parent's red zone, and must leave the parent's memory alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "exec.h"
#include "exec_wine.h"
#include "raw.h"
#include "sandbox.h"
#include "selfexe.h"
#include "settings.h"
#include "slots.h"
#include "store.h"
#include "util.h"

#define MAX_SAVED 16
/* A vfork child (glibc's posix_spawn, a shell's) runs the hook on a stack
 * of 64 KiB (store.c, SPARE_STACK): all of ferry_exec's frames must fit
 * there; the environment and argument arrays live apart. */
#define MAX_ENV 1024
#define MAX_ARGS 512
#define PATH_MAX_ 1024
_Static_assert((MAX_ENV + MAX_ARGS) * sizeof(char *) <= 64 * 1024, "fits ferry_vfork_scratch()");

static char saved_buf[8192];
static char *saved[MAX_SAVED];
static int nsaved FERRY_HOT;
/* The cache's root and the shim's path are the values of the entries kept
 * for children (saved_buf): a copy of each was a page of .bss that every
 * start wrote. */
static const char *cache_root FERRY_HOT = "";
static char cache_root_own[2048] FERRY_COLD;
static const char *shim_path FERRY_HOT;  /* 0: FERRY_SHIM unset or unusable */
static char shim_id[2 * 64 + 1];  /* this shim's build id, in hex */

FERRY_HOT_TEXT const char *ferry_cache_root(void) { return cache_root; }

/* A NUL-terminated string from the program's memory, or -1. */
long ferry_exec_string(char *dst, const char *src, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        /* Read up to the end of the current page: never beyond what exists. */
        size_t chunk = 4096 - (((unsigned long)src + got) & 4095);
        if (chunk > cap - 1 - got)
            chunk = cap - 1 - got;
        if (ferry_safe_read(dst + got, src + got, chunk) != (long)chunk)
            return -1;
        for (size_t i = got; i < got + chunk; i++)
            if (!dst[i])
                return (long)i;
        got += chunk;
    }
    dst[cap - 1] = 0;
    return -1;  /* longer than we handle */
}

FERRY_HOT_TEXT static void save(const char *entry)
{
    static size_t used;
    size_t n = ferry_strlen(entry) + 1;
    if (nsaved >= MAX_SAVED || used + n > sizeof(saved_buf))
        return;
    /* A marker, the hint about its executable, the slot claimed for it or
     * the names its image stands for describes this process's own start,
     * never a child's. */
    if (ferry_memeq(entry, FERRY_WAS_PREFIX, 10) || ferry_memeq(entry, "FERRY_EXE=", 10) ||
        ferry_memeq(entry, "FERRY_SLOT=", 11) || ferry_memeq(entry, "FERRY_SELF=", 11) ||
        ferry_memeq(entry, "FERRY_EXECFN=", 13))
        return;
    saved[nsaved++] = ferry_memcpy(saved_buf + used, entry, n);
    used += n;
}

void ferry_exec_keep(const char *entry)
{
    save(entry);
}

FERRY_HOT_TEXT const char *ferry_exec_kept(const char *name)
{
    for (int i = 0; i < nsaved; i++) {
        const char *v = ferry_entry_value(saved[i], name);
        if (v)
            return v;
    }
    return 0;
}

FERRY_HOT_TEXT const char *ferry_exec_lasting(const char *name, const char *value, char *own, size_t cap)
{
    const char *kept = ferry_exec_kept(name);
    size_t n = ferry_strlen(value);
    if (kept && ferry_memeq(kept, value, n + 1))
        return kept;
    return n < cap ? ferry_memcpy(own, value, n + 1) : 0;
}

extern char __ehdr_start[] __attribute__((visibility("hidden")));

/* This shim's GNU build id, in hex, from its own notes (mapped with its
 * headers: no system call); "" if it has none.  Images carry a copy of the
 * shim, so the cache keys them by it (rewriter/shimlib.py, build_id): after
 * a rebuild, or with several builds sharing one cache, an image made with
 * another shim is never run by this one. */
static void read_shim_id(void)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)__ehdr_start;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(__ehdr_start + eh->e_phoff);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_NOTE)
            continue;
        const char *at = __ehdr_start + ph[i].p_vaddr, *end = at + ph[i].p_memsz;
        while (at + sizeof(Elf64_Nhdr) <= end) {
            const Elf64_Nhdr *n = (const Elf64_Nhdr *)at;
            const unsigned char *name = (const unsigned char *)(n + 1);
            const unsigned char *desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && ferry_memeq(name, "GNU", 4) &&
                n->n_descsz * 2 < sizeof(shim_id)) {
                for (uint32_t k = 0; k < n->n_descsz; k++) {
                    shim_id[2 * k] = hex[desc[k] >> 4];
                    shim_id[2 * k + 1] = hex[desc[k] & 15];
                }
                shim_id[2 * n->n_descsz] = 0;
                return;
            }
            at = (const char *)desc + ((n->n_descsz + 3) & ~3u);
        }
    }
}

FERRY_HOT_TEXT void ferry_exec_configure(char **envp)
{
    read_shim_id();
    /* Children may have no HOME (env -i): they are told where the cache is. */
    char entry[2100];
    struct ferry_buf b = {entry, 0, sizeof(entry), 0};
    ferry_buf_str(&b, "FERRY_CACHE=");
    size_t head = b.len;
    const char *v;
    if ((v = ferry_env_lookup(envp, "FERRY_CACHE")) && *v) {
        ferry_buf_str(&b, v);
    } else if ((v = ferry_env_lookup(envp, "XDG_CACHE_HOME")) && *v) {
        ferry_buf_str(&b, v);
        ferry_buf_str(&b, "/ferry");
    } else if ((v = ferry_env_lookup(envp, "HOME")) && *v) {
        ferry_buf_str(&b, v);
        ferry_buf_str(&b, "/.cache/ferry");
    }
    int root = !b.overflow && b.len > head && b.len - head < sizeof(cache_root_own);
    entry[root ? b.len : head] = 0;
    for (char **e = envp; e && *e; e++)
        if (ferry_is_setting(*e) && !ferry_memeq(*e, "FERRY_CACHE=", 12))
            save(*e);
    const char *shim = ferry_exec_kept("FERRY_SHIM");
    shim_path = shim && *shim && ferry_strlen(shim) < PATH_MAX_ ? shim : 0;
    ferry_wine_configure(envp);
    if (root) {
        save(entry);
        cache_root = ferry_exec_lasting("FERRY_CACHE", entry + head, cache_root_own, sizeof(cache_root_own));
    }
}

enum cached { CACHED_NONE, CACHED_IMAGE, CACHED_LIBDIR };

/* Where the cache's links led, for the files this process's children ran
 * last: a shell runs the same few programs again and again, and reading the
 * link (its long text a block of the file system to read) was ~3.5 us of
 * each command.  Keyed by the link's name, which is the file's identity and
 * this shim's, and by the file's ctime (an entry is made once the file was
 * found unprivileged, and a chmod or setcap changes the ctime); each use
 * still looks at the target, as a read of the link does, and a target gone
 * (the cache cleaned) reads the link again.  A
 * vfork child's memory is its parent's, so what one command's child learnt
 * serves the next (a fork child starts with its parent's).  Several threads'
 * children may look at once: an entry is written while its word is odd,
 * and what is read of it counts only if the word was even and the same
 * before and after. */
#define SEEN_ENTRIES 8
#define SEEN_NAME 248
struct seen_link {
    uint32_t word;
    uint16_t link_len, target_len;
    int64_t ctime_sec, ctime_nsec;  /* the file's, when it was found unprivileged */
    char link[SEEN_NAME], target[SEEN_NAME];
};
static struct seen_link seen[SEEN_ENTRIES] FERRY_COLD;
/* Whether any entry was made: `seen`'s page is not looked at before.  A
 * fork child looked at it, then wrote it, where its parent (a bash, which
 * forks for every command and never vforks) had never touched it: two
 * faults in each command, for an entry lost at its exec.  Entries are made
 * by vfork children only, whose parent keeps them. */
static int seen_any FERRY_HOT;

static struct seen_link *seen_entry(const char *link, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)link[i]) * 16777619u;
    return &seen[h % SEEN_ENTRIES];
}

/* The target the link `link` (`n` bytes) for the file of status `st` led
 * to, into `out`: its length, 0 when it is not known, or when the file's
 * status changed since (a chmod or setcap changes its ctime, not its name's
 * identity). */
static size_t seen_target(const char *link, size_t n, const struct stat *st, char *out, size_t cap)
{
    if (!__atomic_load_n(&seen_any, __ATOMIC_RELAXED))
        return 0;
    struct seen_link *e = seen_entry(link, n);
    uint32_t before = __atomic_load_n(&e->word, __ATOMIC_ACQUIRE);
    if ((before & 1) || e->link_len != n || !ferry_memeq(e->link, link, n) ||
        e->ctime_sec != (int64_t)st->st_ctim.tv_sec || e->ctime_nsec != (int64_t)st->st_ctim.tv_nsec)
        return 0;
    size_t len = e->target_len;
    if (!len || len >= cap)
        return 0;
    ferry_memcpy(out, e->target, len);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e->word, __ATOMIC_RELAXED) != before)
        return 0;
    out[len] = 0;
    return len;
}

/* `target` (`len` bytes) is where `link` (`n` bytes) leads, or, when `len`
 * is 0, nothing is known of it any more.  Passed by when another child is
 * writing the entry. */
static void seen_set(const char *link, size_t n, const struct stat *st, const char *target, size_t len)
{
    if (n >= SEEN_NAME || len >= SEEN_NAME || !ferry_in_vfork_child())
        return;
    if (!__atomic_load_n(&seen_any, __ATOMIC_RELAXED))
        __atomic_store_n(&seen_any, 1, __ATOMIC_RELAXED);
    struct seen_link *e = seen_entry(link, n);
    uint32_t w = __atomic_load_n(&e->word, __ATOMIC_RELAXED);
    if ((w & 1) || !__atomic_compare_exchange_n(&e->word, &w, w + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    e->link_len = (uint16_t)n;
    e->target_len = (uint16_t)len;
    e->ctime_sec = (int64_t)st->st_ctim.tv_sec;
    e->ctime_nsec = (int64_t)st->st_ctim.tv_nsec;
    ferry_memcpy(e->link, link, n);
    ferry_memcpy(e->target, target, len);
    __atomic_store_n(&e->word, w + 2, __ATOMIC_RELEASE);
}

/* Where `link` leads, into `out`, when that is there (`img` gets its
 * status): the name's length, else 0. */
static long follow_link(const char *link, char *out, size_t cap, struct stat *img)
{
    long got = ferry_raw4(SYS_readlinkat, AT_FDCWD, link, out, cap - 1);
    if (got <= 0 || out[0] != '/')
        return 0;
    out[got] = 0;
    return ferry_raw4(SYS_newfstatat, AT_FDCWD, out, img, 0) == 0 ? got : 0;
}

/* Whether the kernel runs the file at `path` (of status `st`) with more
 * privileges than its caller may have: set-user-ID, set-group-ID, or file
 * capabilities.  ld.so then runs in secure mode and ignores LD_PRELOAD and
 * LD_LIBRARY_PATH: the shim would never load, and the program would see
 * Ferry's settings in its environment. */
static int privileged(const char *path, const struct stat *st)
{
    if (st->st_mode & (S_ISUID | S_ISGID))
        return 1;
    return ferry_raw4(SYS_getxattr, (long)path, (long)"security.capability", 0, 0) > 0;
}

/* What the cache holds for the file at `path` (`st` gets the file's status,
 * st_mode 0 if it has none, and *err the stat's error, 0 if none): a
 * rewritten image to run instead (CACHED_IMAGE, `out` gets its name, `img`
 * its status), or, for a program whose own file needed no change, the
 * directory of its rewritten libraries (CACHED_LIBDIR, `out` gets the
 * directory).  Nothing for a privileged file (*priv set): it is never
 * served. */
static enum cached cached_image(const char *path, char *out, size_t cap, struct stat *st,
                                struct stat *img, long *err, int *priv)
{
    char link[2300];
    st->st_mode = 0;  /* a stat that fails writes nothing */
    *priv = 0;
    if ((*err = ferry_raw4(SYS_newfstatat, AT_FDCWD, path, st, 0)) != 0)
        return CACHED_NONE;
    struct ferry_buf b = {link, 0, sizeof(link), 0};
    if (shim_id[0] && ferry_identity_name(cache_root, "exec", st, link, sizeof(link))) {
        b.len = ferry_strlen(link);
        ferry_buf_str(&b, "-");
        ferry_buf_str(&b, shim_id);
    } else {
        b.overflow = 1;
    }
    link[b.overflow ? 0 : b.len] = 0;
    /* The link is read once, and its target looked at: a link's text is a
     * block of the file system to read (ext4 keeps a long one there), and a
     * stat of the link read it a second time.  Where it led is kept with
     * the file's ctime: a file seen then was found unprivileged. */
    size_t known = link[0] ? seen_target(link, b.len, st, out, cap) : 0;
    if (!known && (*priv = privileged(path, st)))
        return CACHED_NONE;
    if (!link[0])
        return CACHED_NONE;
    if (known && ferry_raw4(SYS_newfstatat, AT_FDCWD, out, img, 0) != 0) {
        seen_set(link, b.len, st, 0, 0);  /* gone since: what does the link say now? */
        known = 0;
    }
    if (!known) {
        long got = follow_link(link, out, cap, img);
        if (got <= 0)
            return CACHED_NONE;
        seen_set(link, b.len, st, out, (size_t)got);
    }
    if (S_ISDIR(img->st_mode))
        return CACHED_LIBDIR;
    /* the image is run by the link's name, as before the link was read */
    size_t n = ferry_strlen(link);
    if (n >= cap || ferry_raw4(SYS_faccessat, AT_FDCWD, out, X_OK, 0) != 0)
        return CACHED_NONE;
    ferry_memcpy(out, link, n + 1);
    return CACHED_IMAGE;
}

/* Whether `path` names a static program's rewritten image in the cache: a
 * static program that execs itself by /proc/self/exe (Go's os.Executable)
 * names its image, which carries the shim and needs only the run's settings. */
static int static_image_in_cache(const char *path, uint32_t kind)
{
    if ((kind != FERRY_EXEC_STATIC && kind != FERRY_EXEC_STATIC_PIE) || !cache_root[0])
        return 0;
    size_t n = ferry_strlen(cache_root);
    return ferry_memeq(path, cache_root, n) && ferry_memeq(path + n, "/programs/", 10);
}

/* Whether the program interpreter `interp` is glibc's x86-64 ld.so, the only
 * loader the shim (built against glibc's) can be loaded by. */
static int glibc_loader(const char *interp)
{
    const char *base = interp;
    for (const char *p = interp; *p; p++)
        if (*p == '/')
            base = p + 1;
    return ferry_memeq(base, "ld-linux-x86-64.so.2", 21);
}

/* Whether `magic` (4 bytes) is somewhere in the `n` bytes at `p`. */
static int has_magic(const char *p, long n, const char *magic)
{
    for (long i = 0; i + 4 <= n; i++)
        if (ferry_memeq(p + i, magic, 4))
            return 1;
    return 0;
}


/* `len` bytes at `off` of the file open as `fd`, of which the first `got`
 * are in `head` already: most programs' headers and PT_INTERP lie in the
 * first KiB, so one read serves them all. */
static long read_at(long fd, const char *head, long got, void *dst, uint64_t len, uint64_t off)
{
    if (got > 0 && off <= (uint64_t)got && len <= (uint64_t)got - off) {  /* never wraps */
        ferry_memcpy(dst, head + off, len);
        return (long)len;
    }
    return ferry_raw4(SYS_pread64, fd, dst, len, off);
}

/* What kind of ELF program the open file `fd` is (its first `got` bytes in
 * `head`), told apart as finely as the report needs (rewriter/elfkind.py
 * says the same of a command `ferry run` is given). */
static uint32_t classify_elf(long fd, const char *head, long got)
{
    if (head[4] == 1)
        return FERRY_EXEC_ELF32;
    /* 64-bit x86 only: another machine's program cannot load this shim. */
    if (head[4] != 2 || *(const uint16_t *)(head + 18) != 62 /* EM_X86_64 */)
        return FERRY_EXEC_FOREIGN;
    uint64_t phoff = *(const uint64_t *)(head + 32);
    uint16_t type = *(const uint16_t *)(head + 16);
    uint16_t phnum = *(const uint16_t *)(head + 56), shnum = *(const uint16_t *)(head + 60);
    int dynamic = 0;
    for (uint16_t i = 0; i < phnum && i < 64; i++) {
        uint64_t ph[7];
        if (read_at(fd, head, got, ph, sizeof(ph), phoff + (uint64_t)i * 56) != sizeof(ph))
            break;
        if ((uint32_t)ph[0] == 2 /* PT_DYNAMIC */)
            dynamic = 1;
        if ((uint32_t)ph[0] == 3 /* PT_INTERP */) {
            char interp[256];
            uint64_t len = ph[4] < sizeof(interp) - 1 ? ph[4] : sizeof(interp) - 1;
            long r = read_at(fd, head, got, interp, len, ph[1]);
            interp[r > 0 ? r : 0] = 0;
            return glibc_loader(interp) ? FERRY_EXEC_PLAIN : FERRY_EXEC_LOADER;
        }
    }
    /* UPX leaves no section headers and its l_info right after the program headers. */
    if (!shnum && has_magic(head, got, "UPX!"))
        return FERRY_EXEC_PACKED;
    return type == 3 /* ET_DYN */ && dynamic ? FERRY_EXEC_STATIC_PIE : FERRY_EXEC_STATIC;
}

/* What the kernel will run for `path`, judged from its first bytes. */
static uint32_t classify(const char *path, const struct stat *st, char *head, size_t cap, long *got)
{
    *got = 0;
    if (st->st_mode & (S_ISUID | S_ISGID))
        return FERRY_EXEC_SETUID;
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return fd == -EACCES ? FERRY_EXEC_UNREADABLE : FERRY_EXEC_UNKNOWN;
    *got = ferry_raw3(SYS_read, fd, head, cap);
    uint32_t kind = FERRY_EXEC_UNKNOWN;
    if (*got >= 64 && ferry_memeq(head, "\177ELF", 4))
        kind = classify_elf(fd, head, *got);
    ferry_raw1(SYS_close, fd);
    return kind;
}

/* Entry `i` of a NULL-terminated pointer array in the program's memory:
 * 1 with *p set, 0 at the end, -1 if it cannot be read. */
int ferry_exec_pointer(char *const *array, size_t i, char **p)
{
    if (ferry_safe_read(p, &array[i], sizeof(*p)) != sizeof(*p))
        return -1;
    return *p != 0;
}

/* How the new program is started, and so what its environment gets. */
enum env_kind {
    ENV_RUN,      /* the run's FERRY_* settings: a rewritten image loads the shim itself */
    ENV_PRELOAD,  /* ... and LD_PRELOAD of the shim, which patches libraries from plans */
    ENV_LIBDIR,   /* ... and the cached rewritten libraries first (LD_LIBRARY_PATH) */
    ENV_WINE,     /* wine: only the settings ferry.dll reads (exec_wine.c) */
};

struct env_extra {
    char exe[64];   /* FERRY_EXE=<dev>:<ino> (exepath.h), or "" */
    char slot[96];  /* FERRY_SLOT=..., filled in once the slot is claimed (store.h) */
    int slot_used;  /* the environment built last holds `slot` */
    char *span;   /* ENV_SPAN bytes for reading the environment (NULL: none) */
    struct env_prefetch *pre;  /* the array's first pointers, read with the path */
    /* LD_PRELOAD and LD_LIBRARY_PATH as the new program gets them, and
     * their markers, one after the other from the start: in a fork child
     * the hook runs on the program's stack, and each page it writes there
     * is a fault (a buffer of its own for each, sized for the longest, put
     * them on as many pages) */
    size_t vars_used;
    char vars[2 * 2100 + 2 * 1100];
    /* For an image that stands for another file (ENV_RUN): that file as the
     * exec named it, and the name the exec was given when it is not that
     * file (a script's); selfexe.c */
    const char *self, *self_execfn;
};

/* The environment built last's FERRY_SLOT entry, for the store to fill in,
 * or NULL when it holds none. */
static char *slot_entry(struct env_extra *x)
{
    return x->slot_used ? x->slot : 0;
}

/* "NAME=before:value:after" (`before`, `after` left out when NULL or
 * empty) in x->vars after what is there (*entry says where); 0 when it
 * does not fit. */
static int add_entry(const char *name, const char *before, const char *value, const char *after,
                     struct env_extra *x, char **entry)
{
    char *dst = x->vars + x->vars_used;
    struct ferry_buf b = {dst, 0, sizeof(x->vars) - x->vars_used, 0};
    ferry_buf_str(&b, name);
    ferry_buf_str(&b, "=");
    if (before && before[0]) {
        ferry_buf_str(&b, before);
        ferry_buf_str(&b, ":");
    }
    ferry_buf_str(&b, value);
    if (after && after[0]) {
        ferry_buf_str(&b, ":");
        ferry_buf_str(&b, after);
    }
    if (b.overflow)  /* a ferry_buf keeps room for the NUL */
        return 0;
    dst[b.len] = 0;
    x->vars_used += b.len + 1;
    *entry = dst;
    return 1;
}

/* The setting "NAME=value" in x->vars (*entry says where); 0 when it does
 * not fit. */
static int add_setting(const char *name, const char *value, struct env_extra *x, char **entry)
{
    return add_entry(name, 0, value, 0, x, entry);
}

/* "NAME=ours[:old]", or "NAME=old:ours" when `ours_last`, and the marker
 * the new program's shim uses to give NAME its old value back (environ.c),
 * one after the other in x->vars after what is there (*var and *marker say
 * where).  0 when they do not fit. */
static int add_var(const char *name, const char *ours, const char *old, int ours_last, struct env_extra *x,
                   char **var, char **marker)
{
    char *dst;
    if (!add_entry(name, ours_last ? old : 0, ours, ours_last ? 0 : old, x, &dst))
        return 0;
    char *mark = x->vars + x->vars_used;
    struct ferry_buf m = {mark, 0, sizeof(x->vars) - x->vars_used, 0};
    ferry_buf_str(&m, "FERRY_WAS_");
    ferry_buf_str(&m, name);
    ferry_buf_str(&m, old ? "=1" : "=0");
    if (old)
        ferry_buf_str(&m, old);
    if (m.overflow)
        return 0;
    mark[m.len] = 0;
    x->vars_used += m.len + 1;
    *var = dst;
    *marker = mark;
    return 1;
}

/* The next entries of the program's environment array, and the first bytes
 * of each (never past the end of its page: what lies beyond may not exist),
 * in two reads a batch: one read per entry made the hook
 * ~200 system calls for a usual environment.  128 a batch: a usual
 * environment in one batch, one getpid and two reads (a desktop's shell
 * has 40-60 entries, a CI runner's 60-100; 64 a batch took two reads
 * more past 64, and 32 two batches at 40).  One pointer more than a
 * batch is read, so that an array of exactly a batch ends in it: its
 * NULL took a read of its own (a CI machine's shell had 64 entries). */
#define ENV_BATCH 128
#define ENV_HEAD 32
/* A head is what tells Ferry's settings (and LD_PRELOAD=, LD_LIBRARY_PATH=)
 * from the rest: every setting's name and its '=' must fit before the NUL
 * build_env puts at its end (a string too long for its array is an error).
 * Heads of 64 bytes put a fork child's hook, which runs on the program's
 * stack, on more pages: 0.8 faults more a command of a bash loop. */
_Static_assert(sizeof((const char[][ENV_HEAD - 2]){FERRY_SETTINGS}) > 0, "every setting fits a head");
/* The heads of a batch are read in one piece when they lie within this
 * many bytes of each other (a kernel-made environment lies back to back on
 * the stack): each piece is a copy of its own, and when reads pinned each
 * piece's page (process_vm_readv, before ferry_read_pieces), 32 of them
 * were half the hook's time in a vfork child.  Up to 16 KiB of
 * pieces, and room beside them for every head of a batch as a piece of
 * its own (plan_heads). */
#define ENV_SPAN (16 * 1024 + ENV_BATCH * ENV_HEAD)
/* ...and outside a vfork child, where the pieces are read onto the
 * program's stack, up to 8 KiB: ~40 KiB deep already (a shell's 40-60
 * variables take 2-3 KiB) */
#define ENV_SPAN_STACK (8 * 1024 + ENV_BATCH * ENV_HEAD)
/* A head this close to the piece before it is read with it (below). */
#define ENV_GAP 512
_Static_assert((MAX_ENV + MAX_ARGS) * sizeof(char *) + ENV_SPAN <= 64 * 1024, "fits ferry_vfork_scratch()");

struct env_prefetch {
    char *ptr[ENV_BATCH + 1];
    size_t bytes;   /* of them read; 0: none */
};

/* What build_env reads a batch with.  The heads stay where they were read,
 * in the span, at `at`: a copy of each into an array of its own was 4 KiB
 * more for a fork child's hook to write on the program's stack, where each
 * page written is a fault. */
struct env_batch {
    char *ptr[ENV_BATCH + 1];
    uint16_t at[ENV_BATCH];
    uint8_t len[ENV_BATCH];
    size_t count;   /* entries read (the terminating NULL excluded) */
    int last;       /* the array ends in this batch */
    size_t pieces;  /* of the heads: in `piece`, one after the other from `at` 0 */
    struct iovec piece[ENV_BATCH];
};
_Static_assert(ENV_SPAN <= 65536 && ENV_HEAD < 256, "a head's place and length fit `at` and `len`");

/* The pieces to read the heads of batch `b` in, and each head's place
 * among their bytes (`at`); how many bytes they take, within `cap`.  In
 * address order, a head that starts within ENV_GAP bytes of the end of the
 * piece before it is read with that piece, the bytes between included
 * (unless `alone`): each piece costs the kernel a copy of its own, a few
 * hundred bytes more to copy less (a page pinned, ~900 cycles here, while
 * the reads were process_vm_readv's).  A shell keeps most
 * of its environment where the kernel put it, back to back, and the few
 * variables it changed elsewhere; one variable of several KiB in the
 * middle (a token, LS_COLORS) only splits a piece.  A head joins a piece
 * only while the heads after it would still fit as pieces of their own
 * (`cap` holds ENV_BATCH of those).  A fork child of bash, whose
 * environment is malloc'd strings, read 35 heads as 35 pieces, ~12 us of
 * every command it ran, where a few pieces take ~1 us.  The heads are put
 * in address order by an insertion sort: a kernel-made environment is in
 * order already. */
static size_t plan_heads(struct env_batch *b, size_t cap, int alone)
{
    uint8_t order[ENV_BATCH];
    for (size_t i = 0; i < b->count; i++) {
        size_t k = i;
        for (; k > 0 && b->ptr[order[k - 1]] > b->ptr[i]; k--)
            order[k] = order[k - 1];
        order[k] = (uint8_t)i;
    }
    size_t n = 0, used = 0;
    for (size_t j = 0; j < b->count; j++) {
        size_t k = order[j], later = (b->count - j - 1) * ENV_HEAD;
        uintptr_t p = (uintptr_t)b->ptr[k], end = p + b->len[k];
        struct iovec *last = n ? &b->piece[n - 1] : 0;
        uintptr_t lo = last ? (uintptr_t)last->iov_base : 0, hi = lo + (last ? last->iov_len : 0);
        size_t grow = end > hi ? end - hi : 0;
        if (!alone && last && p <= hi + ENV_GAP && used + grow + later <= cap) {
            last->iov_len += grow;
            used += grow;
            b->at[k] = (uint16_t)(used - last->iov_len + (p - lo));
            continue;
        }
        b->piece[n++] = (struct iovec){(void *)p, end - p};
        b->at[k] = (uint16_t)used;
        used += end - p;
    }
    b->pieces = n;
    return used;
}

/* The pieces plan_heads made, into `span`, one after the other, in one
 * read: the shim's side is one buffer (ferry_read_pieces), and a batch's
 * pieces are fewer than a read takes (UIO_MAXIOV).  A kernel-made
 * environment makes one or two, bash's fork child a few. */
_Static_assert(ENV_BATCH <= 1024, "a batch's heads fit one read");
static int read_heads(long pid, struct env_batch *b, char *span)
{
    size_t bytes = 0;
    if (!b->pieces)
        return 0;
    for (size_t k = 0; k < b->pieces; k++)
        bytes += b->piece[k].iov_len;
    struct iovec to = {span, bytes};
    return ferry_read_pieces(pid, &to, 1, b->piece, b->pieces) == (long)bytes ? 0 : -1;
}

/* The pieces to read a batch of the array's pointers from entry `from` in
 * (into `ptr`): up to the end of their page, and those on the next page as
 * a second piece: the kernel stops after the first piece when the next page
 * is not there (the next batch then starts there, and fails as the exec
 * would), and an array that crosses a page (a shell's, malloc'd) takes no
 * batch more.  How many. */
static int env_pieces(char *const *array, size_t from, char **ptr, struct iovec *to, struct iovec *src)
{
    uintptr_t at = (uintptr_t)&array[from];
    size_t bytes = (ENV_BATCH + 1) * sizeof(char *), first = 4096 - (at & 4095);
    if (first > bytes)
        first = bytes;
    to[0] = (struct iovec){ptr, first};
    src[0] = (struct iovec){(void *)at, first};
    /* A page past the user address space fails the whole read, not only
     * its piece (ferry_read_pieces): an array on the stack's top page, as
     * an `env -i` program's with the stack not randomized (setarch -R),
     * has no next page. */
    if (first == bytes || at + first >= FERRY_USER_END)
        return 1;
    to[1] = (struct iovec){(char *)ptr + first, bytes - first};
    src[1] = (struct iovec){(void *)(at + first), bytes - first};
    return 2;
}

/* The program's path into `dst` (as ferry_exec_string), and in the same
 * read as its first piece, the first batch of the environment array's
 * pointers (into `pre`), which build_env reads next: one read through the
 * kernel fewer in every exec served (~1.5 us of a shell's command). */
static long read_path_and_env(char *dst, const char *src, size_t cap, char *const *envp,
                              struct env_prefetch *pre)
{
    pre->bytes = 0;
    size_t chunk = 4096 - ((uintptr_t)src & 4095);
    if (chunk > cap - 1)
        chunk = cap - 1;
    struct iovec to[3], from[3];
    to[0] = (struct iovec){dst, chunk};
    from[0] = (struct iovec){(void *)src, chunk};
    int n = 1 + (envp ? env_pieces(envp, 0, pre->ptr, to + 1, from + 1) : 0);
    long got = ferry_read_pieces(ferry_memory_pid(), to, n, from, n);
    if (got < (long)chunk)
        return ferry_exec_string(dst, src, cap);  /* as the call will: EFAULT */
    pre->bytes = (size_t)got - chunk;
    for (size_t i = 0; i < chunk; i++)
        if (!dst[i])
            return (long)i;
    return ferry_exec_string(dst, src, cap);  /* a path that runs on into the next page */
}

/* The next batch of the environment array's pointers, from entry `from`,
 * and how far each head can be read (never past the end of its page: what
 * lies beyond may not exist). */
static int read_env_batch(char *const *array, size_t from, struct env_batch *b, long pid,
                          const struct env_prefetch *pre)
{
    long got;
    if (from == 0 && pre && pre->bytes >= sizeof(char *)) {
        ferry_memcpy(b->ptr, pre->ptr, pre->bytes);
        got = (long)pre->bytes;
    } else {
        struct iovec to[2], src[2];
        int pieces = env_pieces(array, from, b->ptr, to, src);
        got = ferry_read_pieces(pid, to, pieces, src, pieces);
    }
    if (got < (long)sizeof(char *))
        return -1;
    size_t want = (size_t)got / sizeof(char *);
    b->count = 0;
    b->last = 0;
    for (size_t i = 0; i < want; i++) {
        char *p = b->ptr[i];
        if (!p) {
            b->last = 1;
            break;
        }
        if (i == ENV_BATCH)  /* the pointer past the batch: not NULL, the next batch's */
            break;
        long len = 4096 - (long)((uintptr_t)p & 4095);
        b->len[i] = len < ENV_HEAD ? len : ENV_HEAD;
        b->count++;
    }
    return 0;
}

/* The environment the new program gets: the program's own, less Ferry's
 * settings, plus the run's, plus what `kind` needs (`libdir`: the directory
 * of cached rewritten libraries).  NULL when it does not fit (the program's
 * own is then passed unchanged). */
static char **build_env(char *const *user_envp, char **out, size_t cap, enum env_kind kind,
                        const char *libdir, struct env_extra *x)
{
    size_t n = 0, none = (size_t)-1, preload_at = none, libpath_at = none;
    int have_preload = 0, have_libpath = 0;
    char old_preload[1024], old_libpath[1024];
    struct env_batch batch;
    long pid = ferry_memory_pid();
    const size_t span_cap = x->span ? ENV_SPAN : ENV_SPAN_STACK;
    x->vars_used = 0;  /* what an environment built before holds is not this one's */
    for (size_t i = 0; user_envp; i += batch.count) {
        if (read_env_batch(user_envp, i, &batch, pid, x->pre))
            return 0;
        /* The heads, into a vfork child's scratch area, or onto the
         * program's stack, a buffer of what the pieces take (each page
         * written there is a fault); when a piece cannot be read whole (a
         * gap between mappings inside it), each head as a piece of its own,
         * which take no more than ENV_HEAD a head. */
        size_t need = plan_heads(&batch, span_cap, 0), alone = batch.count * ENV_HEAD;
        char own[x->span ? 1 : (need > alone ? need : alone) + 1];
        char *span = x->span ? x->span : own;
        if (read_heads(pid, &batch, span)) {
            plan_heads(&batch, span_cap, 1);
            if (read_heads(pid, &batch, span))
                return 0;
        }
        for (size_t k = 0; k < batch.count; k++) {
            char *p = batch.ptr[k], head[ENV_HEAD];
            long got = batch.len[k];
            ferry_memcpy(head, span + batch.at[k], (size_t)got);
            head[got < ENV_HEAD ? got : ENV_HEAD - 1] = 0;
            if (ferry_is_setting(head))
                continue;
            /* room for what goes after them: the settings kept, the hints
             * (exe, slot, the image's two names), the pad, two variables
             * and their markers, the NULL */
            if (n + nsaved + 10 >= cap)
                return 0;
            /* The first entry of a name is the one getenv reads, and ld.so
             * the last: later ones go.  Ours takes the first one's place,
             * where the new program's shim gives the old value back: one put
             * after the program's own variables moved a user's LD_PRELOAD or
             * LD_LIBRARY_PATH to the end of every enabled child's
             * environment. */
            if ((kind == ENV_PRELOAD || kind == ENV_LIBDIR) && got >= 11 &&
                ferry_memeq(head, "LD_PRELOAD=", 11)) {
                if (!have_preload) {
                    if (ferry_exec_string(old_preload, p + 11, sizeof(old_preload)) < 0)
                        return 0;
                    preload_at = n;
                    out[n++] = 0;  /* filled in below */
                }
                have_preload = 1;
                continue;
            }
            if (kind == ENV_LIBDIR && got >= 16 && ferry_memeq(head, "LD_LIBRARY_PATH=", 16)) {
                if (!have_libpath) {
                    if (ferry_exec_string(old_libpath, p + 16, sizeof(old_libpath)) < 0)
                        return 0;
                    libpath_at = n;
                    out[n++] = 0;
                }
                have_libpath = 1;
                continue;
            }
            out[n++] = p;
        }
        if (batch.last)
            break;
    }
    for (int i = 0; i < nsaved; i++)
        if (kind != ENV_WINE || ferry_wine_setting(saved[i]))
            out[n++] = saved[i];
    if (x->exe[0] && kind != ENV_WINE)
        out[n++] = x->exe;
    if (kind == ENV_RUN && x->self) {
        /* in `vars`, which only the other kinds use; an image whose names
         * do not fit runs as before, seeing its own name */
        char *var, *execfn = 0;
        if (add_setting("FERRY_SELF", x->self, x, &var) &&
            (!x->self_execfn || add_setting("FERRY_EXECFN", x->self_execfn, x, &execfn))) {
            out[n++] = var;
            if (execfn)
                out[n++] = execfn;
        }
    }
    /* A vfork child claims the program's slot beside its own (store.c), a
     * fork child was given one by its parent; its value is written after
     * the claim, before the exec. */
    x->slot_used = kind != ENV_WINE && (ferry_in_vfork_child() || ferry_slot_exec_left());
    if (x->slot_used) {
        ferry_memcpy(x->slot, "FERRY_SLOT=", 12);
        out[n++] = x->slot;
    }
    /* What the new program's shim takes out (environ.c): every setting, and
     * below a marker for each variable prepended to, with the variable too
     * where the marker says it was not set. */
    size_t gone = 0;
    for (size_t i = 0; i < n; i++)
        gone += out[i] && ferry_is_setting(out[i]);
    if (kind != ENV_RUN && kind != ENV_WINE)
        gone += 1 + !have_preload;
    if (kind == ENV_LIBDIR)
        gone += 1 + !have_libpath;
    if (gone & 1)
        out[n++] = (char *)FERRY_PAD_ENTRY;
    if (kind != ENV_RUN && kind != ENV_WINE) {
        /* Ours first; whatever the program preloads comes after. */
        char shim[1100];
        struct ferry_buf b = {shim, 0, sizeof(shim), 0};
        if (kind == ENV_LIBDIR) {
            ferry_buf_str(&b, libdir);
            ferry_buf_str(&b, "/libferry.so");
        } else {
            ferry_buf_str(&b, shim_path);
        }
        shim[b.overflow ? 0 : b.len] = 0;
        char *var, *marker;
        if (b.overflow || !add_var("LD_PRELOAD", shim, have_preload ? old_preload : 0, 0, x, &var, &marker))
            return 0;
        if (preload_at != none)
            out[preload_at] = var;
        else
            out[n++] = var;
        out[n++] = marker;
    }
    if (kind == ENV_LIBDIR) {
        /* The user's own directories first, as natively: the program
         * directory also links the system's libraries where ld.so looks
         * first (rewriter/instrument.py), which must not hide a library a
         * user points ld.so at. */
        char *var, *marker;
        if (!add_var("LD_LIBRARY_PATH", libdir, have_libpath ? old_libpath : 0, 1, x, &var, &marker))
            return 0;
        if (libpath_at != none)
            out[libpath_at] = var;
        else
            out[n++] = var;
        out[n++] = marker;
    }
    out[n] = 0;
    return out;
}

/* argv for running interpreter `interp` (with `arg`, may be empty) on the
 * script `script`, as the kernel would build it for a #! line. */
static char **script_argv(char *interp, char *arg, char *script, char *const *argv, char **out,
                          size_t cap)
{
    size_t n = 0;
    out[n++] = interp;
    if (arg[0])
        out[n++] = arg;
    out[n++] = script;
    char *p;
    for (size_t i = 1; argv; i++) {
        int got_ptr = ferry_exec_pointer(argv, i, &p);
        if (got_ptr < 0)
            return 0;
        if (!got_ptr)
            break;
        if (n + 1 >= cap)
            return 0;
        out[n++] = p;
    }
    out[n] = 0;
    return out;
}

/* Split a #! line into the interpreter and its one optional argument. */
static int parse_shebang(char *head, long got, char **interp, char **arg)
{
    if (got < 3 || head[0] != '#' || head[1] != '!')
        return 0;
    long end = 2;
    while (end < got && head[end] != '\n')
        end++;
    if (end >= got)
        return 0;
    head[end] = 0;
    char *p = head + 2;
    while (*p == ' ' || *p == '\t')
        p++;
    *interp = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    if (*p) {
        *p++ = 0;
        while (*p == ' ' || *p == '\t')
            p++;
    }
    char *q = p + ferry_strlen(p);
    while (q > p && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\r'))
        *--q = 0;
    *arg = p;
    return **interp != 0;
}

/* The hint that the file the kernel is handed, `st`, is the executable
 * itself (not a #! script it would run an interpreter for): its shim finds
 * its path from AT_EXECFN, without /proc (exepath.c).  NULL: no hint. */
static void exe_hint(struct env_extra *x, const struct stat *st)
{
    x->exe[0] = 0;
    if (!st)
        return;
    struct ferry_buf b = {x->exe, 0, sizeof(x->exe), 0};
    ferry_buf_str(&b, "FERRY_EXE=");
    ferry_buf_u64(&b, st->st_dev);
    ferry_buf_str(&b, ":");
    ferry_buf_u64(&b, st->st_ino);
    x->exe[b.overflow ? 0 : b.len] = 0;
}

/* The program's exec, of the image that stands for its file: made on its
 * behalf, so it is the program's (counted) call; only one that fails, after
 * which the hook makes another, is the shim's own. */
static void exec_image(const char *image, char *const *argv, char *const *envp)
{
    ferry_pass6(SYS_execve, (long)image, (long)argv, (long)envp, 0, 0, 0);
    ferry_store_exec_failed();  /* a vfork child's counters are its own again */
    ferry_tally_one(SYS_execve);
}

/* Run what the cache holds (`c`, `image`, of status `img`) for the file
 * `name`: exec its rewritten image with `xargv` (returns only if that exec
 * failed), or, for a program whose own file runs with its cached libraries
 * first, put that environment in *use_env and return 1 (`own`: the status
 * of that file when the kernel is handed it as the executable, else NULL).
 * 0 otherwise; *unserved is set when the run's settings did not fit beside
 * the program's environment (or `xargv` could not be made), so that the
 * report says so. */
static int use_cached(enum cached c, const char *image, const char *name, char *const *xargv,
                      char *const *envp, char **env, struct env_extra *x, char *const **use_env,
                      int *unserved, const struct stat *img, const struct stat *own)
{
    char **built;
    if (c == CACHED_IMAGE) {
        exe_hint(x, img);
        if (xargv && (built = build_env(envp, env, MAX_ENV, ENV_RUN, 0, x))) {
            ferry_store_exec_begin(name, FERRY_EXEC_REWRITTEN, slot_entry(x), sizeof(x->slot));
            exec_image(image, xargv, built);
        } else {
            *unserved = 1;
        }
    } else if (c == CACHED_LIBDIR) {
        exe_hint(x, own);
        if ((built = build_env(envp, env, MAX_ENV, ENV_LIBDIR, image, x))) {
            *use_env = built;
            return 1;
        }
        *unserved = 1;
    }
    return 0;
}

/* Start the Windows program `target` through ferry-launch.exe (exec_wine.h,
 * `direct` as there): returns only if it is none, or that exec failed. */
__attribute__((noinline)) static void exec_wine(const char *target, int direct, const char *path, char *const *argv,
                      char *const *envp, char **env, char **args, struct env_extra *x)
{
    char prog[2 * PATH_MAX_WINE], **wargv, **built;
    const char *wine;
    if ((wargv = ferry_wine_argv(target, direct, argv, args, MAX_ARGS, prog, sizeof(prog), &wine)) &&
        (built = build_env(envp, env, MAX_ENV, ENV_WINE, 0, x))) {
        ferry_store_exec_begin(path, FERRY_EXEC_WINDOWS, 0, 0);
        exec_image(wine, wargv, built);
    }
}

/* The call as the program made it, but for its environment. */
static long pass(const struct ferry_regs *r, int at, char *const *envp)
{
    if (at)
        return ferry_pass6(r->rax, r->rdi, r->rsi, r->rdx, (long)envp, r->r8, r->r9);
    return ferry_pass6(r->rax, r->rdi, r->rsi, (long)envp, r->r10, r->r8, r->r9);
}

long ferry_exec(const struct ferry_regs *r)
{
    int at = r->rax == SYS_execveat;
    const char *upath = (const char *)(at ? r->rsi : r->rdi);
    char *const *argv = (char *const *)(at ? r->rdx : r->rsi);
    char *const *envp = (char *const *)(at ? r->r10 : r->rdx);
    char path[PATH_MAX_], target[PATH_MAX_], image[2300], head[1024];
    struct env_extra extra, *x = &extra;
    exe_hint(x, 0);
    x->slot_used = 0;
    x->self = x->self_execfn = 0;
    /* Off the stack in a vfork child: its hook's stack has no room for them
     * beside the frames (nor for a span of the environment, which other
     * execs read by parts). */
    char **env = ferry_vfork_scratch(), **args;
    x->span = env ? (char *)(env + MAX_ENV + MAX_ARGS) : 0;
    if (!env)
        env = __builtin_alloca((MAX_ENV + MAX_ARGS) * sizeof(char *));
    args = env + MAX_ENV;
    struct stat st, img;
    long got = 0;
    ferry_store_span(FERRY_SPAN_EXEC_HOOK, ferry_rdtsc());

    struct env_prefetch pre;
    x->pre = &pre;
    if (read_path_and_env(path, upath, sizeof(path), envp, &pre) < 0)
        path[0] = 0;
    /* The file the call names, as a path we can stat and open. */
    struct ferry_buf t = {target, 0, sizeof(target), 0};
    if (at && (int)r->rdi != AT_FDCWD && path[0] != '/') {
        ferry_buf_str(&t, "/proc/self/fd/");
        ferry_buf_i64(&t, (int)r->rdi);
        if (path[0]) {
            ferry_buf_str(&t, "/");
            ferry_buf_str(&t, path);
        }
    } else {
        ferry_buf_str(&t, path);
    }
    target[t.overflow ? 0 : t.len] = 0;

    /* A program the shim cannot serve keeps exactly the environment it was
     * given: nothing of Ferry's reaches it. */
    char *const *use_env = envp;
    char **built;
    uint32_t kind = FERRY_EXEC_UNKNOWN;
    /* Ferry's settings did not fit beside the program's environment (or it
     * could not be read): the program runs without the shim, and says why. */
    int unserved = 0, scripted = 0;
    /* A filter stays in force across an exec, and the new program's shim
     * would start not knowing it, its start's calls the filter's to kill:
     * the program runs as it is (sandbox.h). */
    if (ferry_sandbox_on) {
        kind = FERRY_EXEC_SANDBOXED;
        goto pass;
    }
    if (target[0] && ferry_wine_is_loader(target))
        exec_wine(target, 0, path, argv, envp, env, args, x);
    ferry_store_hook_step(FERRY_HOOK_PATH);
    if (target[0]) {
        long err;
        int priv;
        enum cached c = cached_image(target, image, sizeof(image), &st, &img, &err, &priv);
        ferry_store_hook_step(FERRY_HOOK_CACHE);
        /* Most execs of a vfork child fail: a PATH search (posix_spawnp's,
         * make's, gcc's for `as`) tries each directory in turn.  Writing the
         * child's record before each was ~20 calls, ~14 us a try; for a file
         * that is not there the kernel will say what the stat just said, and
         * nothing is written (should it appear in between, the exec runs it
         * unserved, as the hook would have, and the parent writes the
         * record: store.c). */
        if ((err == -ENOENT || err == -ENOTDIR) && ferry_store_exec_unseen(path))
            return pass(r, at, envp);
        /* What an image sees of itself is the file the exec named (not said
         * of a name relative to another directory's descriptor), or, for
         * this process's own image (by /proc/self/exe), what this process
         * was told of itself. */
        int named = target[0] && ferry_memeq(target, path, ferry_strlen(path) + 1);
        const char *own = ferry_self_on && st.st_mode ? ferry_self_image(&st) : 0;  /* cold text */
        x->self = own ? own : named ? path : 0;
        x->self_execfn = own && named ? path : 0;
        /* The program's own file, its cached libraries first: what it sees
         * of itself (/proc/self/exe, AT_EXECFN, $ORIGIN) stays its own. */
        if (use_cached(c, image, path, argv, envp, env, x, &use_env, &unserved, &img,
                       at ? 0 : &st)) {
            kind = FERRY_EXEC_REWRITTEN;
            goto pass;
        }
        if (st.st_mode)
            kind = priv ? FERRY_EXEC_SETUID : classify(target, &st, head, sizeof(head) - 1, &got);
        /* A Windows program starts "MZ" (a set-id file's first bytes are not
         * read): asked here, after the cache, whose programs are all ELF,
         * the question costs an exec of one nothing. */
        if (kind == FERRY_EXEC_SETUID || (kind == FERRY_EXEC_UNKNOWN && got >= 2 && head[0] == 'M' &&
                                          head[1] == 'Z'))
            exec_wine(target, 1, path, argv, envp, env, args, x);
        /* This process's own image runs as it is, as a static program's
         * named by its place in the cache does. */
        if (own || static_image_in_cache(target, kind)) {
            exe_hint(x, 0);  /* the image's shim asks /proc (exepath.c) */
            if (!own)
                x->self = 0;
            if ((built = build_env(envp, env, MAX_ENV, ENV_RUN, 0, x))) {
                use_env = built;
                kind = FERRY_EXEC_REWRITTEN;
            } else {
                unserved = 1;
            }
            goto pass;
        }
        char *interp, *arg;
        if (kind == FERRY_EXEC_UNKNOWN && parse_shebang(head, got, &interp, &arg)) {
            scripted = 1;
            struct stat ist;
            c = cached_image(interp, image, sizeof(image), &ist, &img, &err, &priv);
            x->self = named ? interp : 0;
            x->self_execfn = named ? path : 0;
            char **sargv = c == CACHED_IMAGE ? script_argv(interp, arg, path, argv, args, MAX_ARGS) : 0;
            /* With its cached libraries, the kernel runs the script as it
             * would: only the interpreter's libraries change. */
            if (use_cached(c, image, interp, sargv, envp, env, x, &use_env, &unserved, &img, 0)) {
                kind = FERRY_EXEC_REWRITTEN;
                goto pass;
            }
            /* `interp` lives in `head`, which classify() reads into. */
            size_t ilen = ferry_strlen(interp);
            if (ilen >= sizeof(target))
                ilen = sizeof(target) - 1;
            ferry_memcpy(target, interp, ilen);
            target[ilen] = 0;
            kind = !ist.st_mode ? FERRY_EXEC_UNKNOWN
                   : priv       ? FERRY_EXEC_SETUID
                                : classify(target, &ist, head, sizeof(head) - 1, &got);
        }
    }
    /* No rewritten image: preload the shim, which patches the program's
     * libraries in memory from their cached plans. */
    if (kind == FERRY_EXEC_PLAIN && shim_path) {
        exe_hint(x, at || scripted ? 0 : &st);
        if ((built = build_env(envp, env, MAX_ENV, ENV_PRELOAD, 0, x)))
            use_env = built;
        else
            unserved = 1;
    }
    if (unserved && use_env == envp && kind != FERRY_EXEC_SETUID)
        kind = FERRY_EXEC_NO_ROOM;
pass:
    ferry_store_hook_step(FERRY_HOOK_ENV);
    ferry_store_exec_begin(path, kind, use_env != envp ? slot_entry(x) : 0, sizeof(x->slot));
    return pass(r, at, use_env);
}
