/* Process records as slots of a few files shared by the processes of one
 * user (procfile.h, struct ferry_slots_head): a process start opens an
 * existing file and takes the next slot under its lock (the file grows by
 * it), where it used to create a file (an inode, and a directory entry) of
 * its own. */
#ifndef FERRY_SLOTS_H
#define FERRY_SLOTS_H

#include <stdint.h>

#include "procfile.h"

struct ferry_slot {
    uint32_t file;      /* k of `u<euid>-<k>.ferry` */
    uint32_t index;     /* slot in that file */
    uint64_t off;       /* the slot's file offset */
};

/* The calls a claim made before its record was mapped, by number: a few
 * numbers (slots.c makes nine kinds of call), where a table of every
 * number was 4 KiB of stack written in every start. */
#define FERRY_TALLY_KINDS 16
struct ferry_tally {
    uint32_t kinds;
    struct {
        uint16_t nr;
        uint16_t count;
    } of[FERRY_TALLY_KINDS];
};

/* Each takes `uid`, the caller's effective user ID (geteuid), which names
 * and owns the files: read once by the caller, for the record it writes
 * too. */

/* A slot of `stride` bytes in `<dir>/proc/u<euid>-<k>.ferry`, its first
 * `map_size` bytes mapped shared (MADV_RANDOM); NULL when none could be had.
 * `tally` counts the calls made from the first that opened a file on (the
 * one a tracer sees as the shim's start), by number. */
struct ferry_proc_header *ferry_slot_map(const char *dir, uint32_t uid, uint64_t stride, uint64_t map_size,
                                         struct ferry_slot *slot, struct ferry_tally *tally);

/* For a vfork child, which must map nothing (its memory is its parent's):
 * `count` slots of the file its parent last mapped, if the child's user is
 * that file's (`slot` is the first).  A descriptor open for writing, or
 * -errno. */
int ferry_slot_open(const char *dir, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot,
                    struct ferry_tally *tally);

/* In a fork child: the slots its parent claimed ahead for its vfork
 * children stay the parent's. */
void ferry_slots_after_fork(void);

/* A slot that a vfork child's exec hook claimed for the program it execs,
 * beside its own (the program's shim is handed it in FERRY_SLOT): claimed
 * once, under one lock, where the program would take the file's lock again
 * to claim one of its own. */
struct ferry_slot_hint {
    uint32_t uid;
    uint32_t file;
    uint32_t index;
    uint32_t in_memory;     /* the file is on a tmpfs (its head's in_memory) */
    uint64_t stride;
};

/* The user whose file slots were last claimed from (by the caller). */
uint32_t ferry_slot_uid(void);

/* Whether that file is on a tmpfs: a mapping of it reads nothing ahead, and
 * needs no MADV_RANDOM. */
int ferry_slot_in_memory(void);

/* The slot of `hint`, its first `map_size` bytes mapped shared, if it is
 * one of this user's for records of `stride` bytes; NULL otherwise (the
 * caller claims one as usual). */
struct ferry_proc_header *ferry_slot_map_claimed(const char *dir, uint32_t uid, uint64_t stride,
                                                 uint64_t map_size, const struct ferry_slot_hint *hint,
                                                 struct ferry_slot *slot, struct ferry_tally *tally);

/* `count` slots from those this process claimed ahead for its vfork
 * children, taken without opening the file (the one who writes them opens
 * it, and checks it then): 0, or -ENOENT when there are not as many. */
int ferry_slot_take(uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot);

/* `count` slots for the child of a fork about to be made, taken in the
 * parent (a fork child's memory is a copy: taking from `ahead` there would
 * take what the parent takes too): from those claimed ahead, else claimed
 * under one lock with more for the next children.  0, or -errno. */
int ferry_slot_reserve(const char *dir, uint32_t uid, uint64_t stride, uint32_t count, struct ferry_slot *slot);
/* In a fork child, after ferry_slots_after_fork: the two slots its parent
 * took for it (from `slot`); `hint` gets the first, for its own record,
 * and the second is kept for the program it may exec. */
void ferry_slots_given(const struct ferry_slot *slot, uint32_t uid, uint64_t stride, struct ferry_slot_hint *hint);
/* Whether that second slot is still there. */
int ferry_slot_exec_left(void);
/* It taken: 0, or -ENOENT. */
int ferry_slot_take_exec(uint32_t uid, uint64_t stride, struct ferry_slot *slot);

/* The file of a slot, open for writing, or -errno; `sized`: the slot was
 * claimed before, and the file reaches past its header.  `size` (if not
 * NULL): the file's size. */
int ferry_slot_reopen(const char *dir, uint32_t uid, const struct ferry_slot *slot, struct ferry_tally *tally,
                      int sized, uint64_t *size);

#endif
