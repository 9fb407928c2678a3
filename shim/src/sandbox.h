/* The program's seccomp filters, as the shim must know them.
 *
 * A program that confines its own calls (seccomp's filter or strict mode)
 * confines the shim's with them: a call of the shim's that the filter
 * kills killed the program (a thread started after the filter: the shim's
 * read of clone3's arguments, the new thread's catch-all, its record's
 * block).  The shim keeps a copy of each filter the program installs
 * through it and puts each of its own calls to them first (raw.c); a call
 * they would not let through is not made, and the shim does without it. */
#ifndef FERRY_SANDBOX_H
#define FERRY_SANDBOX_H
#include "shim.h"

/* Set once a filter (or strict mode) is in force: read by every own call. */
extern int ferry_sandbox_on;

/* Set when a filter was in force before the shim started (a container's
 * runtime, systemd, a sandboxed `ferry run`): its verdicts are unknown,
 * but the kernel applies it to every thread, the engine's included, and
 * not to io_uring's operations, so the engine runs none of the program's
 * calls as one (agg_route.c).  Asked once, by the engine's configuration. */
extern int ferry_sandbox_inherited;
void ferry_sandbox_look_inherited(void);

/* Whether the filters in force let call `nr` with these arguments through
 * untouched (an action of ALLOW or LOG from every one of them). */
int ferry_sandbox_lets(long nr, long a, long b, long c, long d, long e, long f);

/* Around a call of the program's that may install a filter (seccomp,
 * prctl(PR_SET_SECCOMP)): the filter is copied before the call, while the
 * shim may still read it and map room for it (NULL: the call installs
 * none), and kept if the call succeeded. */
void *ferry_sandbox_before(const struct ferry_regs *r);
void ferry_sandbox_after(void *copy, long nr, unsigned long flags, long result);

#endif
