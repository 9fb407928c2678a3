/* The path of the process's executable, as /proc/self/exe gives it
 * (exepath.c): without /proc when the exec hook's FERRY_EXE hint (`hint`,
 * "<dev>:<ino>", or NULL) says AT_EXECFN names it.  Into `out` (`cap`
 * bytes, NUL-terminated); its length, or -errno. */
#ifndef FERRY_EXEPATH_H
#define FERRY_EXEPATH_H

#include <stddef.h>

long ferry_exe_path(const char *hint, char *out, size_t cap);

#endif
