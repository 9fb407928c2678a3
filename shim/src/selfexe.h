/* What a program run from its rewritten image sees of itself (selfexe.c):
 * the kernel knows the image in the cache, the program must see its own
 * file, as it would natively. */
#ifndef FERRY_SELFEXE_H
#define FERRY_SELFEXE_H

/* Whether readlink and readlinkat answers are looked at (this process runs
 * an image that stands for another file). */
extern int ferry_self_on;

/* From the exec hook's FERRY_SELF (`self`: the file the image stands for,
 * as the exec named it) and FERRY_EXECFN (the name the exec was given, when
 * it is not that file: a script's): AT_EXECFN in the auxiliary vector after
 * `envp` (the initial stack's) names what it would natively, and readlink
 * answers are looked at from here on.  Before the environment's restore
 * takes the settings out. */
void ferry_self_configure(char **envp, const char *self);

/* After a readlink or readlinkat that wrote *ret bytes into `buf` (`size`
 * bytes): the image's name, whole or as much as fitted, becomes the
 * original's, and *ret its length as it fits (or -EFAULT where the kernel
 * would have said so). */
void ferry_self_readlink(char *buf, long size, long *ret);

/* The original's name (absolute) when `st` is the status of this process's
 * own image (an exec of /proc/self/exe, or of the image by any name), so
 * that the program that image starts is told the same; else NULL. */
struct stat;
const char *ferry_self_image(const struct stat *st);

#endif
