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
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "raw.h"
#include "util.h"

#define IS_ERR(v) ((unsigned long)(v) > -4096UL)
#define MAX_FILES 64
/* A slot file's room at most (sparse; ext4 takes files up to 16 TiB): the
 * default trace profile's slots (264 MiB) ~4000 to a file, the largest
 * event buffers' (512 GiB) 2. */
#define MAX_BYTES (1ULL << 40)
/* How long a file another process is still making is waited for (yields)
 * before it is taken for one whose maker died, and passed over. */
#define WAIT_ROUNDS 4000

/* The head slots were last claimed from: a vfork child claims from it
 * without mapping anything. */
static struct {
    struct ferry_slots_head *head;
    uint32_t file;
    uint32_t uid;
    uint64_t stride;
} cur;

/* Before the first file is open nothing is tallied (`tally` NULL: through
 * ferry_internal, if the caller has one); after it, into `tally`. */
static long sc(uint64_t *tally, long nr, long a, long b, long c, long d, long e, long f)
{
    if (!tally)
        return ferry_raw6(nr, a, b, c, d, e, f);
    if ((unsigned long)nr < FERRY_NR_MAX)
        tally[nr]++;
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

/* The head's page, shared; like the slots, read with no pages ahead: the
 * ones that follow it are holes. */
static long map_head_page(long fd, uint64_t *tally)
{
    long p = sc(tally, SYS_mmap, 0, FERRY_SLOTS_HEAD, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!IS_ERR(p))
        sc(tally, SYS_madvise, p, FERRY_SLOTS_HEAD, MADV_RANDOM, 0, 0, 0);
    return p;
}

static long open_file(const char *dir, uint32_t uid, uint32_t k, int flags, uint64_t *tally)
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

/* A new file's head: the file grows by a slot as each is claimed. */
static int make_head(long fd, uint64_t stride, uint64_t *tally)
{
    uint64_t cap = MAX_BYTES / stride;
    if (cap > FERRY_SLOTS_MAX)
        cap = FERRY_SLOTS_MAX;
    if (!cap)
        cap = 1;
    if (sc(tally, SYS_ftruncate, fd, FERRY_SLOTS_HEAD, 0, 0, 0, 0))
        return -EIO;
    long p = map_head_page(fd, tally);
    if (IS_ERR(p))
        return -ENOMEM;
    struct ferry_slots_head *h = (void *)p;
    ferry_memcpy(h->magic, FERRY_SLOTS_MAGIC, 16);
    h->version = FERRY_SLOTS_VERSION;
    h->capacity = (uint32_t)cap;
    h->stride = stride;
    __atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
    sc(tally, SYS_munmap, p, FERRY_SLOTS_HEAD, 0, 0, 0, 0);
    return 0;
}

/* The head of an open file, mapped, once its maker is done with it; NULL
 * when it is not one this process may use. */
static struct ferry_slots_head *map_head(long fd, uint32_t uid, uint64_t stride, uint64_t *size,
                                         uint64_t *tally)
{
    struct stat s;
    for (int round = 0; round < WAIT_ROUNDS; round++) {
        if (sc(tally, SYS_fstat, fd, (long)&s, 0, 0, 0, 0) || !trusted(&s, uid))
            return 0;
        if ((uint64_t)s.st_size >= FERRY_SLOTS_HEAD)
            break;
        sc(tally, SYS_sched_yield, 0, 0, 0, 0, 0, 0);  /* its maker is sizing it */
    }
    if ((uint64_t)s.st_size < FERRY_SLOTS_HEAD)
        return 0;
    *size = (uint64_t)s.st_size;
    long p = map_head_page(fd, tally);
    if (IS_ERR(p))
        return 0;
    struct ferry_slots_head *h = (void *)p;
    for (int round = 0; round < WAIT_ROUNDS && !__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE); round++)
        sc(tally, SYS_sched_yield, 0, 0, 0, 0, 0, 0);
    if (__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) && ferry_memeq(h->magic, FERRY_SLOTS_MAGIC, 16) &&
        h->stride == stride)
        return h;
    sc(tally, SYS_munmap, p, FERRY_SLOTS_HEAD, 0, 0, 0, 0);
    return 0;
}

/* The file reaches at least to the end of the slot at `off`, so that no
 * page of it is past the end.  Its size grows under the file's lock: two
 * processes' ftruncate could otherwise shrink it below the other's slot.
 * ftruncate only sets the size (fallocate allocated a block of disk for
 * every process, ~3% of a /bin/true's start), and the size is the room of
 * the slots claimed, no more: a copy of the run that fills holes writes no
 * room nobody claimed.  `size`: the file's, as last seen. */
