/* One process image's statistics: a record in the run directory, written
 * through a shared mapping while the process runs.  A record is a slot of a
 * slot file `proc/u<euid>-<k>.ferry` (struct ferry_slots_head, below) that
 * every process of that user shares, or, where no slot can be had (a vfork
 * child that changed user), a file of its own `proc/<pid>-<seq>.ferry`; the
 * layout is the same either way.
 *
 * Nothing is "written at exit": every count lands in the file as it happens,
 * so a process that crashes, is killed, or replaces itself with exec leaves
 * everything it counted.  The header says how the process ended, when it
 * could tell.  Without a run directory the same layout lives in anonymous
 * memory.  ferry/procfile.py reads it with the offsets the compiler gives
 * (ferry.base.layouts, generated from this header by tools/gen_layouts.py).
 *
 * A record has room for max_blocks blocks (sparse: only what is written
 * takes room) and the shim keeps no descriptor of it: a thread's
 * block is mapped from the mappings it already has (store.c), so the program
 * never finds a descriptor of Ferry's among its own.
 */
#ifndef FERRY_PROCFILE_H
#define FERRY_PROCFILE_H

#include <stdint.h>

#include "layout.h"

#define FERRY_PROC_MAGIC "FERRYPROC\0v1\0\0\0\0"
/* 6: a vfork child's block may be packed into its header's first pages
 * (packed_at, packed_len), exe 760 bytes;
 * 5: the first modules in the first page (first_modules), the command line
 * after them; 4: a block's figures per site in a table probed from the
 * site's number (struct ferry_site_stats), the tables after them a page
 * further on;
 * 3: the shim's own calls counted in the first page (own), exe 768 bytes;
 * 2: a block's figures per call number in order of first use (nr_slot),
 * exec_path before cmdline; 1: figures at a fixed place per number, exec_path
 * after cmdline (ferry/procfile.py reads all six) */
#define FERRY_PROC_VERSION 6
#define FERRY_PROC_HEADER_SIZE 65536
#define FERRY_MAX_BLOCKS 1024
#define FERRY_MAX_SITES 4096
#define FERRY_MAX_MODULES 128
#define FERRY_FIRST_MODULES 2       /* modules whose entries lie in the header's first page */
#define FERRY_MAX_WAITS 512
#define FERRY_ERRNO_SLOTS 1024
#define FERRY_HIST_BUCKETS 32
#define FERRY_OWN_KINDS 32          /* numbers the header's first page tallies */
/* platform: whose call numbers the file counts; a Windows process's name
 * table holds one NUL-padded name of FERRY_CALL_NAME_SIZE bytes a number */
#define FERRY_PLATFORM_LINUX 0
#define FERRY_PLATFORM_WINDOWS 1
#define FERRY_CALL_NAME_SIZE 64

enum ferry_proc_state {
    FERRY_STATE_RUNNING = 1,
    FERRY_STATE_EXITED = 2,     /* exit_group: exit_code holds its status */
    FERRY_STATE_EXEC = 3,       /* execve under way: exec_path; if the file
                                   still says so, the exec succeeded */
    FERRY_STATE_DETACHED = 4,   /* `ferry detach`: no longer intercepted */
};

/* What an exec will run, as the shim saw it before the call. */
enum ferry_exec_kind {
    FERRY_EXEC_REWRITTEN = 1,   /* the cached rewritten image: it carries the shim */
    FERRY_EXEC_PLAIN = 2,       /* a dynamic program not rewritten yet */
    FERRY_EXEC_SETUID = 3,      /* set-user/group-ID or file capabilities: never enabled */
    FERRY_EXEC_STATIC = 4,      /* statically linked, no rewritten image */
    FERRY_EXEC_UNKNOWN = 5,     /* not an ELF program (nor a script whose interpreter is one) */
    FERRY_EXEC_FOREIGN = 6,     /* an ELF program for another machine */
    FERRY_EXEC_WINDOWS = 7,     /* wine on a Windows program, started with ferry.dll (exec_wine.c) */
    FERRY_EXEC_STATIC_PIE = 8,  /* static-pie, no rewritten image */
    FERRY_EXEC_ELF32 = 9,       /* a 32-bit program */
    FERRY_EXEC_LOADER = 10,     /* dynamic, with a loader other than glibc's x86-64 ld.so (musl's) */
    FERRY_EXEC_PACKED = 11,     /* packed with UPX: its code exists only once it unpacked itself */
    FERRY_EXEC_UNREADABLE = 12, /* the process may run the file but not read it */
    FERRY_EXEC_NO_ROOM = 13,    /* the environment or arguments did not fit the hook's tables,
                                   so it could not add the run's settings */
    FERRY_EXEC_SANDBOXED = 14,  /* the process had confined its calls (seccomp): the filter
                                   stays in force in the program it runs */
};

