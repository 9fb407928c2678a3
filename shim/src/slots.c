/* Process records as slots of shared files (slots.h, procfile.h).
 *
 * proc/ may be writable by every user (sticky, when the run changes users):
 * a slot file is only used when it is a regular file owned by the process's
 * effective user and writable by nobody else, opened with O_NOFOLLOW; one
 * that is not (someone else made the name) is passed over for the next k.
 * A process that drops privileges keeps its mapping of its own slot, as it
 * kept its own file's.
 */
#define _GNU_SOURCE
#include "slots.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include "raw.h"
#include "util.h"

#define MAX_FILES 64
/* A slot file's room at most (sparse; ext4 takes files up to 16 TiB): the
 * default trace profile's slots (264 MiB) ~4000 to a file, the largest
 * event buffers' (512 GiB) 2. */
#define MAX_BYTES (1ULL << 40)

/* The file slots were last claimed from: a vfork child claims from it
 * without mapping anything. */
static struct {
    int valid;
    uint32_t file;
    uint32_t uid;
    uint32_t in_memory;     /* the file's head says it is on a tmpfs */
    uint64_t stride;
} cur;

/* Slots of `cur`'s file claimed ahead for this process's vfork children,
 * [next, end) packed in one word that their claims take from with a
 * compare-and-swap (children of several threads claim at once; a vfork
 * child's memory is its parent's, so the word is the parent's).  Each
 * child's claim under the file's lock was four calls of its own (flock,
 * pread, ftruncate, flock) in every command a shell ran; a claim takes
 * slots for `ahead_children` children now, twice as many each time up to
 * AHEAD_MAX, so that a process that starts one child leaves no slot
 * unused, and one that starts more at most as many as it used (a slot
 * never written is skipped by the reader, and costs the sparse file
 * nothing).  A fork child starts with none: those left are its parent's. */
#define AHEAD_MAX 16
#define AHEAD(file, next, end) (1ULL << 63 | (uint64_t)(file) << 32 | (uint64_t)(next) << 16 | (end))
#define AHEAD_FILE(a) ((uint32_t)((a) >> 32 & 0x7fff))
#define AHEAD_NEXT(a) ((uint32_t)((a) >> 16 & 0xffff))
#define AHEAD_END(a) ((uint32_t)((a) & 0xffff))
_Static_assert(FERRY_SLOTS_MAX <= 0xffff && MAX_FILES <= 0x7fff, "slots claimed ahead fit their word");
static uint64_t ahead FERRY_HOT;
static uint32_t ahead_children FERRY_HOT;
/* The slot a fork child's parent took for the program the child may exec
 * (packed as `ahead` is), apart from `ahead`: there a single slot left
 * kept the child's own claims for its vfork children from being kept
 * (a subshell's commands each claimed under the lock again). */
static uint64_t exec_slot FERRY_HOT;

/* Before the first file is open nothing is tallied (`tally` NULL: through
 * ferry_internal, if the caller has one); after it, into `tally`. */
static long sc(struct ferry_tally *tally, long nr, long a, long b, long c, long d, long e, long f)
{
    if (!tally)
        return ferry_raw6(nr, a, b, c, d, e, f);
    uint32_t k = 0;
    while (k < tally->kinds && tally->of[k].nr != nr)
        k++;
    if (k == tally->kinds && k < FERRY_TALLY_KINDS) {
        tally->of[k].nr = (uint16_t)nr;
        tally->of[k].count = 0;
        tally->kinds++;
    }
    if (k < tally->kinds)
        tally->of[k].count++;
    return ferry_pass6(nr, a, b, c, d, e, f);
}

static int file_name(char *out, size_t cap, const char *dir, uint32_t uid, uint32_t k)
{
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, dir);
    ferry_buf_str(&b, "/proc/u");
    ferry_buf_u64(&b, uid);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, k);
    ferry_buf_str(&b, ".ferry");
    out[b.overflow ? 0 : b.len] = 0;
    return b.overflow ? -ENAMETOOLONG : 0;
}

static long open_file(const char *dir, uint32_t uid, uint32_t k, int flags, struct ferry_tally *tally)
{
    char path[2300];
    if (file_name(path, sizeof(path), dir, uid, k))
        return -ENAMETOOLONG;
    return sc(tally, SYS_openat, AT_FDCWD, (long)path, flags | O_NOFOLLOW | O_CLOEXEC, 0644, 0, 0);
}

static int trusted(const struct stat *s, uint32_t uid)
{
    return S_ISREG(s->st_mode) && s->st_uid == uid && !(s->st_mode & 022);
}

