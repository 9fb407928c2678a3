/* The program's environment as it would be without Ferry.
 *
 * Whoever starts a process enabled (`ferry run`, or the exec hook of an
 * enabled parent) adds what the shim needs to the environment: FERRY_*
 * settings, and LD_PRELOAD / LD_LIBRARY_PATH so that ld.so loads the shim and
 * the cached rewritten libraries.  By the time the shim's constructor runs,
 * ld.so has consumed them; the program must see its own environment.  So the
 * shim takes Ferry's settings (settings.h) out of the environment array, and gives
 * LD_PRELOAD / LD_LIBRARY_PATH back the values the program had, which the
 * starter left in FERRY_WAS_<NAME>=<flag><value> ("0": the variable was not
 * set; "1" followed by the value: it was).
 *
 * The array is changed in place: it is the one libc's `environ` points to
 * (ld.so hands the same pointer to every constructor), so getenv, environ and
 * every child the program starts see the result.
 */
#include "environ.h"
#include "settings.h"
#include "util.h"

#define WAS "FERRY_WAS_"
#define WAS_LEN 10

static const char *const restored[] = {"LD_PRELOAD", "LD_LIBRARY_PATH"};

/* Entries whose strings the restore measures (and moves: compact_strings);
 * a larger environment keeps its layout. */
#define MAX_MEASURED 4096

/* The marker for variable `name` in `envp`, or 0. */
static char *marker_of(char **envp, const char *name)
{
    for (char **e = envp; *e; e++)
        if (ferry_memeq(*e, WAS, WAS_LEN) && ferry_entry_value(*e + WAS_LEN, name))
            return *e;
    return 0;
}

/* /proc/PID/environ shows the strings the kernel laid out, not the array:
 * move the ones kept (`kept`, their lengths `len`) down over the ones taken
 * out, from `start` (the first string) up to `end` (past the last), so that
 * it shows none of Ferry's, in the array's order as natively.  In place
 * when the entries kept are in address order, as they are unless a value
 * was given back (it lives where its marker was); through `copy` (`cap`
 * bytes) when they are not.  The copy was made in every start: for an
 * environment of more than a few KiB (a CI runner's, ~10) it lay in a
 * scratch area of its own, a fault for each of its pages. */
static void compact_strings(char *start, char *end, char **kept, const uint32_t *len, char *copy,
                            size_t cap)
{
    int ascending = 1;
    for (size_t k = 0; kept[k]; k++) {
        if (kept[k] < start || kept[k] >= end)
            return;  /* a string from elsewhere: leave the layout alone */
        ascending &= k == 0 || kept[k] > kept[k - 1];
    }
    if (ascending) {
        char *cursor = start;
        for (size_t k = 0; kept[k]; k++) {
            size_t n = (size_t)len[k] + 1;
            /* ferry_memcpy copies forwards (rep movsb), so a string moved
             * to a lower address that overlaps its old place is intact */
            if (kept[k] != cursor)
                ferry_memcpy(cursor, kept[k], n);
            kept[k] = cursor;
            cursor += n;
        }
        ferry_memset(cursor, 0, (size_t)(end - cursor));
        return;
    }
    size_t used = 0;
    for (size_t k = 0; kept[k]; k++) {
        size_t n = (size_t)len[k] + 1;
        if (used + n > cap)
            return;
        ferry_memcpy(copy + used, kept[k], n);
        used += n;
    }
    ferry_memcpy(start, copy, used);
    char *cursor = start;
    for (size_t k = 0; kept[k]; k++) {
        kept[k] = cursor;
        cursor += (size_t)len[k] + 1;
    }
    ferry_memset(cursor, 0, (size_t)(end - cursor));
}

