/* The shim's own system calls (raw.h): tallied, and put first to the
 * filters of a program that confined its calls (sandbox.h). */
#include "raw.h"
#include "sandbox.h"
#include "util.h"

FERRY_HOT_TEXT long ferry_raw6(long nr, long a, long b, long c, long d, long e, long f)
{
    if (__builtin_expect(ferry_sandbox_on, 0) && !ferry_sandbox_lets(nr, a, b, c, d, e, f))
        return -EPERM;
    ferry_tally_one(nr);
    return ferry_pass6(nr, a, b, c, d, e, f);
}
