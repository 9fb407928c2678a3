/* The program's credentials on the engine's own threads.
 *
 * Credentials (user and group ids, supplementary groups, capabilities) are
 * each kernel thread's own; glibc makes a change of them the process's by
 * running it on every thread it made (its SIGSETXID broadcast).  The
 * engine's threads are not glibc's: its workers run the program's blocking
 * calls (flock, truncate, msgsnd, open_by_handle_at, ...) and its carriers
 * run fibers that may have moved there since, so a server that dropped root
 * had those calls run as root.  After a change made through the shim the
 * caller's credentials are read once; each engine thread takes them on
 * before it next runs a call of the program's (one load when nothing
 * changed).  A change a thread makes for itself alone (raw system calls
 * with per-thread credentials, as a file server may) is taken as the
 * process's, the latest one winning: the engine's threads serve every
 * program thread and can hold only one set. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "agg.h"
#include "engine.h"
#include "raw.h"
#include "util.h"

#define CAP_VERSION_3 0x20080522

struct cap_header {
    uint32_t version;
    int pid;
};

struct cap_data {
    uint32_t effective, permitted, inheritable;
};

static struct {
    int lock;
    uint32_t uid[3], gid[3], fsuid, fsgid;
    struct cap_data caps[2];
    long ngroups;
    uint32_t *groups;
    long capacity;
} creds;

/* Bumped at each change; an engine thread that saw an older one takes the
 * credentials on.  0: the credentials every thread was made with. */
uint32_t agg_creds_gen FERRY_HOT;
static int watching FERRY_HOT;

int agg_creds_call(long nr)
{
    switch (nr) {
    case SYS_setuid: case SYS_setgid: case SYS_setreuid: case SYS_setregid:
    case SYS_setresuid: case SYS_setresgid: case SYS_setgroups: case SYS_capset:
    case SYS_setfsuid: case SYS_setfsgid:
        return 1;
    }
    return 0;
}

/* Once the engine has threads of its own (a group exists): before, there is
 * nobody to tell, and a plain process's setuid costs no calls more.  From
 * then on the calls leave the entry's fast path, so that a fiber's reaches
 * agg_creds_changed. */
void agg_creds_watch(void)
{
    for (long nr = 0; nr < FERRY_NR_MAX; nr++)
        if (agg_creds_call(nr))
            __atomic_store_n(&ferry_action[nr], 1, __ATOMIC_RELAXED);
    __atomic_store_n(&watching, 1, __ATOMIC_RELEASE);
}

void agg_creds_changed(void)
{
    struct agg_carrier *c = agg_carrier;  /* it has them already */
    uint32_t *seen = c ? &c->creds_seen : 0;
    if (!__atomic_load_n(&watching, __ATOMIC_ACQUIRE))
        return;
    agg_lock(&creds.lock);
    ferry_raw3(SYS_getresuid, (long)&creds.uid[0], (long)&creds.uid[1], (long)&creds.uid[2]);
    ferry_raw3(SYS_getresgid, (long)&creds.gid[0], (long)&creds.gid[1], (long)&creds.gid[2]);
    /* an id no one has changes nothing and says the current one */
    creds.fsuid = (uint32_t)ferry_raw1(SYS_setfsuid, -1);
    creds.fsgid = (uint32_t)ferry_raw1(SYS_setfsgid, -1);
    struct cap_header h = {CAP_VERSION_3, 0};
    if (ferry_raw2(SYS_capget, (long)&h, (long)creds.caps) != 0)
        ferry_memset(creds.caps, 0, sizeof(creds.caps));
    long n = ferry_raw2(SYS_getgroups, 0, 0);
    if (n > creds.capacity) {
        uint32_t *more = agg_calloc((size_t)n, sizeof(uint32_t));
        if (more) {
            agg_free(creds.groups);
            creds.groups = more;
            creds.capacity = n;
        }
    }
    creds.ngroups = n >= 0 && n <= creds.capacity ? ferry_raw2(SYS_getgroups, n, (long)creds.groups) : -1;
    uint32_t gen = __atomic_add_fetch(&agg_creds_gen, 1, __ATOMIC_ACQ_REL);
    if (seen)
        *seen = gen;
    agg_unlock(&creds.lock);
    agg_workers_take_on_creds(gen);
}

/* What the kernel allows depends on what the thread has: ids set while it
 * may still set groups and any id, its capabilities kept across the
 * change of user so that they can be set to the program's afterwards. */
static void take_on(void)
{
    int to_root = creds.uid[1] == 0;
    ferry_raw2(SYS_prctl, PR_SET_KEEPCAPS, 1);
    if (to_root)
        ferry_raw3(SYS_setresuid, creds.uid[0], creds.uid[1], creds.uid[2]);
    if (creds.ngroups >= 0)
        ferry_raw2(SYS_setgroups, creds.ngroups, (long)creds.groups);
    ferry_raw3(SYS_setresgid, creds.gid[0], creds.gid[1], creds.gid[2]);
    if (!to_root)
        ferry_raw3(SYS_setresuid, creds.uid[0], creds.uid[1], creds.uid[2]);
    ferry_raw1(SYS_setfsgid, creds.fsgid);  /* after the ids, which set them to the effective ones */
    ferry_raw1(SYS_setfsuid, creds.fsuid);
    struct cap_header h = {CAP_VERSION_3, 0};
    ferry_raw2(SYS_capset, (long)&h, (long)creds.caps);
    ferry_raw2(SYS_prctl, PR_SET_KEEPCAPS, 0);
}

/* A fork child: a lock its parent's other threads held stays held, and
 * its parent's workers are not its own.  Only where a group made the
 * engine's threads: the words read here lie in pages of .bss that a fork
 * child of any other process would read for nothing (a fault each,
 * test_a_fork_child_writes_few_pages_of_the_shims_variables). */
void agg_creds_after_fork(void)
{
    if (!__atomic_load_n(&watching, __ATOMIC_RELAXED))
        return;
    if (__atomic_load_n(&creds.lock, __ATOMIC_RELAXED))
        creds.lock = 0;
    agg_workers_after_fork();
}

/* Bumped, and woken, as an engine thread takes on a change: what a change
 * of the program's waits on (agg_workers_take_on_creds). */
uint32_t agg_creds_taken;

void agg_creds_follow_slow(uint32_t *seen)
{
    agg_lock(&creds.lock);
    if (*seen != agg_creds_gen) {
        take_on();
        *seen = agg_creds_gen;
    }
    agg_unlock(&creds.lock);
    __atomic_add_fetch(&agg_creds_taken, 1, __ATOMIC_RELEASE);
    ferry_raw3(SYS_futex, &agg_creds_taken, FUTEX_WAKE_PRIVATE, 1);
}