/* Where a process's start goes (bench/spawn.py reads them): the TSC when
 * the shim's constructor began, after each of its steps, and when the exec
 * hook that ended the previous image began (its end is end_tsc). */
enum ferry_span {
    FERRY_SPAN_CTOR = 0,        /* constructor entered */
    FERRY_SPAN_FILE = 1,        /* process file made */
    FERRY_SPAN_CALIBRATED = 2,  /* TSC rate known */
    FERRY_SPAN_MODULES = 3,     /* rewritten modules enabled */
    FERRY_SPAN_PLANS = 4,       /* plans applied (load-time patching) */
    FERRY_SPAN_CATCHALL = 5,    /* catch-all armed */
    FERRY_SPAN_READY = 6,       /* constructor done */
    FERRY_SPAN_EXEC_HOOK = 7,   /* exec hook entered (this image's last exec) */
};

/* A vfork child has no start of its own: its record's start_spans before
 * FERRY_SPAN_EXEC_HOOK hold its exec hook's steps instead (0: not reached),
 * the TSC after each; its end_tsc is when its record was written. */
enum ferry_hook_step {
    FERRY_HOOK_PATH = 0,        /* the path read, a Windows program ruled out */
    FERRY_HOOK_CACHE = 1,       /* the cache looked up: the file's stat, its link, the target */
    FERRY_HOOK_ENV = 2,         /* the program's environment built */
    FERRY_HOOK_SLOT = 3,        /* the record's slot open */
    FERRY_HOOK_PACKED = 4,      /* the block packed (or written) */
    FERRY_HOOK_STEPS = 5,
};

enum ferry_mode { FERRY_MODE_OFF = 0, FERRY_MODE_COUNT = 1, FERRY_MODE_TRACE = 2,
                 FERRY_MODE_AGGREGATE = 3 };

struct ferry_module_entry {
    char name[232];
    uint32_t nsites;
    uint32_t site_base;     /* global index of its site 0 */
    uint64_t load_base;
    uint64_t reserved;
};

struct ferry_wait_entry {   /* a child's end, as its parent's wait4 saw it */
    int32_t pid;
    int32_t status;
    uint64_t mono_ns;
};

