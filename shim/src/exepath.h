/* The name of the process's executable for its record (exepath.c). */
#ifndef FERRY_EXEPATH_H
#define FERRY_EXEPATH_H

#include <stddef.h>
#include <stdint.h>

/* `name` made absolute with the working directory into `out` (`cap`
 * bytes, NUL-terminated); its length, or -1. */
long ferry_absolute_path(const char *name, char *out, size_t cap);

/* When the exec hook's FERRY_EXE hint (`hint`, "<dev>:<ino>", or NULL) says
 * AT_EXECFN names the executable, that name made absolute, with *dev and
 * *ino set (the reader resolves it); otherwise what /proc/self/exe says,
 * *ino 0.  Into `out` (`cap` bytes, NUL-terminated); its length, or
 * -errno. */
long ferry_exe_path(const char *hint, char *out, size_t cap, uint64_t *dev, uint64_t *ino);

#endif
