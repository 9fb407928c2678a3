/* The environment variables through which Ferry configures the shim: set by
 * `ferry run` (injector/environment.py keeps the same list) and by the exec
 * hook for children, taken out of the program's view by environ.c.  A
 * program's own variables, whatever their names, are never touched. */
#ifndef FERRY_SETTINGS_H
#define FERRY_SETTINGS_H

#include "util.h"

#define FERRY_SETTINGS                                                                        \
    "FERRY_MODE", "FERRY_RUN_DIR", "FERRY_TRACE_SYSCALLS", "FERRY_EVENTS",                    \
        "FERRY_CATCH_ALL", "FERRY_AGG", "FERRY_SHIM", "FERRY_CACHE", "FERRY_AVOID", \
        "FERRY_TSC", "FERRY_WIN_LAUNCH", "FERRY_WIN_DLL", "FERRY_WIN_DETOURS", "FERRY_WIN_RUN_DIR", \
        "FERRY_EXE", "FERRY_SLOT", "FERRY_PAD", "FERRY_SELF", "FERRY_EXECFN"

/* The longest setting's name (FERRY_TRACE_SYSCALLS, 20 characters); a longer one
 * fails the build. */
#define FERRY_SETTING_NAME_MAX 23
_Static_assert(sizeof((const char[][FERRY_SETTING_NAME_MAX]){FERRY_SETTINGS}) > 0, "every setting's name fits");

/* Markers that give a variable Ferry changed its old value back. */
#define FERRY_WAS_PREFIX "FERRY_WAS_"

/* Whether `entry` ("NAME=value") is one of Ferry's settings or markers. */
static inline int ferry_is_setting(const char *entry)
{
    /* names, not pointers to them: an array of pointers is relocated at
     * load, a copy in each file that includes this (a page of .data that
     * every start writes, and the room on it the exec hook's kept settings
     * need to share it: exec.c) */
    static const char names[][FERRY_SETTING_NAME_MAX + 1] = {FERRY_SETTINGS};
    if (!ferry_memeq(entry, "FERRY_", 6))
        return 0;
    if (ferry_memeq(entry, FERRY_WAS_PREFIX, 10))
        return 1;
    /* past "FERRY_", which every name shares: this runs for every FERRY_
     * entry at every start */
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (ferry_entry_value(entry + 6, names[i] + 6))
            return 1;
    return 0;
}

/* The pad a starter adds when the entries the shim will take out (its
 * settings and markers, and each variable a "0" marker drops) are an odd
 * count (see environ.c): FERRY_PAD= makes it even. */
#define FERRY_PAD_ENTRY "FERRY_PAD="

#endif