struct ferry_proc_header {
    char magic[16];                 /* 0 */
    uint32_t version;               /* 16 */
    uint32_t header_size;           /* 20 */
    uint32_t block_size;            /* 24 */
    uint32_t max_blocks;            /* 28 */
    uint32_t nblocks;               /* 32: blocks claimed so far */
    uint32_t state;                 /* 36 */
    int32_t pid;                    /* 40 */
    int32_t ppid;                   /* 44 */
    int32_t exit_code;              /* 48 */
    int32_t mode;                   /* 52 */
    uint64_t start_real_ns;         /* 56 */
    uint64_t start_mono_ns;         /* 64 */
    uint64_t start_tsc;             /* 72 */
    uint64_t end_real_ns;           /* 80 */
    uint64_t end_mono_ns;           /* 88 */
    uint64_t end_tsc;               /* 96 */
    uint64_t cal_tsc;               /* 104: calibration: ticks in cal_ns */
    uint64_t cal_ns;                /* 112 */
    uint32_t nmodules;              /* 120 */
    uint32_t nsites;                /* 124 */
    uint32_t nwaits;                /* 128 */
    uint32_t event_capacity;        /* 132: events per block */
    uint32_t overflow;              /* 136: threads that found every block taken (once each) */
    uint32_t seq;                   /* 140: in a file of its own, the image number of
                                       this pid; in a slot file, the slot's index (the
                                       reader numbers a pid's images by their start) */
    uint32_t exec_kind;             /* 144: what the exec in exec_path runs (enum below) */
    uint32_t load_patched;          /* 148: modules enabled by a load-time plan */
    uint32_t uid;                   /* 152: effective user ID when the file was made */
    uint32_t exec_uid;              /* 156: effective user ID when exec_path began */
    uint64_t start_spans[8];        /* 160: TSC at each step of the shim's start (FERRY_SPAN_*) */
    uint32_t platform;              /* 224: 0 Linux; 1 Windows (ferry.dll): call numbers
                                       index the name table below, not Linux's */
    uint32_t names_size;            /* 228: bytes of the name table (0: none) */
    uint64_t names_offset;          /* 232: file offset of the name table: one
                                       NUL-padded 64-byte name per call number */
    uint32_t catchall_on;           /* 240: 1 when the catch-all ran in this process; its
                                       area (catchall, below) is written from the first
                                       call it caught: a page less for each process */
    uint32_t start_retries;         /* 244: ferry.dll: children wine failed to start
                                       (STATUS_INTERNAL_ERROR) and Ferry started again */
    uint64_t exe_ino;               /* 248: not 0: exe is the name the program was
                                       executed by (AT_EXECFN, made absolute), not
                                       resolved, and it named this inode on exe_dev:
                                       the reader resolves its symlinks */
    char exe[760];                  /* 256: as /proc/self/exe says, or as above */
    uint32_t packed_at;             /* 1016: not 0: block 0's figures are not in the
                                       block's room but here, packed (below), in the
                                       room after the command line: a vfork child's few
                                       figures took 3 pages of its own (calls, timings,
                                       sites) in every command a shell started */
    uint32_t packed_len;            /* 1020: bytes of them */
    uint64_t own[FERRY_OWN_KINDS];  /* 1024: the shim's own calls, an entry per number
                                       (placed from the number, or the next one free):
                                       (nr + 1) << 48 | count; the numbers beyond them count in
                                       internal[].  Every process makes a few, and
                                       internal[]'s page was one more page of the
                                       record to write in each (version 2: all
                                       there, exe 1024 bytes) */
    char exec_path[1024];           /* 1280: in the first page with the rest
                                       that a process always writes (version 1:
                                       after cmdline, a page more for each exec) */
    uint32_t cmdline_len;           /* 2304 */
    uint32_t exe_dev;               /* 2308: with exe_ino */
    struct ferry_module_entry first_modules[FERRY_FIRST_MODULES];   /* 2312: modules 0 and
                                       1, in the page every start writes: most processes
                                       have one or two (a rewritten libc), and the table
                                       was a page of its own to write in each (a fault in
                                       the program, a page its vfork child wrote: version
                                       4); ferry_module_at() says where an entry lies */
    char cmdline[4096];             /* 2824: NUL-separated arguments */
    char reserved2[8192 - 6920];    /* 6920 */
    struct ferry_module_entry modules[FERRY_MAX_MODULES];   /* 8192: modules from
                                       FERRY_FIRST_MODULES on (the first slots unused) */
    struct ferry_wait_entry waits[FERRY_MAX_WAITS];         /* 40960 */
    uint64_t internal[FERRY_NR_MAX];                        /* 49152: the shim's own calls
                                                               beyond own[]'s numbers */
    char catchall[4096];            /* 53248: sites caught by the catch-all (catchall.h) */
    char aggregate[8192];           /* 57344: aggregation statistics (aggarea.h) */
};

/* Where module entry `k` of a record lies. */
static inline struct ferry_module_entry *ferry_module_at(struct ferry_proc_header *h, uint32_t k)
{
    return k < FERRY_FIRST_MODULES ? &h->first_modules[k] : &h->modules[k];
}

/* A slot file: this head, then `capacity` slots of `stride` bytes each, slot
 * i at FERRY_SLOTS_HEAD + i * stride, each a process record as above.  Made
 * by the first process of its user, owned by that user and writable by
 * nobody else; under the file's lock (flock), a process takes the slot
 * that starts where the file ends and grows the file (sparse) by it: the
 * slots claimed are the ones the file's size holds.  (`next` counted them
 * in runs of earlier versions; it stays 0.)  Creating a file per process
 * cost each an inode (50-170 us on ext4), two per command a shell starts. */
#define FERRY_SLOTS_MAGIC "FERRYSLOTS\0v1\0\0\0"
#define FERRY_SLOTS_VERSION 1
#define FERRY_SLOTS_HEAD 4096
#define FERRY_SLOTS_MAX 4096        /* slots in one file at most */