static int extend(long fd, uint64_t off, uint64_t stride, uint64_t size, uint64_t *tally)
{
    uint64_t end = off + stride;
    if (size >= end)
        return 0;  /* a later slot's process grew it past this one */
    long rc = sc(tally, SYS_flock, fd, LOCK_EX, 0, 0, 0, 0);
    if (rc)
        return (int)rc;
    struct stat s;
    rc = sc(tally, SYS_fstat, fd, (long)&s, 0, 0, 0, 0);
    if (!rc && (uint64_t)s.st_size < end)
        rc = sc(tally, SYS_ftruncate, fd, (long)end, 0, 0, 0, 0);
    sc(tally, SYS_flock, fd, LOCK_UN, 0, 0, 0, 0);
    return (int)rc;
}

struct ferry_proc_header *ferry_slot_map(const char *dir, uint64_t stride, uint64_t map_size,
                                         struct ferry_slot *slot, uint64_t *tally)
{
    uint32_t uid = (uint32_t)ferry_raw0(SYS_geteuid);
    uint64_t *t = 0;  /* nothing tallied before the first file is open */
    uint32_t k = (cur.head && cur.uid == uid && cur.stride == stride) ? cur.file : 0;
    for (; k < MAX_FILES; k++) {
        long fd = open_file(dir, uid, k, O_RDWR, t);
        if (fd == -ENOENT) {
            fd = open_file(dir, uid, k, O_RDWR | O_CREAT | O_EXCL, t);
            if (fd >= 0) {
                t = tally;
                if (make_head(fd, stride, t)) {
                    sc(t, SYS_close, fd, 0, 0, 0, 0, 0);
                    continue;
                }
            } else if (fd == -EEXIST /* made meanwhile */)
                fd = open_file(dir, uid, k, O_RDWR, t);
        }
        if (fd == -EACCES || fd == -ELOOP)
            continue;  /* another user's name: not ours to use */
        if (fd < 0)
            break;
        t = tally;
        uint64_t size = 0;
        struct ferry_slots_head *h = map_head(fd, uid, stride, &size, t);
        uint32_t idx = h ? __atomic_fetch_add(&h->next, 1, __ATOMIC_ACQ_REL) : 0;
        long p = -1;
        uint64_t off = FERRY_SLOTS_HEAD + (uint64_t)idx * stride;
        int grown = h && idx < h->capacity && extend(fd, off, stride, size, t) == 0;
        /* a file system that cannot hold even a file's first slot holds none */
        int hopeless = h && idx == 0 && !grown;
        if (grown) {
            p = sc(t, SYS_mmap, 0, (long)map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (long)off);
            if (!IS_ERR(p)) {
                /* before the first touch: no readahead over the slot's holes */
                sc(t, SYS_madvise, p, (long)map_size, MADV_RANDOM, 0, 0, 0);
                *slot = (struct ferry_slot){k, idx, off};
            }
        }
        sc(t, SYS_close, fd, 0, 0, 0, 0, 0);
        if (h && h != cur.head) {
            if (cur.head)
                sc(t, SYS_munmap, (long)cur.head, FERRY_SLOTS_HEAD, 0, 0, 0, 0);
            cur.head = h;
            cur.file = k;
            cur.uid = uid;
            cur.stride = stride;
        }
        if (!IS_ERR(p))
            return (struct ferry_proc_header *)p;
        if (hopeless)
            break;
    }
    return 0;
}

int ferry_slot_open(const char *dir, uint64_t stride, struct ferry_slot *slot, uint64_t *tally)
{
    uint32_t uid = (uint32_t)ferry_raw0(SYS_geteuid);
    struct ferry_slots_head *h = cur.head;
    if (!h || cur.uid != uid || cur.stride != stride)
        return -ENOENT;
    uint32_t idx = __atomic_fetch_add(&h->next, 1, __ATOMIC_ACQ_REL);
    if (idx >= h->capacity)
        return -ENOSPC;
    *slot = (struct ferry_slot){cur.file, idx, FERRY_SLOTS_HEAD + (uint64_t)idx * stride};
    uint64_t size = 0;
    int fd = ferry_slot_reopen(dir, slot, tally, 0, &size);
    if (fd >= 0 && extend(fd, slot->off, stride, size, tally)) {
        sc(tally, SYS_close, fd, 0, 0, 0, 0, 0);
        return -ENOSPC;
    }
    return fd;
}

int ferry_slot_reopen(const char *dir, const struct ferry_slot *slot, uint64_t *tally, int sized,
                      uint64_t *size)
{
    uint32_t uid = (uint32_t)ferry_raw0(SYS_geteuid);
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
