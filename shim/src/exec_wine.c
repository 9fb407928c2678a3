/* A Windows program started by a Linux one (`wine app.exe` in a script):
 * the exec hook starts it as `ferry run app.exe` does (injector/pe_launch.py),
 * through ferry-launch.exe, which gives it ferry.dll with Detours:
 *
 *     wine app.exe ARGS  ->  wine ferry-launch.exe DETOURS.DLL FERRY.DLL PID Z:\...\app.exe ARGS
 *
 * PID, this process's, is the program's parent in the report (wine runs
 * ferry-launch.exe in this very process).  A PE program executed directly,
 * which binfmt_misc would hand to wine (`wine FILE ARGS`), is started the
 * same way.
 * `ferry run` names the three files and the run directory as Windows sees
 * them (FERRY_WIN_* settings).  wine itself is wine's machinery, not the
 * program: it gets no libferry.so, only the settings ferry.dll reads, which
 * ferry.dll takes out of the program's view.  Like the rest of the exec hook,
 * nothing here allocates or writes outside the caller's frame (vfork).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "exec.h"
#include "exec_wine.h"
#include "raw.h"
#include "util.h"

#define WIN_PATH_MAX 1100

/* The settings' values, in the copies the exec hook keeps of the run's
 * settings for children (every run has them, for `wine app.exe` in a
 * script): copying them here wrote a page of the start in every process.
 * The buffers only hold a value the hook's copies had no room for. */
static const char *launch FERRY_HOT, *dll FERRY_HOT, *detours FERRY_HOT;
static char room[3][WIN_PATH_MAX] FERRY_COLD;

FERRY_HOT_TEXT static void keep(char **envp, const char *name, const char **dst, char *spare)
{
    const char *v = ferry_exec_kept(name);
    if (!v && (v = ferry_env_lookup(envp, name))) {
        size_t n = ferry_strlen(v);
        if (n >= WIN_PATH_MAX)
            return;
        v = ferry_memcpy(spare, v, n + 1);
    }
    *dst = v && *v ? v : 0;
}

FERRY_HOT_TEXT void ferry_wine_configure(char **envp)
{
    keep(envp, "FERRY_WIN_LAUNCH", &launch, room[0]);
    keep(envp, "FERRY_WIN_DLL", &dll, room[1]);
    keep(envp, "FERRY_WIN_DETOURS", &detours, room[2]);
}

int ferry_wine_setting(const char *entry)
{
    return ferry_memeq(entry, "FERRY_MODE=", 11) || ferry_memeq(entry, "FERRY_WIN_RUN_DIR=", 18) ||
           ferry_memeq(entry, "FERRY_WIN_DETOURS=", 18);
}

/* wine's loader, as Debian and wine's own builds name it (the script in
 * /usr/bin and the ELF loader it execs); never wineserver, wineboot, ... */
static int is_wine(const char *path)
{
    static const char *const names[] = {"wine", "wine64", "wine-stable", "wine64-stable",
                                        "wine-development", "wine64-development"};
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/')
            base = p + 1;
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = ferry_strlen(names[i]);
        if (ferry_memeq(base, names[i], n + 1))
            return 1;
    }
    return 0;
}

int ferry_wine_is_loader(const char *path)
{
    return is_wine(path);
}

/* Whether the file at `path` is an x86-64 Windows program (not a DLL):
 * the only kind ferry.dll serves. */
static int pe_program(const char *path)
{
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    unsigned char h[64], pe[24];
    int ok = ferry_raw4(SYS_pread64, fd, h, sizeof(h), 0) == sizeof(h) && h[0] == 'M' && h[1] == 'Z';
    if (ok) {
        uint32_t lfanew = *(uint32_t *)(h + 0x3c);
        ok = ferry_raw4(SYS_pread64, fd, pe, sizeof(pe), lfanew) == sizeof(pe) &&
             ferry_memeq(pe, "PE\0\0", 4) && *(uint16_t *)(pe + 4) == 0x8664 &&
             !(*(uint16_t *)(pe + 22) & 0x2000 /* IMAGE_FILE_DLL */);
    }
    ferry_raw1(SYS_close, fd);
    return ok;
}

/* "Z:\abs\path" (wine's drive Z: is the Linux root) of `path`, relative to
 * the current directory, into `out`; 0 if it does not fit. */
static int win_path(const char *path, char *out, size_t cap)
{
    char cwd[PATH_MAX_WINE];
    struct ferry_buf b = {out, 0, cap, 0};
    ferry_buf_str(&b, "Z:");
    if (path[0] != '/') {
        if (ferry_raw2(SYS_getcwd, cwd, sizeof(cwd)) <= 0)
            return 0;
        ferry_buf_str(&b, cwd);
        ferry_buf_str(&b, "/");
    }
    ferry_buf_str(&b, path);
    if (b.overflow || b.len >= cap)
        return 0;
    out[b.len] = 0;
    for (char *p = out; *p; p++)
        if (*p == '/')
            *p = '\\';
    return 1;
}

/* A small file (/proc) into buf, NUL-terminated; its length or -1. */
static long read_small(const char *path, char *buf, size_t cap)
{
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    long n = ferry_raw3(SYS_read, fd, buf, cap - 1);
    ferry_raw1(SYS_close, fd);
    buf[n > 0 ? n : 0] = 0;
    return n;
}