struct ferry_slots_head {
    char magic[16];                 /* 0 */
    uint32_t version;               /* 16 */
    uint32_t capacity;              /* 20: slots in the file */
    uint64_t stride;                /* 24: bytes per slot */
    uint32_t next;                  /* 32: 0 (earlier versions: slots claimed) */
    uint32_t ready;                 /* 36: 1 once the file is sized and this head written */
    uint32_t in_memory;             /* 40: 1: the file is on a tmpfs, whose faults read
                                       nothing ahead: its mappings need no MADV_RANDOM */
};

/* The catch-all's record (header offset 53248): every site outside the
 * patched code whose calls Syscall User Dispatch caught, with the file and
 * file offset of its mapping so that `ferry run` can plan that module.
 * Written from the first call caught (the header's catchall_on says the
 * catch-all ran); all zeros until then. */
#define FERRY_CATCH_MAGIC "FERRYCAT"
#define FERRY_CATCH_SITES 31
#define FERRY_CATCH_OFFSET_VALID 1  /* flags: path and offset name a file */

struct ferry_catch_site {
    uint64_t addr;                  /* the `syscall` instruction, in this process */
    uint64_t offset;                /* its offset in the mapped file */
    uint64_t count;
    uint32_t nr;                    /* the last syscall number caught there */
    uint32_t flags;
    char path[96];                  /* the mapping's name, "" when anonymous */
};

struct ferry_catch_area {
    char magic[8];
    uint32_t enabled;               /* 1 when the catch-all ran in this process */
    uint32_t nsites;                /* entries used (at most FERRY_CATCH_SITES) */
    uint64_t caught;                /* calls caught, all sites */
    uint64_t overflow;              /* calls at sites beyond the table */
    uint64_t reserved[4];
    struct ferry_catch_site sites[FERRY_CATCH_SITES];
};

/* Per syscall number, in trace mode (calls are counted in blk.calls); a
 * block's nr[] holds them in the order the numbers were first timed, and
 * nr_slot says where: a short process times a few numbers, and each one at
 * a fixed place (288 bytes apart) was another page of the record to fault
 * in, allocate on disk and write back (`ls`: 16 pages, 6 of them these). */
struct ferry_nr_stats {
    uint64_t errors;
    uint64_t time_total;            /* TSC ticks */
    uint64_t time_min;
    uint64_t time_max;
    uint64_t hist[FERRY_HIST_BUCKETS];  /* log2 of the duration in ns */
};

/* A site's figures, in a table keyed by the site: a process's sites lie
 * anywhere in the numbering of every site its modules have (libc's alone
 * are ~1,700), and figures at the site's own place (version 3) put each
 * site a process used on a page of its own: `ls -l` wrote 4 pages of them,
 * each a fault in the program, a page of the record and one more to read.
 * Each site is looked for from a place its number gives, first within the
 * table's first page, then within its next four, then over the whole table,
 * which has an entry for every site there can be (trace.c); an entry, once
 * taken, stays its site's. */
struct ferry_site_stats {
    uint32_t site;                  /* 1 + the global site index; 0: free */
    uint32_t reserved;
    uint64_t calls;
    uint64_t errors;
    uint64_t time_total;
};

struct ferry_errno_slot {
    uint32_t key;                   /* nr << 16 | errno; 0 = free */
    uint32_t reserved;
    uint64_t count;
};

struct ferry_event {
    uint64_t enter_tsc;
    uint64_t exit_tsc;
    int64_t result;
    uint16_t nr;
    uint16_t reserved;
    uint32_t site;                  /* global site index + 1; 0 unknown */
};