void ferry_environ_restore(char **envp)
{
    if (!envp)
        return;
    /* Each string is measured once, as the kernel laid it out, before a
     * marker is rebuilt into the entry it gives back (one byte shorter: the
     * strings measured after that no longer lay back to back, and
     * /proc/PID/environ showed every setting of Ferry's to whoever had
     * LD_PRELOAD or LD_LIBRARY_PATH set, unless its marker came last).
     * Once, not four times (a third of the restore's ~7 us): the lengths,
     * and below them the copy compact_strings makes, in one piece of
     * memory.  On the stack for an environment of a few KiB, at the
     * buffer's top end: the pages nearest the caller's frame, which the
     * start has touched already (its bottom end, or a page of its own, was
     * a page fault in every start).  Larger ones in a scratch area of
     * their own. */
    static uint32_t scratch[MAX_MEASURED + 65536 / sizeof(uint32_t)] FERRY_COLD __attribute__((aligned(4096)));
    uint32_t local[2048];
    size_t norig = 0;
    while (envp[norig])
        norig++;
    /* Beyond MAX_MEASURED entries the strings stay where they are, and so
     * do the slots after the array's end (as before the restore). */
    int whole = norig <= MAX_MEASURED;
    uint32_t *len = 0;
    char *start = envp[0], *end = 0, *copy = 0;
    size_t room = 0;
    if (whole && norig) {
        size_t bytes = 0;
        int back_to_back = 1;
        uint32_t *lens = norig <= 512 ? local + 2048 - norig : scratch;
        for (size_t i = 0; i < norig; i++) {
            size_t n = ferry_strlen(envp[i]);
            back_to_back &= !end || envp[i] == end;
            lens[i] = (uint32_t)n;
            end = envp[i] + n + 1;
            bytes += n + 1;
        }
        copy = (char *)(scratch + MAX_MEASURED);
        room = sizeof(scratch) - MAX_MEASURED * sizeof(uint32_t);
        if (lens != scratch && bytes <= (size_t)((char *)lens - (char *)local)) {
            copy = (char *)lens - bytes;
            room = bytes;
        }
        /* Only strings that still lie back to back, as the kernel left them,
         * are moved. */
        if (back_to_back)
            len = lens;
    }
    /* What each restored variable becomes: its old entry (rebuilt inside the
     * marker's own string, which is longer than the entry), or nothing. */
    char *value_of[sizeof(restored) / sizeof(restored[0])];
    int handled[sizeof(restored) / sizeof(restored[0])];
    for (unsigned k = 0; k < sizeof(restored) / sizeof(restored[0]); k++) {
        char *m = marker_of(envp, restored[k]);
        handled[k] = m != 0;
        value_of[k] = 0;
        if (!m)
            continue;
        size_t n = ferry_strlen(restored[k]);
        char *flag = m + WAS_LEN + n + 1;
        if (*flag == '1') {
            /* "FERRY_WAS_NAME=1value" -> "NAME=value" at m + WAS_LEN */
            char *v = flag + 1;
            size_t vlen = ferry_strlen(v);
            for (size_t i = 0; i <= vlen; i++)
                flag[i] = v[i];
            value_of[k] = m + WAS_LEN;
        }
    }
    char **out = envp;
    size_t i = 0;
    for (char **e = envp; *e; e++, i++) {
        char *entry = *e;
        if (ferry_is_setting(entry))
            continue;
        int drop = 0, given_back = 0;
        for (unsigned k = 0; k < sizeof(restored) / sizeof(restored[0]); k++) {
            if (!handled[k] || !ferry_entry_value(entry, restored[k]))
                continue;
            /* The first entry of the name is the one ld.so and getenv read. */
            if (value_of[k]) {
                entry = value_of[k];
                value_of[k] = 0;
                given_back = 1;
            } else {
                drop = 1;
            }
        }
        if (drop)
            continue;
        /* The kept entries' lengths, in the order they are kept, over the
         * table: an entry is kept at or before its own place. */
        if (len)
            len[out - envp] = given_back ? (uint32_t)ferry_strlen(entry) : len[i];
        *out++ = entry;
    }
    *out = 0;
    /* Go's runtime, musl and static programs find the auxiliary vector as
     * the words after the environment's NULL, walking from argv; glibc
     * keeps where it was.  The slots the entries taken out leave before
     * the old NULL become AT_IGNORE pairs, which every reader skips: an
     * odd number of them put the vector out of step by one word, and a Go
     * program with cgo died ("failed to get system page size").  Starters
     * make the count even (FERRY_PAD, settings.h). */
    if (whole && ((envp + norig) - out) % 2 == 0)
        for (char **slot = out + 1; slot < envp + norig; slot += 2) {
            slot[0] = (char *)1;   /* AT_IGNORE */
            slot[1] = 0;
        }
    if (len)
        compact_strings(start, end, envp, len, copy, room);
}