/* A new file's head, written by whoever first holds the file's lock and
 * finds it empty (its maker, or another process that opened it before its
 * maker took the lock).  Whoever takes the lock after finds it whole. */
static int make_head(long fd, uint64_t stride, struct ferry_tally *tally)
{
    uint64_t cap = MAX_BYTES / stride;
    if (cap > FERRY_SLOTS_MAX)
        cap = FERRY_SLOTS_MAX;
    if (!cap)
        cap = 1;
    struct ferry_slots_head h;
    ferry_memset(&h, 0, sizeof(h));
    ferry_memcpy(h.magic, FERRY_SLOTS_MAGIC, 16);
    h.version = FERRY_SLOTS_VERSION;
    h.capacity = (uint32_t)cap;
    h.stride = stride;
    h.ready = 1;
    /* `ferry run` keeps the records on a tmpfs while the program runs: said
     * once for the file, where each mapping of it asked MADV_RANDOM */
    struct statfs fs;
    h.in_memory = sc(tally, SYS_fstatfs, fd, (long)&fs, 0, 0, 0, 0) == 0 && fs.f_type == TMPFS_MAGIC;
    if (sc(tally, SYS_ftruncate, fd, FERRY_SLOTS_HEAD, 0, 0, 0, 0) ||
        sc(tally, SYS_pwrite64, fd, (long)&h, sizeof(h), 0, 0, 0) != (long)sizeof(h))
        return -EIO;
    return 0;
}

/* Claim the next `count` slots of the open file `fd`, under its lock: the
 * file's size says how many are claimed (slot i ends at FERRY_SLOTS_HEAD +
 * (i + 1) * stride), and it grows by the slots claimed.  The head is read, not
 * mapped: mapping it (and the two faults of its page) cost more than the
 * rest of the claim.  ftruncate only sets the size (fallocate allocated a
 * block of disk for every process, ~3% of a /bin/true's start).  0 with
 * *off set; -ENOSPC when the file is full; another -errno when it is not
 * a file this process may use (someone else's, another stride). */
static int claim(long fd, uint32_t uid, uint64_t stride, uint32_t count, uint64_t *off,
                 uint32_t *in_memory, struct ferry_tally *tally)
{
    long rc = sc(tally, SYS_flock, fd, LOCK_EX, 0, 0, 0, 0);
    if (rc)
        return (int)rc;
    struct stat s;
    struct ferry_slots_head h;
    rc = sc(tally, SYS_fstat, fd, (long)&s, 0, 0, 0, 0);
    if (!rc && !trusted(&s, uid))
        rc = -EACCES;
    /* `ferry run` moved the run's records out of memory while this waited
     * for the lock (ferry/staging.py): the name leads to the moved file */
    if (!rc && s.st_nlink == 0)
        rc = -ESTALE;
    if (!rc && (uint64_t)s.st_size < FERRY_SLOTS_HEAD) {
        rc = make_head(fd, stride, tally);
        s.st_size = FERRY_SLOTS_HEAD;
    }
    if (!rc && sc(tally, SYS_pread64, fd, (long)&h, sizeof(h), 0, 0, 0) != (long)sizeof(h))
        rc = -EIO;
    if (!rc && (!ferry_memeq(h.magic, FERRY_SLOTS_MAGIC, 16) || h.version != FERRY_SLOTS_VERSION ||
                !h.ready || h.stride != stride))
        rc = -EINVAL;
    uint64_t idx = 0;
    if (!rc) {
        *in_memory = h.in_memory == 1;
        idx = ((uint64_t)s.st_size - FERRY_SLOTS_HEAD + stride - 1) / stride;
        if (idx + count > h.capacity)
            rc = -ENOSPC;
    }
    if (!rc) {
        *off = FERRY_SLOTS_HEAD + idx * stride;
        rc = sc(tally, SYS_ftruncate, fd, (long)(*off + count * stride), 0, 0, 0, 0);
    }
    sc(tally, SYS_flock, fd, LOCK_UN, 0, 0, 0, 0);
    return (int)rc;
}

uint32_t ferry_slot_uid(void)
{
    return cur.uid;
}

int ferry_slot_in_memory(void)
{
    return cur.valid && cur.in_memory;
}

static void remember(uint32_t k, uint32_t uid, uint64_t stride, uint32_t in_memory)
{
    cur.valid = 1;
    cur.file = k;
    cur.uid = uid;
    cur.stride = stride;
    cur.in_memory = in_memory;
}

