/* The exec hook: what a process runs next should carry the shim too. */
#ifndef FERRY_EXEC_H
#define FERRY_EXEC_H

#include "shim.h"

/* Remember the run's settings (FERRY_* variables, the image cache). */
void ferry_exec_configure(char **envp);

/* Perform the execve/execveat in `r`: the cached rewritten image of the
 * target when there is one (for a #! script, of its interpreter), always with
 * the run's FERRY_* variables back in the environment.  Returns only if the
 * exec failed, with the result of the program's own call. */
long ferry_exec(const struct ferry_regs *r);
/* fn(r) on the stack whose top is `top` (entry.S): a vfork child's hook
 * runs on ferry_vfork_stack(). */
long ferry_call_on_stack(long (*fn)(const struct ferry_regs *), const struct ferry_regs *r, void *top);

/* One more "FERRY_NAME=value" setting for every program this one execs
 * (after ferry_exec_configure). */
void ferry_exec_keep(const char *entry);
/* The value of setting `name` among those kept for children, or 0. */
const char *ferry_exec_kept(const char *name);
/* `value` of setting `name` where it stays for the process's life without a
 * page of its own: the kept entry when it holds `value`, else a copy in
 * `own` (cap bytes, a FERRY_COLD buffer no start touches otherwise); 0 when
 * it is longer than that. */
const char *ferry_exec_lasting(const char *name, const char *value, char *own, size_t cap);

/* A NUL-terminated string of the program's memory into dst (its length, or
 * -1), and entry i of a pointer array there (1, 0 at its end, -1). */
long ferry_exec_string(char *dst, const char *src, size_t cap);
int ferry_exec_pointer(char *const *array, size_t i, char **p);

/* The image cache's directory, as this process found it ("" if none). */
const char *ferry_cache_root(void);

#endif
