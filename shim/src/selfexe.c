/* What a program run from its rewritten image sees of itself.
 *
 * A program whose own file has system-call sites (every static program, Go's
 * among them, and a dynamic one with sites of its own) runs from its
 * rewritten image in the cache: the kernel's /proc/self/exe and AT_EXECFN
 * name that image.  Natively they name the program's file and the name its
 * exec was given; Go's os.Executable, Rust's current_exe and C programs that
 * find their data beside themselves ask the first (Go's own toolchain finds
 * its GOROOT so), getauxval the second.  The exec hook says both in
 * FERRY_SELF and FERRY_EXECFN; AT_EXECFN is set once at the start, and a
 * readlink whose answer is the image's name (of /proc/self/exe, of
 * /proc/<pid>/exe, of /proc/thread-self/exe, from any directory) answers
 * the original's instead, resolved as the kernel resolves the file it runs.
 * The image's name and the original's resolved one are found when a
 * readlink first needs them, by calls of the shim's own: an image's start
 * pays two copies and the AT_EXECFN store, any other start one environment
 * lookup (shim.c).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "exepath.h"
#include "raw.h"
#include "selfexe.h"
#include "shim.h"
#include "util.h"

#define SELF_MAX 4096

int ferry_self_on FERRY_HOT;

/* The original file as the exec named it, made absolute at the start (the
 * working directory may change before anybody asks); the name AT_EXECFN
 * points at from then on. */
static char self_path[SELF_MAX], self_execfn[SELF_MAX];
/* Found when a readlink first needs them: what the kernel says the image
 * is, and the original resolved as the kernel would (0: not yet, -1: not
 * known). */
static char image_name[SELF_MAX], original_name[SELF_MAX];
static long image_len FERRY_HOT, original_len FERRY_HOT;
/* The image's device and inode, from the exec hook's FERRY_EXE. */
static uint64_t image_dev, image_ino;

static void set_execfn(char **envp)
{
    char **e = envp;
    while (*e)
        e++;
    for (ElfW(auxv_t) *a = (ElfW(auxv_t) *)(e + 1); a->a_type != AT_NULL; a++)
        if (a->a_type == AT_EXECFN) {
            a->a_un.a_val = (uintptr_t)self_execfn;
            return;
        }
}

void ferry_self_configure(char **envp, const char *self)
{
    if (!self[0] || ferry_absolute_path(self, self_path, sizeof(self_path)) <= 0)
        return;
    const char *execfn = ferry_env_lookup(envp, "FERRY_EXECFN");
    if (!execfn)
        execfn = self;
    size_t n = ferry_strlen(execfn);
    if (n < sizeof(self_execfn)) {
        ferry_memcpy(self_execfn, execfn, n + 1);
        set_execfn(envp);
    }
    const char *hint = ferry_env_lookup(envp, "FERRY_EXE");
    if (!hint || !ferry_parse_pair(hint, &image_dev, &image_ino))
        image_ino = 0;
    ferry_self_on = 1;
    ferry_action[SYS_readlink] = 1;
    ferry_action[SYS_readlinkat] = 1;
}

/* `*len` set once from `find`; two threads that race find the same. */
static long known(long *len, long (*find)(void))
{
    long n = __atomic_load_n(len, __ATOMIC_ACQUIRE);
    if (!n) {
        n = find();
        __atomic_store_n(len, n > 0 ? n : -1, __ATOMIC_RELEASE);
    }
    return n;
}

static long find_image(void)
{
    return ferry_raw3(SYS_readlink, "/proc/self/exe", image_name, sizeof(image_name));
}

/* The original's name as /proc/self/exe would say it: the kernel's own name
 * of the file, symlinks resolved, through a descriptor of it held for three
 * calls.  Its absolute name as the exec gave it when that fails. */
static long find_original(void)
{
    long n = -1, fd = ferry_raw4(SYS_openat, AT_FDCWD, self_path, O_PATH | O_CLOEXEC, 0);
    if (fd >= 0) {
        char link[32];
        struct ferry_buf b = {link, 0, sizeof(link), 0};
        ferry_buf_str(&b, "/proc/self/fd/");
        ferry_buf_i64(&b, fd);
        link[b.len] = 0;
        n = ferry_raw3(SYS_readlink, link, original_name, sizeof(original_name));
        ferry_raw1(SYS_close, fd);
    }
    if (n <= 0 || n >= (long)sizeof(original_name)) {
        n = (long)ferry_strlen(self_path);
        ferry_memcpy(original_name, self_path, (size_t)n);
    }
    return n;
}

void ferry_self_readlink(char *buf, long size, long *ret)
{
    long n = *ret;
    if (n <= 0 || size <= 0)
        return;
    long img = known(&image_len, find_image);
    /* the whole name, or (a buffer it filled) as much of it as fitted; the
     * kernel has just written those bytes, so they are there to read */
    if (img <= 0 || n > img || (n < size && n != img) || !ferry_memeq(buf, image_name, (size_t)n))
        return;
    long orig = known(&original_len, find_original);
    if (orig <= 0)
        return;
    long m = orig < size ? orig : size;
    if (m <= n)
        ferry_memcpy(buf, original_name, (size_t)m);
    else if (ferry_safe_write(buf, original_name, (size_t)m))
        m = -EFAULT;  /* the kernel's answer, had it had that much to write */
    *ret = m;
}

const char *ferry_self_image(const struct stat *st)
{
    if (!ferry_self_on)
        return 0;
    if (!image_ino) {
        /* no hint (`ferry run` started this image): asked once */
        struct stat own;
        if (ferry_raw4(SYS_newfstatat, AT_FDCWD, "/proc/self/exe", &own, 0) != 0)
            return 0;
        image_dev = own.st_dev;
        image_ino = own.st_ino;
    }
    return st->st_ino == image_ino && st->st_dev == image_dev ? self_path : 0;
}