/* Slot `off` of file k, open as `fd`, mapped; -errno if it could not be. */
static long map_slot(long fd, uint32_t uid, uint32_t k, uint64_t stride, uint64_t off, uint64_t map_size,
                     uint32_t in_memory, struct ferry_slot *slot, struct ferry_tally *tally)
{
    long p = sc(tally, SYS_mmap, 0, (long)map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (long)off);
    if (!IS_ERR(p)) {
        /* before the first touch: no readahead over the slot's holes */
        if (!in_memory)
            sc(tally, SYS_madvise, p, (long)map_size, MADV_RANDOM, 0, 0, 0);
        *slot = (struct ferry_slot){k, (uint32_t)((off - FERRY_SLOTS_HEAD) / stride), off};
        remember(k, uid, stride, in_memory);
    }
    return p;
}

struct ferry_proc_header *ferry_slot_map_claimed(const char *dir, uint32_t uid, uint64_t stride,
                                                 uint64_t map_size, const struct ferry_slot_hint *hint,
                                                 struct ferry_slot *slot, struct ferry_tally *tally)
{
    if (hint->uid != uid || hint->stride != stride || hint->file >= MAX_FILES)
        return 0;
    long fd = open_file(dir, uid, hint->file, O_RDWR, 0);
    if (fd < 0)
        return 0;
    /* The file the hint's slot was claimed in, or where `ferry run` moved it
     * meanwhile (the name leads there; the move keeps every slot where it
     * was): this user's, whole up to the slot's end. */
    struct stat s;
    uint64_t off = FERRY_SLOTS_HEAD + (uint64_t)hint->index * stride;
    long p = -1;
    if (sc(tally, SYS_fstat, fd, (long)&s, 0, 0, 0, 0) == 0 && trusted(&s, uid) && s.st_nlink &&
        (uint64_t)s.st_size >= off + stride)
        p = map_slot(fd, uid, hint->file, stride, off, map_size, hint->in_memory, slot, tally);
    sc(tally, SYS_close, fd, 0, 0, 0, 0, 0);
    return IS_ERR(p) ? 0 : (struct ferry_proc_header *)p;
}

struct ferry_proc_header *ferry_slot_map(const char *dir, uint32_t uid, uint64_t stride, uint64_t map_size,
                                         struct ferry_slot *slot, struct ferry_tally *tally)
{
    struct ferry_tally *t = 0;  /* nothing tallied before the first file is open */
    uint32_t k = (cur.valid && cur.uid == uid && cur.stride == stride) ? cur.file : 0;
    int moved = 0;
    for (; k < MAX_FILES; k++) {
        long fd = open_file(dir, uid, k, O_RDWR, t);
        if (fd == -ENOENT) {
            fd = open_file(dir, uid, k, O_RDWR | O_CREAT | O_EXCL, t);
            if (fd == -EEXIST /* made meanwhile */)
                fd = open_file(dir, uid, k, O_RDWR, t);
        }
        if (fd == -EACCES || fd == -ELOOP)
            continue;  /* another user's name: not ours to use */
        if (fd < 0)
            break;
        t = tally;
        uint64_t off = 0;
        uint32_t in_memory = 0;
        int rc = claim(fd, uid, stride, 1, &off, &in_memory, t);
        long p = rc ? -1 : map_slot(fd, uid, k, stride, off, map_size, in_memory, slot, t);
        sc(t, SYS_close, fd, 0, 0, 0, 0, 0);
        if (!IS_ERR(p))
            return (struct ferry_proc_header *)p;
        if (rc == -ESTALE && moved++ < 4) {
            k--;  /* the same name again */
            continue;
        }
        /* a file system that cannot hold even a file's first slot holds none */
        if (rc != -ENOSPC && rc != -EACCES && rc != -EINVAL)
            break;
    }
    return 0;
}

/* `count` slots of those a packed word (`ahead`, `exec_slot`) holds, taken
 * with a compare-and-swap (vfork children of several threads take at once). */