/* A thread's block.  The first part is the counting hot path's layout. */
struct ferry_blk {
    uint32_t in_use;                /* 0 */
    int32_t tid;                    /* 4 */
    struct ferry_blk *next;         /* 8: in-memory list (a pointer: meaningless in the file) */
    uint64_t event_head;            /* 16: events written so far */
    uint32_t spilled;               /* 24: FERRY_SPILL_*: tables with an entry beyond
                                       their first page (which pages may hold data) */
    uint32_t reserved1;
    uint64_t reserved[4];           /* 32 */
    uint64_t calls[FERRY_NR_MAX];   /* 64 = FERRY_BLK_CALLS */
    uint64_t invalid;               /* 4160 */
    uint32_t nr_used;               /* 4168: entries of nr[] handed out */
    uint32_t reserved3;
    uint64_t reserved2[6];
    uint16_t nr_slot[FERRY_NR_MAX]; /* 4224: 1 + the index in nr[] of a number's
                                       figures; 0: not timed yet */
    struct ferry_nr_stats nr[FERRY_NR_MAX];         /* 5248, in order of first use */
    char reserved4[2944];           /* 152704: sites start a page */
    struct ferry_site_stats sites[FERRY_MAX_SITES]; /* 155648 */
    struct ferry_errno_slot errnos[FERRY_ERRNO_SLOTS]; /* 286720 */
    struct ferry_event events[];    /* 303104 */
};

/* A packed block (a vfork child's: the header's packed_at and packed_len):
 * the words of the block that are not zero, as runs, each this head and
 * then `len` bytes that lie at `offset` of the block; the rest of the block
 * is zeros, and its room in the record holds nothing.  Offsets and lengths
 * are multiples of 8, within the block's tables (events are not packed). */
struct ferry_packed_run {
    uint32_t offset;
    uint32_t len;
};

/* A block's `spilled`: the site table holds an entry in its next four pages
 * (NEAR) or anywhere (FAR), the errno table one beyond its first page.  Set
 * on the path that looks further than the first page, which a process with
 * few sites never takes: a vfork child's record reads the pages these say
 * may hold anything, where it asked the kernel which it had touched. */
#define FERRY_SPILL_SITES_NEAR 1u
#define FERRY_SPILL_SITES_FAR 2u
#define FERRY_SPILL_ERRNOS 4u

/* The figures of number `nr` (< FERRY_NR_MAX) in block `b`, given an entry
 * of their own on first use.  A block is one thread's, but a signal handler
 * on that thread may time a call in the middle of this: the claim is a
 * compare-and-swap, and an entry it lost stays unused (nr_slot never names
 * it, so it is never read). */
static inline struct ferry_nr_stats *ferry_nr_figures(struct ferry_blk *b, unsigned nr)
{
    uint16_t k = __atomic_load_n(&b->nr_slot[nr], __ATOMIC_RELAXED);
    if (!k) {
        uint32_t got = __atomic_add_fetch(&b->nr_used, 1, __ATOMIC_RELAXED);
        if (got > FERRY_NR_MAX)  /* only entries lost to handlers: none left */
            return 0;
        uint16_t want = 0;
        if (__atomic_compare_exchange_n(&b->nr_slot[nr], &want, (uint16_t)got, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            k = (uint16_t)got;
        else
            k = want;
    }
    return &b->nr[k - 1];
}

_Static_assert(sizeof(struct ferry_proc_header) == FERRY_PROC_HEADER_SIZE, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, uid) == 152, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, names_offset) == 232, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, start_spans) == 160, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, catchall_on) == 240, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, exe_ino) == 248, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, exe) == 256, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, packed_at) == 1016, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, own) == 1024, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, exe_dev) == 2308, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, exec_path) == 1280, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, first_modules) == 2312, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, cmdline) == 2824, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, modules) == 8192, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, waits) == 40960, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, internal) == 49152, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, catchall) == 53248, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_proc_header, aggregate) == 57344, "header layout");
_Static_assert(__builtin_offsetof(struct ferry_slots_head, next) == 32, "slots layout");
_Static_assert(__builtin_offsetof(struct ferry_slots_head, ready) == 36, "slots layout");
_Static_assert(sizeof(struct ferry_catch_site) == 128, "catch layout");
_Static_assert(sizeof(struct ferry_catch_area) <= 4096, "catch layout");
_Static_assert(sizeof(struct ferry_module_entry) == 256, "module layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, calls) == FERRY_BLK_CALLS, "blk layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, nr_slot) == 4224, "blk layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, nr) == 5248, "blk layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, sites) == 155648, "blk layout");
_Static_assert(sizeof(struct ferry_site_stats) == 32, "blk layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, errnos) == 286720, "blk layout");
_Static_assert(__builtin_offsetof(struct ferry_blk, events) == 303104, "blk layout");
_Static_assert(sizeof(struct ferry_event) == 32, "event layout");

#endif
