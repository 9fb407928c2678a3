#define _GNU_SOURCE
#include "store.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>

#include "exec.h"
#include "exepath.h"
#include "raw.h"
#include "sandbox.h"
#include "slots.h"
#include "trace.h"
#include "tscrate.h"
#include "util.h"

#ifndef FERRY_STATIC
__thread struct ferry_thread ferry_thr __attribute__((tls_model("initial-exec")));
#endif
/* Where a vfork child has written its record (0 before its first): every
 * failed exec of a PATH search rewrites that one record. */
enum { VFORK_SLOT = 1, VFORK_OWN = 2 };

struct ferry_proc_header *ferry_hdr FERRY_HOT;
uint64_t *ferry_internal FERRY_HOT;
uint64_t *ferry_own FERRY_HOT;

/* `n` calls of `nr` (< FERRY_NR_MAX) in the entry of `own` that holds the
 * number, taken for it at its first call, else in table[nr] once every
 * entry is taken.  The search starts at a place the number gives (the
 * engine's carriers tally a crossing each: a scan from the first entry read
 * the lines the other carriers write).  Another thread, or a handler
 * interrupting this one, may take an entry at the same moment: taking it is
 * a compare-and-swap, and the count's add is atomic (48 bits of count: no
 * carry reaches the number). */