static int take_from(uint64_t *from, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot)
{
    if (!cur.valid || cur.uid != uid || cur.stride != stride)
        return -ENOENT;
    uint64_t a = __atomic_load_n(from, __ATOMIC_RELAXED);
    for (;;) {
        if (!a || AHEAD_FILE(a) != cur.file || AHEAD_NEXT(a) + count > AHEAD_END(a))
            return -ENOENT;
        uint64_t taken = AHEAD(AHEAD_FILE(a), AHEAD_NEXT(a) + count, AHEAD_END(a));
        if (__atomic_compare_exchange_n(from, &a, taken, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            break;
    }
    *slot = (struct ferry_slot){cur.file, AHEAD_NEXT(a), FERRY_SLOTS_HEAD + AHEAD_NEXT(a) * stride};
    return 0;
}

int ferry_slot_take(uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot)
{
    return take_from(&ahead, uid, stride, count, slot);
}

/* `count` slots from those claimed ahead, if they hold as many: the
 * file open for writing (this user's, reaching past them), or -errno. */
static int take_ahead(const char *dir, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot,
                      struct ferry_tally *tally)
{
    if (ferry_slot_take(uid, stride, count, slot))
        return -ENOENT;
    uint64_t size = 0;
    int fd = ferry_slot_reopen(dir, uid, slot, tally, 0, &size);
    if (fd >= 0 && size < slot->off + count * stride) {  /* it must reach past them all */
        sc(tally, SYS_close, fd, 0, 0, 0, 0, 0);
        fd = -ESTALE;
    }
    if (fd < 0)  /* the file is no longer one to write to: claim anew */
        __atomic_store_n(&ahead, 0, __ATOMIC_RELAXED);
    return fd;
}

int ferry_slot_open(const char *dir, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot,
                    struct ferry_tally *tally)
{
    if (!cur.valid || cur.uid != uid || cur.stride != stride)
        return -ENOENT;
    int fd = take_ahead(dir, uid, stride, count, slot, tally);
    if (fd >= 0)
        return fd;
    uint32_t children = ahead_children ? ahead_children : 1;
    uint32_t want = count * children;
    uint64_t off = 0;
    int rc = -ESTALE;
    for (int moved = 0; rc == -ESTALE && moved < 4; moved++) {
        fd = (int)open_file(dir, uid, cur.file, O_RDWR, tally);
        if (fd < 0)
            return fd;
        rc = claim(fd, uid, stride, want, &off, &cur.in_memory, tally);
        if (rc == -ENOSPC && want > count) {    /* the file's last slots: only ours */
            want = count;
            rc = claim(fd, uid, stride, want, &off, &cur.in_memory, tally);
        }
        if (rc)
            sc(tally, SYS_close, fd, 0, 0, 0, 0, 0);
    }
    if (rc)
        return rc;
    uint32_t index = (uint32_t)((off - FERRY_SLOTS_HEAD) / stride);
    *slot = (struct ferry_slot){cur.file, index, off};
    if (want > count) {
        /* the rest for the next children, unless another claim put its own
         * there meanwhile (then these stay unused) */
        uint64_t a = __atomic_load_n(&ahead, __ATOMIC_RELAXED);
        if (!a || AHEAD_FILE(a) != cur.file || AHEAD_NEXT(a) >= AHEAD_END(a))
            __atomic_compare_exchange_n(&ahead, &a, AHEAD(cur.file, index + count, index + want), 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    if (children < AHEAD_MAX)
        ahead_children = children * 2;
    return fd;
}

void ferry_slots_after_fork(void)
{
    ahead = 0;
    ahead_children = 0;
    exec_slot = 0;
}

int ferry_slot_reserve(const char *dir, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot)
{
    if (ferry_slot_take(uid, stride, count, slot) == 0)
        return 0;
    int fd = ferry_slot_open(dir, uid, stride, count, slot, 0);
    if (fd < 0)
        return fd;
    ferry_raw1(SYS_close, fd);
    return 0;
}

void ferry_slots_given(const struct ferry_slot *slot, uint32_t uid, uint64_t stride, struct ferry_slot_hint *hint)
{
    *hint = (struct ferry_slot_hint){uid, slot->file, slot->index, cur.in_memory, stride};
    exec_slot = AHEAD(slot->file, slot->index + 1, slot->index + 2);
}

int ferry_slot_exec_left(void)
{
    uint64_t a = __atomic_load_n(&exec_slot, __ATOMIC_RELAXED);
    return a && AHEAD_NEXT(a) < AHEAD_END(a);
}

int ferry_slot_take_exec(uint32_t uid, uint64_t stride, struct ferry_slot *slot)
{
    return take_from(&exec_slot, uid, stride, 1, slot);
}

int ferry_slot_reopen(const char *dir, uint32_t uid, const struct ferry_slot *slot, struct ferry_tally *tally,
                      int sized, uint64_t *size)
{
    long fd = open_file(dir, uid, slot->file, O_WRONLY, tally);
    if (fd < 0)
        return (int)fd;
    struct stat s;
    if (sc(tally, SYS_fstat, fd, (long)&s, 0, 0, 0, 0) || !trusted(&s, uid) ||
        (sized && (uint64_t)s.st_size < slot->off + FERRY_PROC_HEADER_SIZE)) {
        sc(tally, SYS_close, fd, 0, 0, 0, 0, 0);
        return -1;
    }
    if (size)
        *size = (uint64_t)s.st_size;
    return (int)fd;
}
