/* The exec hook's part for Windows programs run under wine (exec_wine.c). */
#ifndef FERRY_EXEC_WINE_H
#define FERRY_EXEC_WINE_H

#include <stddef.h>

#define PATH_MAX_WINE 1024

/* Remember the run's FERRY_WIN_* settings (ferry-launch.exe, ferry.dll and
 * detours.dll as Windows paths; none: Windows programs are not enabled). */
void ferry_wine_configure(char **envp);

/* Whether the run's setting `entry` ("NAME=value") goes into wine's
 * environment: only what ferry.dll reads. */
int ferry_wine_setting(const char *entry);

/* When the exec of `target` with `argv` (the program's memory) runs wine on
 * an x86-64 Windows program file (`wine app.exe ARGS`, or, when `direct`,
 * app.exe itself, which binfmt_misc hands to wine): the argv that runs it
 * through ferry-launch.exe instead, in `out` (cap entries), and in *run the
 * file to execute.  `prog` (progcap >= 2 * PATH_MAX_WINE bytes) holds the
 * strings they point to.  NULL otherwise.  Without `direct` it makes no
 * system call for a file not named as wine's loader: the exec hook asks
 * about a file itself only once it knows the file is no ELF program. */
char **ferry_wine_argv(const char *target, int direct, char *const *argv, char **out, size_t cap,
                       char *prog, size_t progcap, const char **run);

/* Whether `path` is named as wine's loader ("wine", "wine64", ...): the
 * question ferry_wine_argv asks first without `direct`, asked by the hook
 * before it goes into their frames (5 KiB of stack: two pages, each a fault
 * in a fork child, which runs the hook on the program's stack). */
int ferry_wine_is_loader(const char *path);

#endif