void ferry_tally_add(uint64_t *own, uint64_t *table, unsigned long nr, uint64_t n)
{
    uint64_t key = (uint64_t)(nr + 1) << 48;
    unsigned start = (unsigned)((nr * 0x9E3779B1UL) >> 11);
    for (unsigned k = 0; k < FERRY_OWN_KINDS; k++) {
        unsigned i = (start + k) % FERRY_OWN_KINDS;
        uint64_t v = __atomic_load_n(&own[i], __ATOMIC_RELAXED);
        /* a failed swap leaves in v the number the winner took it for */
        if (!v && __atomic_compare_exchange_n(&own[i], &v, key, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            v = key;
        if ((v >> 48) == nr + 1) {
            __atomic_fetch_add(&own[i], n, __ATOMIC_RELAXED);
            return;
        }
    }
    table[nr] += n;
}

void ferry_tally_one(long nr)
{
    uint64_t *own, *t = ferry_tally(&own);
    if (t && (unsigned long)nr < FERRY_NR_MAX)
        ferry_tally_add(own, t, (unsigned long)nr, 1);
}

/* What every start sets, in .data with the shim's other small variables:
 * each page of .bss a start writes is a fault in every process, and this,
 * with a copy of the run directory in it and the block table after it, was
 * one of its own. */
static struct {
    int in_file;            /* 0: anonymous memory */
    int mode;
    uint32_t event_capacity;
    uint32_t block_size;
    uint32_t uid;             /* effective user ID when the header was made */
    struct ferry_blk *first;  /* block 0, mapped with the header (0: not so) */
    int first_claimed;        /* `first` is blocks[0], published */
    const char *dir;          /* the run directory: the setting kept for children */
} st FERRY_HOT = {.dir = ""};
static char dir_own[2048] FERRY_COLD;  /* its copy, when the setting is not kept */
/* blocks[0] is `first` when that is set, and left alone: every start claims
 * block 0, and the table's first page is not touched */
static struct ferry_blk *blocks[FERRY_MAX_BLOCKS] FERRY_COLD;

static struct ferry_blk *block_at(uint32_t i)
{
    if (i == 0 && st.first)
        return __atomic_load_n(&st.first_claimed, __ATOMIC_ACQUIRE) ? st.first : 0;
    return __atomic_load_n(&blocks[i], __ATOMIC_ACQUIRE);
}

uint64_t ferry_mono_ns(void)
{
    struct timespec ts;
    ferry_raw2(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t ferry_real_ns(void)
{
    struct timespec ts;
    ferry_raw2(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A mapping of the process file reads no pages ahead: the file is sparse
 * and hundreds of MiB long, and a fault's readahead filled (zeroed) page
 * cache for its holes, ~2 ms on the first touch of the header. */
static void no_readahead(long p, size_t size)
{
    if (!ferry_slot_in_memory())  /* a tmpfs reads nothing ahead */
        ferry_raw3(SYS_madvise, p, (long)size, MADV_RANDOM);
}

static void *map(size_t size, int fd, uint64_t off)
{
    long p = ferry_raw6(SYS_mmap, 0, size, PROT_READ | PROT_WRITE,
                        fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, (long)off);
    return IS_ERR(p) ? 0 : (void *)p;
}

static int file_name(char *path, size_t cap, const char *dir, int pid, uint32_t seq)
{
    struct ferry_buf b = {path, 0, cap, 0};
    ferry_buf_str(&b, dir);
    ferry_buf_str(&b, "/proc/");
    ferry_buf_i64(&b, pid);
    ferry_buf_str(&b, "-");
    ferry_buf_u64(&b, seq);
    ferry_buf_str(&b, ".ferry");
    path[b.len] = 0;
    return b.overflow ? -ENAMETOOLONG : 0;
}

/* The file `<dir>/proc/<pid>-<seq>.ferry`, created exclusively; seq counts
 * the images (exec) this pid has had.  proc/ may be writable by every user
 * (sticky, when the run changes users): O_EXCL and O_NOFOLLOW never write
 * through a name someone else made.  The descriptor is the caller's to
 * close before the program runs again. */
static int create_file(const char *dir, int pid, uint32_t *seq_out)
{
    char path[2300];
    for (uint32_t seq = 0; seq < 1000; seq++) {
        if (file_name(path, sizeof(path), dir, pid, seq))
            return -ENAMETOOLONG;
        long fd = ferry_raw4(SYS_openat, AT_FDCWD, path,
                             O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd != -EEXIST) {
            *seq_out = seq;
            return (int)fd;
        }
    }
    return -EEXIST;
}

/* Who the image a vfork child starts is, as the child knew (FERRY_SLOT):
 * its pid and its parent's, a getpid and a getppid fewer in every start it
 * serves. */
static int32_t claimed_pid FERRY_HOT, claimed_ppid FERRY_HOT;
static int claimed_ids FERRY_HOT;

static void fill_identity(struct ferry_proc_header *h, char **argv, const char *exe_hint)
{
    if (claimed_ids) {
        h->pid = claimed_pid;
        h->ppid = claimed_ppid;
        claimed_ids = 0;
    } else {
        h->pid = (int32_t)ferry_raw0(SYS_getpid);
        h->ppid = (int32_t)ferry_raw0(SYS_getppid);
    }
    uint64_t dev, ino;
    ferry_exe_path(exe_hint, h->exe, sizeof(h->exe), &dev, &ino);
    h->exe_dev = (uint32_t)dev;
    h->exe_ino = ino;
    uint32_t len = 0;
    for (char **a = argv; a && *a; a++) {
        size_t l = ferry_strlen(*a) + 1;
        if (len + l > sizeof(h->cmdline))
            break;
        ferry_memcpy(h->cmdline + len, *a, l);
        len += (uint32_t)l;
    }
    h->cmdline_len = len;
}

static void calibrate(struct ferry_proc_header *h, const char *handed_down)
{
    ferry_tsc_rate(handed_down, ferry_cache_root(), &h->cal_tsc, &h->cal_ns);
    ferry_trace_set_rate(h->cal_tsc, h->cal_ns);
}

int ferry_store_rate(char *out, size_t cap)
{
    if (!ferry_hdr || !ferry_hdr->cal_tsc)
        return -ENODATA;
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, "FERRY_TSC=");
    ferry_buf_u64(&b, ferry_hdr->cal_tsc);
    ferry_buf_str(&b, ":");
    ferry_buf_u64(&b, ferry_hdr->cal_ns);
    if (b.overflow)
        return -ENAMETOOLONG;
    out[b.len] = 0;
    return 0;
}

static int header_init(char **argv, int keep_cmdline, const char *exe_hint)
{
    struct ferry_proc_header *h = ferry_hdr;
    ferry_memcpy(h->magic, FERRY_PROC_MAGIC, 16);
    h->version = FERRY_PROC_VERSION;
    h->header_size = FERRY_PROC_HEADER_SIZE;
    h->block_size = st.block_size;
    h->max_blocks = FERRY_MAX_BLOCKS;
    h->mode = st.mode;
    h->event_capacity = st.event_capacity;
    h->state = FERRY_STATE_RUNNING;
    h->uid = st.uid;  /* read by open_backing, just before */
    if (!keep_cmdline)
        fill_identity(h, argv, exe_hint);
    else {
        h->pid = (int32_t)ferry_raw0(SYS_getpid);
        h->ppid = (int32_t)ferry_raw0(SYS_getppid);
    }
    h->start_real_ns = ferry_real_ns();
    h->start_mono_ns = ferry_mono_ns();
    h->start_tsc = ferry_rdtsc();
    return 0;
}

static uint64_t block_offset(uint32_t idx)
{
    return FERRY_PROC_HEADER_SIZE + (uint64_t)idx * st.block_size;
}

/* The slot a vfork child's exec hook claimed for this image (FERRY_SLOT),
 * or a fork child's parent for it: taken by the next open_backing. */
static struct ferry_slot_hint claimed FERRY_HOT;
static int claimed_set FERRY_HOT;

/* The record is a slot of the run's shared file (slots.c), room for its
 * largest (sparse), and only its header and first block are mapped, in one
 * mapping: nearly every process claims that block for its first counted
 * call, and mapping it apart (mremap, munmap, madvise) cost ~10 us of each
 * start, where a longer mapping costs nothing until touched; no descriptor is kept,
 * so none of the program's descriptor numbers is ever the shim's, and
 * nothing of the shim is left for the program to close, dup2 over or pass
 * on. */
static int open_backing(void)
{
    /* the files' user and the header's: one call for both */
    st.uid = (uint32_t)ferry_raw0(SYS_geteuid);
    st.in_file = 0;
    st.first = 0;
    st.first_claimed = 0;
    if (st.dir[0]) {
        struct ferry_tally tally;
        tally.kinds = 0;
        struct ferry_slot slot;
        uint64_t stride = block_offset(FERRY_MAX_BLOCKS);
        ferry_hdr = claimed_set ? ferry_slot_map_claimed(st.dir, st.uid, stride, block_offset(1), &claimed,
                                                         &slot, &tally)
                                : 0;
        claimed_set = 0;
        if (!ferry_hdr)
            ferry_hdr = ferry_slot_map(st.dir, st.uid, stride, block_offset(1), &slot, &tally);
        if (ferry_hdr) {
            st.first = (struct ferry_blk *)((char *)ferry_hdr + block_offset(0));
            ferry_hdr->seq = slot.index;
            /* Tallied from the first file the shim opened: that openat is
             * where a tracer sees the shim start. */
            ferry_internal = ferry_hdr->internal;
            ferry_own = ferry_hdr->own;
            for (uint32_t k = 0; k < tally.kinds; k++)
                if (tally.of[k].nr < FERRY_NR_MAX)
                    ferry_tally_add(ferry_own, ferry_internal, tally.of[k].nr, tally.of[k].count);
            st.in_file = 1;
            return 0;
        }
    }
    ferry_hdr = map(FERRY_PROC_HEADER_SIZE, -1, 0);
    ferry_internal = ferry_hdr ? ferry_hdr->internal : 0;
    ferry_own = ferry_hdr ? ferry_hdr->own : 0;
    return ferry_hdr ? 0 : -ENOMEM;
}

/* Block `idx` of the file, mapped without a descriptor: mremap with an old
 * size of 0 maps the same file again from a mapping of it (the nearest block
 * below, else the header), over the span up to the block; the span's head is
 * unmapped at once, so only one block's room more is ever reserved. */
static struct ferry_blk *map_file_block(uint32_t idx)
{
    if (idx == 0 && st.first)
        return st.first;
    char *anchor = (char *)ferry_hdr;
    uint64_t anchor_off = 0;
    for (uint32_t j = idx; j-- > 0;) {
        struct ferry_blk *b = block_at(j);
        if (b) {
            anchor = (char *)b;
            anchor_off = block_offset(j);
            break;
        }
    }
    uint64_t span = block_offset(idx) + st.block_size - anchor_off;
    long p = ferry_raw6(SYS_mremap, (long)anchor, 0, (long)span, MREMAP_MAYMOVE, 0, 0);
    if (IS_ERR(p))
        return 0;
    if (span > st.block_size)
        ferry_raw2(SYS_munmap, p, span - st.block_size);
    p += (long)(span - st.block_size);
    no_readahead(p, st.block_size);
    return (struct ferry_blk *)p;
}

int ferry_store_open(const char *run_dir, int mode, uint32_t event_capacity, char **argv,
                     const char *tsc_rate, const char *exe_hint, const char *slot_hint)
{
    uint64_t v[7];
    int ids = slot_hint && ferry_parse_numbers(slot_hint, v, 7) && v[5] <= INT32_MAX && v[6] <= INT32_MAX;
    if (slot_hint && (ids || ferry_parse_numbers(slot_hint, v, 5)) && v[0] <= UINT32_MAX &&
        v[1] <= UINT32_MAX && v[2] < FERRY_SLOTS_MAX) {
        claimed = (struct ferry_slot_hint){(uint32_t)v[0], (uint32_t)v[1], (uint32_t)v[2], v[4] == 1, v[3]};
        claimed_set = 1;
        if (ids) {
            claimed_pid = (int32_t)v[5];
            claimed_ppid = (int32_t)v[6];
            claimed_ids = 1;
        }
    }
    st.mode = mode;
    st.event_capacity = mode == FERRY_MODE_TRACE ? event_capacity : 0;
    uint64_t size = sizeof(struct ferry_blk) + (uint64_t)st.event_capacity * sizeof(struct ferry_event);
    st.block_size = (uint32_t)((size + 4095) & ~4095ULL);
    /* not the environment's string: those move (environ.c) */
    const char *dir = run_dir ? ferry_exec_lasting("FERRY_RUN_DIR", run_dir, dir_own, sizeof(dir_own)) : 0;
    if (dir)
        st.dir = dir;
    int rc = open_backing();
    if (rc)
        return rc;
    header_init(argv, 0, exe_hint);
    ferry_store_span(FERRY_SPAN_FILE, ferry_rdtsc());
    if (mode == FERRY_MODE_TRACE || mode == FERRY_MODE_AGGREGATE)  /* modes that time calls */
        calibrate(ferry_hdr, tsc_rate);
    ferry_store_span(FERRY_SPAN_CALIBRATED, ferry_rdtsc());
    return 0;
}

void ferry_store_span(int which, uint64_t tsc)
{
    if (FERRY_THR->in_vfork_child) {
        if (which == FERRY_SPAN_EXEC_HOOK)
            FERRY_THR->vfork_hook_tsc = tsc;
        return;
    }
    if (ferry_hdr && which >= 0 && which < 8)
        ferry_hdr->start_spans[which] = tsc;
}

void ferry_store_hook_step(int step)
{
    if (FERRY_THR->in_vfork_child && step >= 0 && step < FERRY_HOOK_STEPS)
        FERRY_THR->vfork_steps[step] = ferry_rdtsc();
}

/* Blocks claimed so far: the table beyond them is all zeros, and scanning
 * it (8 KiB) faulted in its pages in every process. */
static uint32_t claimed_blocks(const struct ferry_proc_header *h)
{
    uint32_t n = h ? __atomic_load_n(&h->nblocks, __ATOMIC_ACQUIRE) : 0;
    return n < FERRY_MAX_BLOCKS ? n : FERRY_MAX_BLOCKS;
}

/* Blocks given back by threads that ended: a thread that found every block
 * taken looks again only once this moved. */
static uint32_t blocks_given_back FERRY_HOT;

/* A free block for this thread, or a new one; NULL when there is none
 * (*full set when the table has no room left). */
static struct ferry_blk *claim(int *full)
{
    for (uint32_t i = 0, n = claimed_blocks(ferry_hdr); i < n; i++) {
        struct ferry_blk *b = block_at(i);
        if (!b)
            continue;
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&b->in_use, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return b;
    }
    uint32_t idx = __atomic_fetch_add(&ferry_hdr->nblocks, 1, __ATOMIC_ACQ_REL);
    if (idx >= FERRY_MAX_BLOCKS) {
        *full = 1;
        return 0;
    }
    struct ferry_blk *b = st.in_file ? map_file_block(idx) : map(st.block_size, -1, 0);
    if (!b)
        return 0;
    b->in_use = 1;
    if (idx == 0 && b == st.first)
        __atomic_store_n(&st.first_claimed, 1, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&blocks[idx], b, __ATOMIC_RELEASE);
    return b;
}

/* A thread beyond the table's room counts nothing until a block is given
 * back.  It looked again at each of its calls, through all 1024 blocks: with
 * 2,000 threads (a thread-per-connection server at 2,000 connections) that
 * was half of the server's CPU.  It is said once in the header's overflow
 * (a count of threads, which was one more at each such call). */
struct ferry_blk *ferry_blk_get(void)
{
    struct ferry_blk *b = FERRY_THR->blk;
    if (b || !ferry_hdr)
        return b;
    uint32_t given_back = __atomic_load_n(&blocks_given_back, __ATOMIC_ACQUIRE);
    if (FERRY_THR->no_block && FERRY_THR->no_block_at == given_back)
        return 0;
    int full = 0;
    b = claim(&full);
    if (b) {
        b->tid = (int32_t)ferry_raw0(SYS_gettid);
        FERRY_THR->blk = b;
    } else {
        /* Nor does one whose block could not be mapped (a sandboxed
         * program's filter refused it, sandbox.h): its every call took
         * another index of the table, until the table was full. */
        if (full && !FERRY_THR->no_block)
            __atomic_fetch_add(&ferry_hdr->overflow, 1, __ATOMIC_RELAXED);
        FERRY_THR->no_block = 1;
        FERRY_THR->no_block_at = given_back;
    }
    return b;
}

void ferry_blk_count(long nr)
{
    struct ferry_blk *b = ferry_blk_get();
    if (!b)
        return;
    /* A single add instruction: a signal handler on this thread that also
     * counts cannot interleave with it. */
    uint64_t *slot = ((unsigned long)nr < FERRY_NR_MAX) ? &b->calls[nr] : &b->invalid;
    __asm__ volatile("addq $1, %0" : "+m"(*slot));
}

void ferry_blk_retire(void)
{
    /* The block keeps its figures (it is part of the file); another thread
     * may take it over and add to them.  Only the owner changes. */
    struct ferry_blk *b = FERRY_THR->blk;
    if (!b)
        return;
    FERRY_THR->blk = 0;
    __atomic_store_n(&b->in_use, 0, __ATOMIC_RELEASE);
    __atomic_fetch_add(&blocks_given_back, 1, __ATOMIC_RELEASE);
}

/* A fork child's record took its slot under the file's lock (flock, pread,
 * ftruncate, flock), and so did the program it execs (each command of a
 * bash, which forks where sh vforks): the parent takes two slots before
 * the fork, from those it claimed ahead (one lock for many children), and
 * the child maps the first and hands the second to its program
 * (FERRY_SLOT), as a vfork child does. */
void ferry_store_before_fork(void)
{
    FERRY_THR->fork_slot_set = 0;
    if (!ferry_hdr || !st.in_file || FERRY_THR->in_vfork_child)
        return;
    if (ferry_slot_reserve(st.dir, st.uid, block_offset(FERRY_MAX_BLOCKS), 2, &FERRY_THR->fork_slot) == 0)
        FERRY_THR->fork_slot_set = 1;
}

/* Unused when the fork failed: two slots the reader skips. */
void ferry_store_fork_returned(void)
{
    FERRY_THR->fork_slot_set = 0;
}

void ferry_store_after_fork(void)
{
    /* Everything mapped is the parent's (shared with its file): leave it
     * alone, and start a file of our own. */
    /* blocks[0] was never written when `first` stood for it: its page is
     * not read either (a fault, for a page of zeros, in every fork child) */
    for (uint32_t i = st.first ? 1 : 0, n = claimed_blocks(ferry_hdr); i < n; i++)
        if (blocks[i])
            blocks[i] = 0;
    FERRY_THR->blk = 0;
    FERRY_THR->no_block = 0;
    FERRY_THR->spare = 0;
    FERRY_THR->spare_used_known = 0;
    FERRY_THR->in_vfork_child = 0;
    FERRY_THR->vfork_handed_back = 0;
    FERRY_THR->vfork_ended.set = 0;  /* the parent's to write */
    FERRY_THR->internal = 0;
    ferry_internal = 0;
    ferry_own = 0;
    ferry_slots_after_fork();
    if (FERRY_THR->fork_slot_set) {
        ferry_slots_given(&FERRY_THR->fork_slot, st.uid, block_offset(FERRY_MAX_BLOCKS), &claimed);
        claimed_set = 1;
        FERRY_THR->fork_slot_set = 0;
    }
    struct ferry_proc_header *parent = ferry_hdr;
    if (open_backing() != 0) {
        ferry_hdr = 0;
        return;
    }
    /* Same image as the parent: same program, arguments and modules.  Only
     * what they use: every page written is a page of the file to allocate
     * and write back, for each fork (32 KiB of module table, mostly empty). */
    ferry_memcpy(ferry_hdr->exe, parent->exe, ferry_strlen(parent->exe) + 1);
    ferry_hdr->exe_dev = parent->exe_dev;
    ferry_hdr->exe_ino = parent->exe_ino;
    uint32_t cmdline_len = parent->cmdline_len;
    if (cmdline_len > sizeof(parent->cmdline))
        cmdline_len = sizeof(parent->cmdline);
    ferry_memcpy(ferry_hdr->cmdline, parent->cmdline, cmdline_len);
    ferry_hdr->cmdline_len = cmdline_len;
    uint32_t nmodules = parent->nmodules;
    if (nmodules > FERRY_MAX_MODULES)
        nmodules = FERRY_MAX_MODULES;
    for (uint32_t k = 0; k < nmodules; k++)
        *ferry_module_at(ferry_hdr, k) = *ferry_module_at(parent, k);
    ferry_hdr->nmodules = nmodules;
    ferry_hdr->nsites = parent->nsites;
    ferry_hdr->cal_tsc = parent->cal_tsc;
    ferry_hdr->cal_ns = parent->cal_ns;
    header_init(0, 1, 0);
}

/* A vfork child's own calls (its exec hook's, its file's): they follow the
 * spare block, so that its file can say them like any process's, the table
 * first and then the entries (ferry_tally). */
static uint64_t *spare_internal(void)
{
    return (uint64_t *)((char *)FERRY_THR->spare + st.block_size);
}

#define SPARE_TALLY (sizeof(ferry_hdr->internal) + sizeof(ferry_hdr->own))

/* Memory above the spare for a vfork child's exec hook: its environment
 * and argument arrays.  On posix_spawn's stack (about 32 KiB plus argv),
 * where the hook once ran, they did not fit beside everything else, and
 * what went beyond it landed in whatever was mapped below, or faulted. */
#define SPARE_SCRATCH (64 * 1024)
/* ... and a stack for it.  On posix_spawn's stack (a new mapping for each
 * child) every page the hook's frames reached was a fault, and a page more
 * for the parent's munmap to give back: ~5 pages, 10-15 us of each spawn.
 * These pages stay mapped and in memory from one vfork child to the next. */
#define SPARE_STACK (64 * 1024)
/* ... and above the stack's top, where the child packs its block
 * (pack_block): at most the header's room after a command line, pages
 * that stay mapped from one child to the next. */
#define SPARE_PACKED (8 * 1024)

void *ferry_vfork_scratch(void)
{
    if (!FERRY_THR->in_vfork_child)
        return 0;
    return (char *)spare_internal() + SPARE_TALLY;
}

void *ferry_vfork_stack(void)
{
    if (!FERRY_THR->in_vfork_child)
        return 0;
    return (char *)ferry_vfork_scratch() + SPARE_SCRATCH + SPARE_STACK;
}

int ferry_blk_spare_prepare(void)
{
    if (!FERRY_THR->spare)
        FERRY_THR->spare = map(st.block_size + SPARE_TALLY + SPARE_SCRATCH + SPARE_STACK + SPARE_PACKED,
                               -1, 0);
    return FERRY_THR->spare ? 0 : -ENOMEM;
}

int ferry_in_vfork_child(void) { return FERRY_THR->in_vfork_child; }

/* A vfork child of a vfork child (which counts with its parent) finds its
 * parent's pid here: a process of the same memory, as good to read by. */
long ferry_memory_pid(void)
{
    return FERRY_THR->in_vfork_child ? FERRY_THR->spare->tid : ferry_raw0(SYS_getpid);
}

#define SPARE_PAGES ((sizeof(struct ferry_blk) + 4095) / 4096)
_Static_assert(SPARE_PAGES <= 64 * sizeof(((struct ferry_thread *)0)->spare_used) / 8, "spare pages");

/* Where a vfork child packs its block: above its stack's top. */
static char *spare_packed(void)
{
    return (char *)spare_internal() + SPARE_TALLY + SPARE_SCRATCH + SPARE_STACK;
}

/* What the last vfork child wrote of the spare block, and its tally after
 * it, zeroed: the words its packed runs held, when it packed them (a few
 * hundred bytes, where its pages were ~16 KiB to zero), else the pages its
 * record said it used; the tally's table only when a number went there. */
static void spare_clear(void)
{
    char *p = (char *)FERRY_THR->spare;
    uint32_t packed = FERRY_THR->spare_packed;
    if (packed) {
        for (const char *r = spare_packed(), *end = r + packed; r < end;) {
            struct ferry_packed_run run;
            ferry_memcpy(&run, r, sizeof(run));
            ferry_memset(p + run.offset, 0, run.len);
            r += sizeof(run) + run.len;
        }
    } else {
        for (size_t i = 0; i < SPARE_PAGES; i++)
            if (FERRY_THR->spare_used[i / 64] >> (i % 64) & 1)
                ferry_memset(p + i * 4096, 0, 4096);
    }
    uint64_t *table = spare_internal();
    if (FERRY_THR->spare_table_used)
        ferry_memset(table, 0, FERRY_NR_MAX * sizeof(*table));
    ferry_memset(table + FERRY_NR_MAX, 0, SPARE_TALLY - FERRY_NR_MAX * sizeof(*table));
}

static void vfork_ended_write(void);

void ferry_blk_enter_vfork_child(unsigned long clone_flags)
{
    if (FERRY_THR->in_vfork_child || !FERRY_THR->spare)
        return;  /* nested, or no spare: count with the parent, as before */
    /* the last child's record, when its parent had not written it yet (a
     * signal handler of the parent's vforked before its vfork returned) */
    vfork_ended_write();
    /* Zero again what the last vfork child of this thread wrote: the pages
     * its record said it used, by hand (each given back was a fault and a
     * page zeroed by the kernel in the next child, 5 for a shell's
     * /bin/true); else, when that is not known (the child died before its
     * record, or its events went round the ring), by giving the pages back
     * (anonymous memory: they read as zeros): clearing all 266 KiB by hand
     * took longer than the rest of the child's work. */
    int madvised = !FERRY_THR->spare_used_known;
    if (madvised)
        ferry_pass6(SYS_madvise, (long)FERRY_THR->spare, st.block_size + SPARE_TALLY,
                    MADV_DONTNEED, 0, 0, 0);
    else
        spare_clear();
    FERRY_THR->spare_used_known = 0;
    FERRY_THR->vfork_unseen = 0;
    FERRY_THR->vfork_start_tsc = ferry_rdtsc();
    /* its hook's times are its own: a child that dies before any exec ran
     * none (the time kept was the last child's) */
    FERRY_THR->vfork_hook_tsc = 0;
    ferry_memset(FERRY_THR->vfork_steps, 0, sizeof(FERRY_THR->vfork_steps));
    FERRY_THR->spare->in_use = 1;
    FERRY_THR->spare->tid = (int32_t)ferry_raw0(SYS_gettid);
    FERRY_THR->vfork_saved = FERRY_THR->blk;
    FERRY_THR->blk = FERRY_THR->spare;
    FERRY_THR->in_vfork_child = 1;
    FERRY_THR->vfork_file = 0;
    FERRY_THR->vfork_image = 0;
    /* its parent is the process whose memory it runs in, whose record
     * says its pid (a getppid less at its end), unless the clone gave it
     * another parent or a pid namespace of its own */
    FERRY_THR->vfork_ppid = ferry_hdr && !(clone_flags & (CLONE_PARENT | CLONE_NEWPID)) ? ferry_hdr->pid : 0;
    /* the child's own calls are not the parent's (zeroed above); the
     * parent's other threads run on, and tally theirs as before */
    FERRY_THR->internal = spare_internal();
    if (madvised)  /* the child's first own call */
        ferry_tally_one(SYS_madvise);
}

void ferry_blk_leave_vfork_child(void)
{
    FERRY_THR->vfork_handed_back = 0;
    if (!FERRY_THR->in_vfork_child)
        return;
    FERRY_THR->blk = FERRY_THR->vfork_saved;
    FERRY_THR->in_vfork_child = 0;
    FERRY_THR->internal = 0;
}

/* The parent runs again the moment its vfork child exits or execs, and may
 * run program code before its vfork call has returned to the shim (a
 * signal pending for it is taken right there: Go preempts its threads so).
 * So the child gives the thread's state back itself, just before the call
 * that ends its use of it, once its record is written; the parent's
 * ferry_post only does it for a child that never got that far (killed). */
static void vfork_hand_back(void)
{
    ferry_blk_leave_vfork_child();
    FERRY_THR->vfork_handed_back = 1;
}

/* The exec failed: the child goes on, with its own counters as they were. */
static void vfork_take_back(void)
{
    FERRY_THR->vfork_handed_back = 0;
    FERRY_THR->spare_used_known = 0;  /* until its exit writes the record again */
    FERRY_THR->vfork_saved = FERRY_THR->blk;
    FERRY_THR->blk = FERRY_THR->spare;
    FERRY_THR->in_vfork_child = 1;
    FERRY_THR->internal = spare_internal();
}

static int all_zero(const char *p, size_t n)
{
    const uint64_t *q = (const uint64_t *)p;
    for (size_t i = 0; i < n / 8; i++)
        if (q[i])
            return 0;
    for (size_t i = n & ~7UL; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* The pages of block `b` that may hold anything: its head and counts, the
 * figures per number as far as they were handed out (nr_used), the first
 * page of its site and errno tables, and the rest of a table where an entry
 * spilled beyond it (FERRY_SPILL_*).  What a vfork child wrote lies there;
 * every other page of its spare reads as zeros.  It asked the kernel which
 * pages it had touched: `sysinfo` and `mincore` in each child (2-3 us), and
 * on a machine with swap, where only /proc/self/pagemap tells a page
 * swapped out, an open, a read and a close of it, the new pid's first use
 * of /proc (~30 us of every command a shell ran). */
static void may_hold(unsigned char *may, size_t from, size_t to)
{
    for (size_t page = from / 4096; page * 4096 < to && page < SPARE_PAGES; page++)
        may[page] = 1;
}

static void block_pages(const struct ferry_blk *b, unsigned char *may)
{
    ferry_memset(may, 0, SPARE_PAGES);
    uint32_t nr_used = __atomic_load_n(&b->nr_used, __ATOMIC_RELAXED);
    uint32_t spilled = __atomic_load_n(&b->spilled, __ATOMIC_RELAXED);
    size_t sites = __builtin_offsetof(struct ferry_blk, sites), errnos = __builtin_offsetof(struct ferry_blk, errnos);
    may_hold(may, 0, __builtin_offsetof(struct ferry_blk, nr) +
                         (nr_used < FERRY_NR_MAX ? nr_used : FERRY_NR_MAX) * sizeof(struct ferry_nr_stats));
    may_hold(may, sites, sites + (spilled & FERRY_SPILL_SITES_FAR    ? sizeof(b->sites)
                                  : spilled & FERRY_SPILL_SITES_NEAR ? 5 * 4096
                                                                     : 4096));
    may_hold(may, errnos, errnos + (spilled & FERRY_SPILL_ERRNOS ? sizeof(b->errnos) : 4096));
}

/* `len` bytes of `buf` at `off`, but for the pages that are all zeros or
 * that `may` (a flag per page of buf) says hold nothing: the
 * file is new, or was written before from the same header and a block whose
 * counts only grew, so a page not written reads as zeros.  Written, each
 * took room on disk and was written back: 330 KiB for every vfork child,
 * most of it zeros (a thread's block holds every syscall's and site's
 * figures).  `used` (when given) gets a bit for each page written. */
static void pwrite_used(long fd, const void *buf, size_t len, uint64_t off, const unsigned char *may,
                        uint64_t *used)
{
    const char *p = buf;
    size_t start = 0;
    for (size_t i = 0; i < len; i += 4096) {
        size_t n = len - i < 4096 ? len - i : 4096;
        if (may[i / 4096] && !all_zero(p + i, n)) {
            if (used)
                used[i / 4096 / 64] |= 1ULL << (i / 4096 % 64);
            continue;
        }
        if (i > start)
            ferry_raw4(SYS_pwrite64, fd, p + start, i - start, off + start);
        start = i + n;
    }
    if (len > start)
        ferry_raw4(SYS_pwrite64, fd, p + start, len - start, off + start);
}

/* Where a vfork child's record goes: a slot of the file its parent maps,
 * or, when its user is no longer that file's (POSIX_SPAWN_RESETIDS) or the
 * file is full, a file of its own.  The same place however many execs fail
 * before one succeeds (a PATH search): each write replaces the last, so the
 * child's calls are in the run once.  A descriptor, and the record's offset
 * and number in it. */
static int vfork_child_record(int pid, uint32_t uid, uint64_t *base, uint32_t *seq, int image_slot)
{
    uint64_t stride = block_offset(FERRY_MAX_BLOCKS);
    int fd;
    if (FERRY_THR->vfork_file == VFORK_SLOT)
        fd = ferry_slot_reopen(st.dir, uid, &FERRY_THR->vfork_slot, 0, 1, 0);
    else if (FERRY_THR->vfork_file == VFORK_OWN) {
        char path[2300];
        fd = file_name(path, sizeof(path), st.dir, pid, FERRY_THR->vfork_slot.index)
                 ? -ENAMETOOLONG
                 : (int)ferry_raw4(SYS_openat, AT_FDCWD, path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    } else {
        /* The program it execs, when its shim will be handed the slot, takes
         * the next: one claim under the file's lock where the program made
         * a second (open, lock, fstat, pread, ftruncate, unlock: ~4 us of
         * its start).  Execs that fail leave it to the one that succeeds. */
        fd = ferry_slot_open(st.dir, uid, stride, image_slot ? 2 : 1, &FERRY_THR->vfork_slot, 0);
        if (fd >= 0) {
            FERRY_THR->vfork_file = VFORK_SLOT;
            FERRY_THR->vfork_image = image_slot ? FERRY_THR->vfork_slot.index + 2 : 0;
        } else {
            FERRY_THR->vfork_slot.off = 0;
            fd = create_file(st.dir, pid, &FERRY_THR->vfork_slot.index);
            if (fd >= 0) {
                FERRY_THR->vfork_file = VFORK_OWN;
                /* the whole of its one block, sparse */
                ferry_raw2(SYS_ftruncate, fd, block_offset(1));
            }
        }
    }
    *base = FERRY_THR->vfork_slot.off;
    *seq = FERRY_THR->vfork_slot.index;
    return fd;
}

#define AT(field) (base + __builtin_offsetof(struct ferry_proc_header, field))
#define HEAD_AT(field) __builtin_offsetof(struct ferry_proc_header, field)
/* The header's pages before its module table: identity, exe, exec path,
 * command line.  The fields a child makes its own all lie in the first bytes. */
#define HEAD_PAGES HEAD_AT(modules)
#define HEAD_OWN 256
_Static_assert(HEAD_AT(start_spans) + sizeof(((struct ferry_proc_header *)0)->start_spans) <= HEAD_OWN,
               "a vfork child's own fields");
_Static_assert(HEAD_AT(own) >= HEAD_OWN && HEAD_AT(exec_path) >= HEAD_AT(own) + sizeof(((struct ferry_proc_header *)0)->own) &&
               HEAD_AT(cmdline) > HEAD_AT(exec_path) &&
               HEAD_AT(cmdline) + sizeof(((struct ferry_proc_header *)0)->cmdline) <= HEAD_PAGES,
               "a vfork child's head: its exec path, then the command line, before the modules");
#define PUT(buf, field, value)                                                  \
    do {                                                                        \
        __typeof__(((struct ferry_proc_header *)0)->field) v_ = (value);        \
        ferry_memcpy((buf) + HEAD_AT(field), &v_, sizeof(v_));                  \
    } while (0)

/* Bytes of the module table from its first entry beyond the first page's
 * (MODULES_AT) that hold entries, to the end of their page: what a child's
 * record needs of it (the parent's modules); 0 for a parent whose modules
 * all lie in the first page. */
#define MODULES_AT (HEAD_AT(modules) + FERRY_FIRST_MODULES * sizeof(struct ferry_module_entry))
static size_t modules_used(void)
{
    size_t n = ferry_hdr->nmodules < FERRY_MAX_MODULES ? ferry_hdr->nmodules : FERRY_MAX_MODULES;
    if (n <= FERRY_FIRST_MODULES)
        return 0;
    return ((HEAD_AT(modules) + n * sizeof(struct ferry_module_entry) + 4095) & ~4095UL) - MODULES_AT;
}

/* Where the parent's command line ends in its header: what a child's
 * record needs of the header's first pages (the rest of them is zeros). */
static size_t head_used(void)
{
    size_t len = ferry_hdr->cmdline_len < sizeof(ferry_hdr->cmdline) ? ferry_hdr->cmdline_len
                                                                     : sizeof(ferry_hdr->cmdline);
    return HEAD_AT(cmdline) + len;
}

struct ferry_clock_pair {
    uint64_t real_ns, mono_ns, tsc;
};

/* The clocks when the TSC read `tsc`, a moment between the start of `h`'s
 * image and `end`: the TSC's rate over that span is the clocks' (it runs
 * at a constant rate), the wall clock then is the wall clock at `end` less
 * the time since.  Out of that span: its nearest end. */
static struct ferry_clock_pair child_start(const struct ferry_proc_header *h,
                                           const struct ferry_clock_pair *end, uint64_t tsc)
{
    uint64_t t0 = h->start_tsc, m0 = h->start_mono_ns;
    if (tsc >= end->tsc || end->tsc <= t0 || end->mono_ns < m0)
        return *end;
    if (tsc <= t0)
        tsc = t0;
    uint64_t mono = m0 + (uint64_t)((unsigned __int128)(tsc - t0) * (end->mono_ns - m0) / (end->tsc - t0));
    return (struct ferry_clock_pair){end->real_ns - (end->mono_ns - mono), mono, tsc};
}

_Static_assert(HEAD_PAGES - HEAD_AT(cmdline) <= SPARE_PACKED, "packed room");

/* Words [start, end) of `w` as a run at `*len` of `out`; 0 when it does
 * not fit in `cap` bytes. */
static int put_run(const uint64_t *w, size_t start, size_t end, char *out, size_t *len, size_t cap)
{
    size_t n = (end - start) * 8;
    struct ferry_packed_run head = {(uint32_t)(start * 8), (uint32_t)n};
    if (*len + sizeof(head) + n > cap)
        return 0;
    ferry_memcpy(out + *len, &head, sizeof(head));
    ferry_memcpy(out + *len + sizeof(head), w + start, n);
    *len += sizeof(head) + n;
    return 1;
}

/* Block `b`'s words that are not zero (in the pages that `may` says may
 * hold anything: block_pages), packed as runs of struct ferry_packed_run into `out`: their
 * length, or 0 when they take more than `cap` bytes.  A gap of one zero
 * word joins two runs (a run's head is as long).  `used` gets a bit for
 * each page that held anything. */
static size_t pack_block(const struct ferry_blk *b, const unsigned char *may, char *out, size_t cap,
                         uint64_t *used)
{
    const uint64_t *w = (const uint64_t *)b;
    const size_t words = sizeof(struct ferry_blk) / 8;
    size_t len = 0, start = 0, end = 0;  /* the run being gathered: words [start, end) */
    for (size_t page = 0; page < SPARE_PAGES; page++) {
        if (!may[page])
            continue;
        size_t last = (page + 1) * 512 < words ? (page + 1) * 512 : words;
        for (size_t i = page * 512; i < last; i++) {
            /* a cache line of zeros at a time: most of a page is */
            if (!(i & 7) && i + 8 <= last &&
                !(w[i] | w[i + 1] | w[i + 2] | w[i + 3] | w[i + 4] | w[i + 5] | w[i + 6] | w[i + 7])) {
                i += 7;
                continue;
            }
            if (!w[i])
                continue;
            used[page / 64] |= 1ULL << (page % 64);
            if (end && i <= end + 1) {
                end = i + 1;
                continue;
            }
            if (end && !put_run(w, start, end, out, &len, cap))
                return 0;
            start = i;
            end = i + 1;
        }
    }
    return !end || put_run(w, start, end, out, &len, cap) ? len : 0;
}

/* The first pages of a vfork child's record: the parent's, with the child's
 * identity, state, end, exec path and tally in place (written field by
 * field, they were eight more system calls for every child), as far as the
 * parent's command line goes, its first modules with it, and the child's
 * packed block at `runs_at` after it (`packed_len` bytes of `packed`, 0:
 * none), in one write.  The rest of a parent's module table, beyond the
 * first page's entries, is written before (modules_used): a page between
 * them that holds nothing (the command line's room) is not written. */
static void write_child_head(int fd, uint64_t base, uint32_t seq, int pid, int ppid, uint32_t uid,
                             uint32_t state, int exit_code, const char *exec_path, uint32_t kind,
                             const uint64_t *tally, const char *packed, size_t runs_at, size_t packed_len,
                             const struct ferry_vfork_ended *ended)
{
    const char *h = (const char *)ferry_hdr;
    char own[HEAD_OWN], path[sizeof(ferry_hdr->exec_path)];
    ferry_memcpy(own, h, HEAD_OWN);
    PUT(own, nblocks, 1);
    PUT(own, state, state);
    PUT(own, pid, pid);
    PUT(own, ppid, ppid);
    PUT(own, exit_code, exit_code);
    PUT(own, nwaits, 0);
    PUT(own, seq, seq);
    PUT(own, overflow, 0);  /* the parent's threads, not the child's */
    struct ferry_clock_pair end = ended ? (struct ferry_clock_pair){ended->real_ns, ended->mono_ns, ended->tsc}
                                        : (struct ferry_clock_pair){ferry_real_ns(), ferry_mono_ns(), ferry_rdtsc()};
    PUT(own, end_real_ns, end.real_ns);
    PUT(own, end_mono_ns, end.mono_ns);
    PUT(own, end_tsc, end.tsc);
    /* The child began at its vfork, not when its parent's image did: its
     * clocks then, from the TSC's progress between the parent's start and
     * the child's end (no calls at the vfork; in count mode there is no
     * calibration to convert with). */
    struct ferry_clock_pair began = child_start(ferry_hdr, &end, FERRY_THR->vfork_start_tsc);
    PUT(own, start_real_ns, began.real_ns);
    PUT(own, start_mono_ns, began.mono_ns);
    PUT(own, start_tsc, began.tsc);
    PUT(own, exec_kind, kind);
    /* the parent's start steps are not the child's: it began at its vfork;
     * in their place, its exec hook's steps */
    ferry_memset(own + HEAD_AT(start_spans), 0, sizeof(((struct ferry_proc_header *)0)->start_spans));
    ferry_memcpy(own + HEAD_AT(start_spans), FERRY_THR->vfork_steps, sizeof(FERRY_THR->vfork_steps));
    PUT(own, start_spans[FERRY_SPAN_EXEC_HOOK], FERRY_THR->vfork_hook_tsc);
    PUT(own, uid, uid);
    PUT(own, exec_uid, uid);
    size_t used = head_used();
    uint32_t where[2] = {packed_len ? (uint32_t)runs_at : 0, (uint32_t)packed_len};
    static const uint64_t zeros[FERRY_OWN_KINDS];
    struct iovec iov[10];
    int n = 0;
    iov[n++] = (struct iovec){own, HEAD_OWN};
    iov[n++] = (struct iovec){(void *)(h + HEAD_OWN), HEAD_AT(packed_at) - HEAD_OWN};
    iov[n++] = (struct iovec){where, sizeof(where)};
    iov[n++] = (struct iovec){(void *)(tally ? tally : zeros), sizeof(zeros)};
    size_t rest = HEAD_AT(own) + sizeof(zeros);
    if (exec_path) {
        size_t len = ferry_strlen(exec_path);
        if (len >= sizeof(path))
            len = sizeof(path) - 1;
        ferry_memcpy(path, exec_path, len);
        path[len] = 0;
        iov[n++] = (struct iovec){(void *)(h + rest), HEAD_AT(exec_path) - rest};
        iov[n++] = (struct iovec){path, len + 1};
        rest = HEAD_AT(exec_path) + len + 1;
    }
    iov[n++] = (struct iovec){(void *)(h + rest), used - rest};
    if (packed_len) {
        iov[n++] = (struct iovec){(void *)zeros, runs_at - used};
        iov[n++] = (struct iovec){(void *)packed, packed_len};
    }
    ferry_pass6(SYS_pwritev, fd, (long)iov, n, (long)base, 0, 0);
}

#undef PUT

/* The pages the program a vfork child exec'd writes first in its slot,
 * its header's first and its block's first, made in the slot file (a
 * tmpfs) by the parent that writes the child's record while the kernel
 * loads the program: the program's first write to each is then a fault on
 * a page that is there (~3 us), not on one to allocate and zero (~4-6 us),
 * on its way to main.  fallocate writes nothing: the program may be
 * writing there already.  A file on disk would only get blocks, no page. */
static int image_pages_wanted(void)
{
    return FERRY_THR->vfork_image && ferry_slot_in_memory();
}

static void image_pages_ahead(int fd)
{
    uint64_t off = FERRY_SLOTS_HEAD + (uint64_t)(FERRY_THR->vfork_image - 1) * block_offset(FERRY_MAX_BLOCKS);
    ferry_pass6(SYS_fallocate, fd, FALLOC_FL_KEEP_SIZE, (long)off, 4096, 0, 0);
    ferry_pass6(SYS_fallocate, fd, FALLOC_FL_KEEP_SIZE, (long)(off + FERRY_PROC_HEADER_SIZE), 4096, 0, 0);
}

/* A vfork child's own record (the child `pid` of `ppid`), written with
 * pwrite from the parent's header (read only) and its spare block, with its
 * own identity patched in; by the child, or (`ended`: when and as whom it
 * ended) by its parent. */
static void vfork_child_write(int pid, int ppid, uint32_t state, int exit_code, const char *exec_path,
                              uint32_t kind, int image_slot, const struct ferry_vfork_ended *ended)
{
    if (!st.dir[0] || !ferry_hdr)
        return;
    uint64_t base;
    uint32_t seq;
    /* Who the child is now (POSIX_SPAWN_RESETIDS may have changed it): its
     * file's and its record's user, read once for both. */
    uint32_t uid = ended ? ended->uid : (uint32_t)ferry_raw0(SYS_geteuid);
    int fd = vfork_child_record(pid, uid, &base, &seq, image_slot);
    if (fd < 0)
        return;
    if (!ended)
        ferry_store_hook_step(FERRY_HOOK_SLOT);
    /* Nothing more of the parent's header: the rest of its module table
     * holds no entries, its waits and tally are its own, and so are the
     * catch-all's and the engine's areas, which the parent's calls wrote
     * (a child's caught calls count there too: the memory is the
     * parent's).  Copied, every vfork child repeated the parent's figures
     * so far: a report's calls caught and aggregated counted them once
     * more for each child.  Reading them for zeros was ~40 KiB a child. */
    size_t mods = modules_used();
    if (mods)
        ferry_raw4(SYS_pwrite64, fd, (long)((const char *)ferry_hdr + MODULES_AT), (long)mods,
                   (long)(base + MODULES_AT));
    /* The block packed after the command line when it fits there (a few
     * calls: a shell's command, a spawn), else its pages that hold
     * anything at the block's place: ~3 pages of the record less in most
     * children, each a page of tmpfs to allocate and a write. */
    unsigned char may[SPARE_PAGES];
    uint64_t used[2] = {0, 0};
    block_pages(FERRY_THR->blk, may);
    size_t runs_at = (head_used() + 7) & ~7UL;
    char *packed = spare_packed();
    size_t packed_len = pack_block(FERRY_THR->blk, may, packed, HEAD_PAGES - runs_at, used);
    if (!packed_len) {
        used[0] = used[1] = 0;
        pwrite_used(fd, FERRY_THR->blk, sizeof(struct ferry_blk), base + FERRY_PROC_HEADER_SIZE, may, used);
    }
    if (!ended)
        ferry_store_hook_step(FERRY_HOOK_PACKED);
    /* What the next child must find zeroed: every page that is not zero is
     * one packed or written here (events, beyond the block's tables, are
     * not). */
    FERRY_THR->spare_used[0] = used[0];
    FERRY_THR->spare_used[1] = used[1];
    FERRY_THR->spare_packed = (uint32_t)packed_len;
    FERRY_THR->spare_used_known = FERRY_THR->blk->event_head == 0;
    /* The tally goes in with the head, with the calls that write it and
     * close the file (and make its program's first pages) already in it;
     * they are made untallied.  Its entries
     * lie in the head's first page; the table beyond them, a page of its
     * own, is written only when a number went there. */
    uint64_t *own, *table = ferry_tally(&own);
    int pages_ahead = ended && image_pages_wanted();
    FERRY_THR->spare_table_used = 1;
    if (table) {
        ferry_tally_add(own, table, SYS_pwritev, 1);
        ferry_tally_add(own, table, SYS_close, 1);
        if (pages_ahead)
            ferry_tally_add(own, table, SYS_fallocate, 2);
        FERRY_THR->spare_table_used = !all_zero((const char *)table, sizeof(ferry_hdr->internal));
        if (FERRY_THR->spare_table_used) {
            ferry_tally_add(own, table, SYS_pwrite64, 1);
            ferry_pass6(SYS_pwrite64, fd, (long)table, sizeof(ferry_hdr->internal), AT(internal), 0, 0);
        }
    }
    write_child_head(fd, base, seq, pid, ppid, uid, state, exit_code, exec_path, kind, table ? own : 0,
                     packed, runs_at, packed_len, ended);
    if (pages_ahead)
        image_pages_ahead(fd);
    ferry_pass6(SYS_close, fd, 0, 0, 0, 0, 0);
}

#undef AT
#undef HEAD_AT

/* When the image's life ended (so far): exit, exec, or detach. */
/* A process shorter than this has its end's clocks from the TSC and the
 * run's rate, which the reader converts it with anyway (a process shorter
 * than 50 ms: procfile.py, ticks_to_ns): two `clock_gettime` fewer in
 * every short process.  A longer one asks the kernel, and the reader
 * takes the TSC's rate over its life from those. */
#define END_FROM_TSC_NS 20000000ULL

static void stamp_end(uint32_t state)
{
    struct ferry_proc_header *h = ferry_hdr;
    uint64_t tsc = ferry_rdtsc(), ns = ~0ULL, ticks = tsc - h->start_tsc;
    /* in 64 bits: a 128-bit division is libgcc's __udivti3, on a page of
     * the shim's text no start touches (a fault in every process); a
     * product too large for 64 bits is a long process anyway */
    if (h->cal_tsc && h->cal_ns && tsc >= h->start_tsc && ticks <= ~0ULL / h->cal_ns)
        ns = ticks * h->cal_ns / h->cal_tsc;
    /* a sandboxed program's filter may kill it for a call it never made
     * itself (one that allows no clock_gettime: every profile's processes
     * died at exit; the call is refused now, sandbox.h, but its answer is
     * no clock); without a rate its end keeps its start's clocks */
    if (ns < END_FROM_TSC_NS || ferry_sandbox_on) {
        ns = ns == ~0ULL ? 0 : ns;
        h->end_real_ns = h->start_real_ns + ns;
        h->end_mono_ns = h->start_mono_ns + ns;
    } else {
        h->end_real_ns = ferry_real_ns();
        h->end_mono_ns = ferry_mono_ns();
    }
    h->end_tsc = tsc;
    __atomic_store_n(&h->state, state, __ATOMIC_RELEASE);
}

void ferry_store_detached(void)
{
    if (ferry_hdr)
        stamp_end(FERRY_STATE_DETACHED);
}

struct vfork_who {
    int pid, ppid;
};

/* The record of a vfork child that exec'd a program the shim serves,
 * written by its parent (or by whoever next finds it: the next vfork
 * child of the thread, the parent's exit or exec, when a signal handler
 * of the parent's came first). */
static long ended_write(const struct ferry_regs *unused)
{
    (void)unused;
    struct ferry_vfork_ended *e = &FERRY_THR->vfork_ended;
    int handed_back = FERRY_THR->vfork_handed_back;
    vfork_take_back();
    vfork_child_write(e->pid, e->ppid, FERRY_STATE_EXEC, 0, e->exec_path, e->kind, 1, e);
    vfork_hand_back();
    FERRY_THR->vfork_handed_back = handed_back;
    return 0;
}

/* `fn` run on the spare's stack, which no child uses now: a vfork child's
 * record takes ~4 KiB of frames to write, and its parent may be on a small
 * stack of the program's (a goroutine's: Go's os/exec vforks from one, and
 * the frames ran into the next goroutine's stack). */
static void on_spare_stack(long (*fn)(const struct ferry_regs *), const void *arg)
{
    ferry_call_on_stack(fn, arg, (char *)spare_internal() + SPARE_TALLY + SPARE_SCRATCH + SPARE_STACK);
}

static void vfork_ended_write(void)
{
    if (!FERRY_THR->vfork_ended.set || !FERRY_THR->spare)
        return;
    FERRY_THR->vfork_ended.set = 0;
    on_spare_stack(ended_write, 0);
}

/* A vfork child that execs a program the shim serves (whose shim is handed
 * the slot claimed beside the child's) leaves its record to its parent,
 * which runs again the moment the exec no longer needs the parent's memory:
 * opening the file, writing the record and closing it (~8-10 us) are then
 * made beside the exec, on another CPU, where they were on the path from
 * the shell's vfork to its command's start.  Only when the slots can be
 * taken without opening the file (those its parent claimed ahead); the
 * child's figures stay where they are, in the spare, which no one touches
 * before the record is written (vfork_ended_write).  1 when left so. */
static int vfork_child_leaves(struct vfork_who who, const char *exec_path, uint32_t kind)
{
    if (!st.dir[0] || !ferry_hdr || (FERRY_THR->vfork_file && FERRY_THR->vfork_file != VFORK_SLOT))
        return 0;
    uint32_t uid = (uint32_t)ferry_raw0(SYS_geteuid);
    if (!FERRY_THR->vfork_file) {
        struct ferry_slot slot;
        if (ferry_slot_take(uid, block_offset(FERRY_MAX_BLOCKS), 2, &slot))
            return 0;
        FERRY_THR->vfork_slot = slot;
        FERRY_THR->vfork_file = VFORK_SLOT;
        FERRY_THR->vfork_image = slot.index + 2;
    }
    ferry_store_hook_step(FERRY_HOOK_SLOT);
    ferry_store_hook_step(FERRY_HOOK_PACKED);
    FERRY_THR->vfork_ended = (struct ferry_vfork_ended){1, who.pid, who.ppid, uid, kind, exec_path,
                                                         ferry_real_ns(), ferry_mono_ns(), ferry_rdtsc()};
    return 1;
}

/* A vfork child's exit or exec: its record, written by itself (or, for an
 * exec whose program is handed a slot, left to its parent:
 * vfork_child_leaves), and the thread's state given back to its parent.
 * Who the child is. */
static struct vfork_who vfork_child_ends(uint32_t state, int exit_code, const char *exec_path, uint32_t kind,
                                         int image_slot)
{
    struct vfork_who who = {(int)ferry_memory_pid(),
                            FERRY_THR->vfork_ppid ? FERRY_THR->vfork_ppid : (int)ferry_raw0(SYS_getppid)};
    if (!(image_slot && state == FERRY_STATE_EXEC && vfork_child_leaves(who, exec_path, kind)))
        vfork_child_write(who.pid, who.ppid, state, exit_code, exec_path, kind, image_slot, 0);
    vfork_hand_back();
    return who;
}

void ferry_store_exit(int status)
{
    if (FERRY_THR->in_vfork_child) {
        vfork_child_ends(FERRY_STATE_EXITED, status, 0, 0, 0);
        return;
    }
    vfork_ended_write();
    if (!ferry_hdr)
        return;
    ferry_hdr->exit_code = status;
    stamp_end(FERRY_STATE_EXITED);
}

/* The FERRY_SLOT entry for the program a vfork child execs (store.h):
 * the slot, and who the program will be (the child's pid and parent). */
static void slot_entry_write(char *entry, size_t cap, int given, uint32_t file, uint32_t index,
                             struct vfork_who who)
{
    struct ferry_buf b = {entry, 0, cap, 0};
    ferry_buf_str(&b, "FERRY_SLOT=");
    size_t head = b.len;
    if (given) {
        ferry_buf_u64(&b, ferry_slot_uid());
        ferry_buf_str(&b, ":");
        ferry_buf_u64(&b, file);
        ferry_buf_str(&b, ":");
        ferry_buf_u64(&b, index);
        ferry_buf_str(&b, ":");
        ferry_buf_u64(&b, block_offset(FERRY_MAX_BLOCKS));
        ferry_buf_str(&b, ferry_slot_in_memory() ? ":1:" : ":0:");
        ferry_buf_u64(&b, (uint64_t)who.pid);
        ferry_buf_str(&b, ":");
        ferry_buf_u64(&b, (uint64_t)who.ppid);
    }
    entry[b.overflow ? head : b.len] = 0;
}

static void image_slot_entry(char *entry, size_t cap, struct vfork_who who)
{
    uint32_t image = FERRY_THR->vfork_image;
    slot_entry_write(entry, cap, image && FERRY_THR->vfork_file == VFORK_SLOT, FERRY_THR->vfork_slot.file,
                     image - 1, who);
}

/* The FERRY_SLOT entry for the program this process execs: the slot its
 * parent took for it when it forked, if it is still there. */
static void own_exec_slot_entry(char *entry, size_t cap)
{
    struct ferry_slot slot = {0, 0, 0};
    int given = ferry_slot_take_exec(ferry_slot_uid(), block_offset(FERRY_MAX_BLOCKS), &slot) == 0;
    struct vfork_who who = {0, 0};
    if (given)
        who = (struct vfork_who){ferry_hdr->pid, (int32_t)ferry_raw0(SYS_getppid)};
    slot_entry_write(entry, cap, given, slot.file, slot.index, who);
}

void ferry_store_exec_begin(const char *path, uint32_t kind, char *slot_entry, size_t cap)
{
    if (FERRY_THR->in_vfork_child) {
        /* Written now: if the exec succeeds nothing of us is left after it.
         * If it fails, the child goes on and its exit rewrites the file. */
        struct vfork_who who = vfork_child_ends(FERRY_STATE_EXEC, 0, path, kind, slot_entry != 0);
        if (slot_entry)
            image_slot_entry(slot_entry, cap, who);
        return;
    }
    vfork_ended_write();
    if (!ferry_hdr)
        return;
    if (slot_entry)
        own_exec_slot_entry(slot_entry, cap);
    size_t n = ferry_strlen(path);
    if (n >= sizeof(ferry_hdr->exec_path))
        n = sizeof(ferry_hdr->exec_path) - 1;
    ferry_memcpy(ferry_hdr->exec_path, path, n);
    ferry_hdr->exec_path[n] = 0;
    ferry_hdr->exec_kind = kind;
    ferry_hdr->exec_uid = (uint32_t)ferry_raw0(SYS_geteuid);
    stamp_end(FERRY_STATE_EXEC);
}

void ferry_store_exec_failed(void)
{
    FERRY_THR->vfork_unseen = 0;
    FERRY_THR->vfork_ended.set = 0;  /* the child goes on, and writes its record itself */
    if (FERRY_THR->vfork_handed_back)
        vfork_take_back();
    else if (!FERRY_THR->in_vfork_child && ferry_hdr)
        __atomic_store_n(&ferry_hdr->state, FERRY_STATE_RUNNING, __ATOMIC_RELEASE);
}

/* The thread's state is handed back as for any exec (a signal may run the
 * parent's code before its vfork call returns to the shim), but no record
 * is written: the exec is expected to fail as the hook's stat did. */
int ferry_store_exec_unseen(const char *path)
{
    if (!FERRY_THR->in_vfork_child)
        return 0;
    FERRY_THR->vfork_unseen = path;
    vfork_hand_back();
    return 1;
}

/* The child's exec of a file that was not there succeeded: the file
 * appeared in between, and the child's record is written here, from what it
 * left in the spare, as the child would have written it (but for its uid,
 * which here is the parent's).  A vfork of the parent's own that came
 * first (from a signal handler, before this call returned) cleared the
 * spare, and with it what there was to write. */
/* (`child`: the child's pid, through on_spare_stack's argument) */
static long unseen_write(const struct ferry_regs *child)
{
    const char *path = FERRY_THR->vfork_unseen;
    FERRY_THR->vfork_unseen = 0;
    vfork_take_back();
    vfork_child_write(*(const int *)child, ferry_raw0(SYS_getpid), FERRY_STATE_EXEC, 0, path, FERRY_EXEC_UNKNOWN,
                      0, 0);
    vfork_hand_back();
    return 0;
}

void ferry_store_vfork_returned(int child)
{
    vfork_ended_write();
    if (!FERRY_THR->vfork_unseen || !FERRY_THR->vfork_handed_back || !FERRY_THR->spare)
        return;
    on_spare_stack(unseen_write, &child);
}

/* The table is full (a shell, a make, a server's master that started
 * hundreds of children).  A child that a signal killed says so nowhere but
 * here: its own record never ends.  One that exited wrote its code in its
 * record if it was enabled, so the first such entry gives way to it: its
 * slot is taken by swapping its status (a thread waiting meanwhile takes
 * another).  FERRY_MAX_WAITS if there is none, or for another exit. */
static uint32_t wait_slot_given_up(int status)
{
    int killed = (status & 0x7f) != 0 && (status & 0x7f) != 0x7f;
    for (uint32_t i = 0; killed && i < FERRY_MAX_WAITS; i++) {
        int32_t was = __atomic_load_n(&ferry_hdr->waits[i].status, __ATOMIC_ACQUIRE);
        if ((was & 0x7f) == 0 &&
            __atomic_compare_exchange_n(&ferry_hdr->waits[i].status, &was, status, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return i;
    }
    return FERRY_MAX_WAITS;
}

void ferry_store_wait(int pid, int status)
{
    if (!ferry_hdr || FERRY_THR->in_vfork_child)
        return;
    uint32_t i = __atomic_fetch_add(&ferry_hdr->nwaits, 1, __ATOMIC_ACQ_REL);
    if (i >= FERRY_MAX_WAITS && (i = wait_slot_given_up(status)) >= FERRY_MAX_WAITS)
        return;
    ferry_hdr->waits[i].pid = pid;
    ferry_hdr->waits[i].status = status;
    ferry_hdr->waits[i].mono_ns = ferry_mono_ns();
}

void ferry_blk_sum(uint64_t *calls, uint64_t *invalid)
{
    if (FERRY_THR->in_vfork_child) {
        for (int i = 0; i < FERRY_NR_MAX; i++)
            calls[i] = FERRY_THR->blk->calls[i];
        *invalid = FERRY_THR->blk->invalid;
        return;
    }
    ferry_memset(calls, 0, FERRY_NR_MAX * sizeof(uint64_t));
    *invalid = 0;
    for (uint32_t i = 0; i < FERRY_MAX_BLOCKS; i++) {
        struct ferry_blk *b = block_at(i);
        if (!b)
            continue;  /* claimed by a thread still mapping it, or never */
        for (int n = 0; n < FERRY_NR_MAX; n++)
            calls[n] += __atomic_load_n(&b->calls[n], __ATOMIC_RELAXED);
        *invalid += __atomic_load_n(&b->invalid, __ATOMIC_RELAXED);
    }
}
