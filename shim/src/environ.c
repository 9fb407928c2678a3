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

/* The marker for variable `name` in `envp`, or 0. */
static char *marker_of(char **envp, const char *name)
{
    for (char **e = envp; *e; e++)
        if (ferry_memeq(*e, WAS, WAS_LEN) && ferry_entry_value(*e + WAS_LEN, name))
            return *e;
    return 0;
}

/* /proc/PID/environ shows the strings the kernel laid out, not the array:
 * move the ones kept down over the ones taken out (only when they still lie
 * back to back, as the kernel left them), so that it shows none of Ferry's. */
static void compact_strings(char **orig, size_t n, char **kept, char *copy, size_t cap)
{
    if (!n)
        return;
    for (size_t i = 0; i + 1 < n; i++)
        if (orig[i + 1] != orig[i] + ferry_strlen(orig[i]) + 1)
            return;
    char *end = orig[n - 1] + ferry_strlen(orig[n - 1]) + 1;
    /* Through a copy: the entries kept are not in address order (a value
     * given back lives where its marker was). */
    size_t used = 0;
    for (char **k = kept; *k; k++) {
        if (*k < orig[0] || *k >= end)
            return;  /* a string from elsewhere: leave the layout alone */
        size_t len = ferry_strlen(*k) + 1;
        if (used + len > cap)
            return;
        ferry_memcpy(copy + used, *k, len);
        used += len;
    }
    char *cursor = orig[0];
    ferry_memcpy(cursor, copy, used);
    for (char **k = kept; *k; k++) {
        *k = cursor;
        cursor += ferry_strlen(cursor) + 1;
    }
    while (cursor < end)
        *cursor++ = 0;
}

void ferry_environ_restore(char **envp)
{
    if (!envp)
        return;
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
    /* The original order of the strings, for compact_strings, and after
     * it the copy it makes of them: one piece of memory.  On the stack for
     * an environment of a few KiB, at the buffer's top end: the pages
     * nearest the caller's frame, which the start has touched already
     * (its bottom end, or a page of its own, was a page fault in every
     * start).  Larger ones in a scratch area of their own. */
    static char *scratch[4096 + 65536 / sizeof(char *)] FERRY_COLD __attribute__((aligned(4096)));
    char *local[1024];
    size_t norig = 0, bytes = 0;
    for (; envp[norig] && norig < 4096; norig++)
        bytes += ferry_strlen(envp[norig]) + 1;  /* the copy needs no more */
    size_t need = norig + (bytes + sizeof(char *) - 1) / sizeof(char *);
    char **orig = need <= 1024 ? local + 1024 - need : scratch;
    size_t room = (orig == scratch ? sizeof(scratch) : need * sizeof(char *)) - norig * sizeof(char *);
    for (size_t i = 0; i < norig; i++)
        orig[i] = envp[i];
    int whole = envp[norig] == 0;
    char **out = envp;
    for (char **e = envp; *e; e++) {
        char *entry = *e;
        if (ferry_is_setting(entry))
            continue;
        int drop = 0;
        for (unsigned k = 0; k < sizeof(restored) / sizeof(restored[0]); k++) {
            if (!handled[k] || !ferry_entry_value(entry, restored[k]))
                continue;
            /* The first entry of the name is the one ld.so and getenv read. */
            if (value_of[k]) {
                entry = value_of[k];
                value_of[k] = 0;
            } else {
                drop = 1;
            }
        }
        if (!drop)
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
    if (whole)
        compact_strings(orig, norig, envp, (char *)(orig + norig), room);
}