/* The value of line `key` ("key value\n") in `text`, or NULL. */
static const char *line_value(const char *text, const char *key)
{
    size_t k = ferry_strlen(key);
    for (const char *p = text; *p;) {
        if (ferry_memeq(p, key, k))
            return p + k;
        while (*p && *p != '\n')
            p++;
        if (*p)
            p++;
    }
    return 0;
}

/* Whether binfmt_misc entry `text` hands a file starting with "MZ" to wine's
 * loader, with the arguments as a plain `wine FILE ARGS` (no P, O or C
 * flag, no mask); the interpreter into `out`. */
static int wine_entry(const char *text, char *out, size_t cap)
{
    const char *interp = line_value(text, "interpreter "), *flags = line_value(text, "flags: ");
    const char *offset = line_value(text, "offset "), *magic = line_value(text, "magic ");
    if (!ferry_memeq(text, "enabled\n", 8) || !interp || !offset || !magic ||
        line_value(text, "mask ") || offset[0] != '0' || offset[1] != '\n' ||
        !ferry_memeq(magic, "4d5a", 4))
        return 0;
    for (const char *f = flags; f && *f && *f != '\n'; f++)
        if (*f == 'P' || *f == 'O' || *f == 'C')
            return 0;
    size_t n = 0;
    while (interp[n] && interp[n] != '\n')
        n++;
    if (n >= cap)
        return 0;
    ferry_memcpy(out, interp, n);
    out[n] = 0;
    return is_wine(out);
}

struct dirent64_ {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* The interpreter binfmt_misc runs a PE file with, when it is wine's loader
 * (the kernel would run `wine FILE ARGS`); 0 otherwise. */
static int binfmt_wine(char *out, size_t cap)
{
    static const char dir[] = "/proc/sys/fs/binfmt_misc/";
    char text[512], path[300], dents[2048];
    if (read_small("/proc/sys/fs/binfmt_misc/status", text, sizeof(text)) < 7 ||
        !ferry_memeq(text, "enabled", 7))
        return 0;
    long fd = ferry_raw4(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int found = 0;
    long n;
    while (!found && (n = ferry_raw3(SYS_getdents64, fd, dents, sizeof(dents))) > 0) {
        for (long off = 0; off < n && !found; off += ((struct dirent64_ *)(dents + off))->reclen) {
            const char *name = ((struct dirent64_ *)(dents + off))->name;
            if (name[0] == '.' || ferry_memeq(name, "register", 9) || ferry_memeq(name, "status", 7))
                continue;
            struct ferry_buf b = {path, 0, sizeof(path), 0};
            ferry_buf_str(&b, dir);
            ferry_buf_str(&b, name);
            if (b.overflow || b.len >= sizeof(path))
                continue;
            path[b.len] = 0;
            found = read_small(path, text, sizeof(text)) > 0 && wine_entry(text, out, cap);
        }
    }
    ferry_raw1(SYS_close, fd);
    return found;
}

char **ferry_wine_argv(const char *target, int direct, char *const *argv, char **out, size_t cap,
                       char *prog, size_t progcap, const char **run)
{
    if (!launch || !dll || !detours || cap < 7 || progcap < 2 * PATH_MAX_WINE)
        return 0;
    char given[PATH_MAX_WINE], *argv0, *arg1;
    char *interp = prog + PATH_MAX_WINE;    /* the second half: what runs */
    size_t rest;                            /* argv's index of the program's first argument */
    struct stat st;
    if (is_wine(target) == direct)
        return 0;  /* the other question's */
    if (!direct) {
        /* `wine app.exe ARGS` */
        if (ferry_exec_pointer(argv, 0, &argv0) != 1 || ferry_exec_pointer(argv, 1, &arg1) != 1)
            return 0;
        if (ferry_exec_string(given, arg1, sizeof(given)) <= 0 || given[0] == '-')
            return 0;       /* wine's own options (--version, ...): no program */
        *run = target;
        rest = 2;
    } else {
        /* app.exe run directly, which binfmt_misc would hand to wine */
        size_t n = ferry_strlen(target);
        if (n >= sizeof(given) || ferry_raw4(SYS_faccessat, AT_FDCWD, target, X_OK, 0) != 0 ||
            !pe_program(target) || !binfmt_wine(interp, 256))
            return 0;
        ferry_memcpy(given, target, n + 1);
        *run = argv0 = interp;
        rest = 1;
    }
    if (ferry_raw4(SYS_newfstatat, AT_FDCWD, given, &st, 0) != 0 || !S_ISREG(st.st_mode) ||
        !pe_program(given) || !win_path(given, prog, PATH_MAX_WINE - 24))
        return 0;
    char *pid = prog + ferry_strlen(prog) + 1;
    struct ferry_buf b = {pid, 0, 23, 0};
    ferry_buf_i64(&b, ferry_raw0(SYS_getpid));
    pid[b.len] = 0;
    size_t n = 0;
    out[n++] = argv0;
    out[n++] = (char *)launch;
    out[n++] = (char *)detours;
    out[n++] = (char *)dll;
    out[n++] = pid;
    out[n++] = prog;
    char *p;
    for (size_t i = rest;; i++) {
        int got = ferry_exec_pointer(argv, i, &p);
        if (got < 0 || n + 1 >= cap)
            return 0;
        if (!got)
            break;
        out[n++] = p;
    }
    out[n] = 0;
    return out;
}
