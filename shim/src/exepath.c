/* The path of the process's executable, as /proc/self/exe gives it.
 *
 * readlink("/proc/self/exe") is a new process's first use of /proc: the
 * kernel makes its pid's entries for it (and drops them at exit), ~12 us of
 * every start.  The exec hook (exec.c) knows when the file it hands the
 * kernel is the ELF executable itself, and says so in FERRY_EXE with that
 * file's device and inode; the kernel keeps the name it was given as
 * AT_EXECFN.  Resolved one component at a time as the kernel's lookup did
 * (each symlink followed where it stands, so `..` after one leaves its
 * target), that name is the executable's path, and its last component must
 * be that very file.  Anything else (no hint, a name that no longer leads
 * there, a path too long, the static shim, which has no libc to ask for
 * AT_EXECFN) asks /proc.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "exepath.h"
#include "raw.h"
#include "util.h"

#define MAX_LINKS 40  /* the kernel's own limit on symlinks in one lookup */

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

/* `name` resolved into `out` (`cap` bytes); its length, or -1. */
static long resolve(const char *name, uint64_t dev, uint64_t ino, char *out, size_t cap)
{
    char todo[1024], link[1024];
    size_t n = ferry_strlen(name), len = 0;
    if (!n || n >= sizeof(todo))
        return -1;
    ferry_memcpy(todo, name, n + 1);
    if (name[0] != '/') {
        /* the kernel's getcwd: the length with its NUL, the path absolute */
        long got = ferry_raw2(SYS_getcwd, out, cap);
        if (got <= 1 || out[0] != '/')
            return -1;
        len = (size_t)got - 1;
        if (len == 1)
            len = 0;  /* "/": components are appended as "/name" */
    }
    struct stat s;
    int links = 0, is_file = 0;
    for (size_t pos = 0;;) {
        while (todo[pos] == '/')
            pos++;
        if (!todo[pos])
            break;
        size_t end = pos;
        while (todo[end] && todo[end] != '/')
            end++;
        size_t clen = end - pos;
        const char *c = todo + pos;
        pos = end;
        is_file = 0;
        if (clen == 1 && c[0] == '.')
            continue;
        if (clen == 2 && c[0] == '.' && c[1] == '.') {
            while (len && out[len - 1] != '/')
                len--;
            if (len)
                len--;
            continue;
        }
        size_t before = len;
        if (len + 1 + clen + 1 > cap)
            return -1;
        out[len++] = '/';
        ferry_memcpy(out + len, c, clen);
        len += clen;
        out[len] = 0;
        if (ferry_raw4(SYS_newfstatat, AT_FDCWD, out, &s, AT_SYMLINK_NOFOLLOW) != 0)
            return -1;
        if (S_ISLNK(s.st_mode)) {
            long m = ferry_raw3(SYS_readlink, out, link, sizeof(link) - 1);
            size_t rest = ferry_strlen(todo + pos);
            if (++links > MAX_LINKS || m <= 0 || (size_t)m + rest + 1 > sizeof(link))
                return -1;
            /* the target takes the link's place in what is left to walk */
            ferry_memcpy(link + m, todo + pos, rest + 1);
            ferry_memcpy(todo, link, (size_t)m + rest + 1);
            pos = 0;
            len = link[0] == '/' ? 0 : before;
            continue;
        }
        is_file = S_ISREG(s.st_mode);
        if (!is_file && !S_ISDIR(s.st_mode))
            return -1;
    }
    if (!is_file || s.st_dev != dev || s.st_ino != ino)
        return -1;
    out[len] = 0;
    return (long)len;
}

long ferry_exe_path(const char *hint, char *out, size_t cap)
{
    uint64_t dev, ino;
    const char *name = execfn();
    if (hint && name && ferry_parse_pair(hint, &dev, &ino)) {
        long n = resolve(name, dev, ino, out, cap);
        if (n > 0)
            return n;
    }
    long n = ferry_raw3(SYS_readlink, "/proc/self/exe", out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    return n;
}
