/* The name of the process's executable for its record.
 *
 * readlink("/proc/self/exe") is a new process's first use of /proc: the
 * kernel makes its pid's entries for it (and drops them at exit), ~12 us of
 * every start.  The exec hook (exec.c) knows when the file it hands the
 * kernel is the ELF executable itself, and says so in FERRY_EXE with that
 * file's device and inode; the kernel keeps the name it was given as
 * AT_EXECFN.  That name, made absolute with the working directory, is
 * recorded as it is, with the device and inode: the reader resolves its
 * symlinks (ferry/procfile.py) as the kernel's lookup did, once the run
 * ended, and checks that the result is that file.  Resolving it here,
 * one component at a time, was an `lstat` for each component and a
 * `readlink` for each symlink (`/bin/true`: five calls, `cc1`: seven), in
 * every start.  Anything else (no hint, a name too long, the static shim,
 * which has no libc to ask for AT_EXECFN) asks /proc.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <sys/syscall.h>

#include "exepath.h"
#include "raw.h"
#include "util.h"

#ifndef FERRY_STATIC
extern unsigned long getauxval(unsigned long type) __attribute__((weak));
#endif

static const char *execfn(void)
{
#ifndef FERRY_STATIC
    if (getauxval)
        return (const char *)getauxval(AT_EXECFN);
#endif
    return 0;
}

long ferry_absolute_path(const char *name, char *out, size_t cap)
{
    size_t n = ferry_strlen(name), len = 0;
    if (!n)
        return -1;
    if (name[0] != '/') {
        /* the kernel's getcwd: the length with its NUL, the path absolute */
        long got = ferry_raw2(SYS_getcwd, out, cap);
        if (got <= 1 || out[0] != '/')
            return -1;
        len = (size_t)got - 1;
        if (out[len - 1] != '/')
            out[len++] = '/';
    }
    if (len + n + 1 > cap)
        return -1;
    ferry_memcpy(out + len, name, n + 1);
    return (long)(len + n);
}

long ferry_exe_path(const char *hint, char *out, size_t cap, uint64_t *dev, uint64_t *ino)
{
    uint64_t d, i;
    const char *name = execfn();
    *dev = *ino = 0;
    if (hint && name && ferry_parse_pair(hint, &d, &i) && i && d <= UINT32_MAX) {
        long n = ferry_absolute_path(name, out, cap);
        if (n > 0) {
            *dev = d;
            *ino = i;
            return n;
        }
    }
    long n = ferry_raw3(SYS_readlink, "/proc/self/exe", out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    return n;
}
