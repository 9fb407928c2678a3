"""A program that confines its own system calls (a seccomp filter allowing
only read, write and exit) runs to its end as natively: the shim makes no
call of its own once the program has sandboxed itself
(tests/programs/sandboxed.c).  Every profile killed it at exit (SIGSYS):
the process record's end took two `clock_gettime` calls.

Not under -p fibers: a filter is its kernel thread's, and a program's
threads as fibers share carriers, and workers run their calls (docs/aggregate.md)."""
import subprocess

import pytest

from conftest import FERRY


@pytest.mark.parametrize("how", ["seccomp", "prctl"])
@pytest.mark.parametrize("profile", ["off", "count", "trace", "aggregate"])
def test_a_program_that_sandboxes_itself_ends_as_natively(tmp_path, test_programs, profile, how):
    """Through prctl(PR_SET_SECCOMP), the shim did not see the filter (prctl reached
    its C path only under some profiles), and the program died at exit."""
    program = [str(test_programs / "sandboxed"), how]
    native = subprocess.run(program, input=b"a line\n", capture_output=True, timeout=60)
    assert (native.stdout, native.returncode) == (b"sandboxed, read: a line\n", 0), native
    under = subprocess.run([*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                            *program], input=b"a line\n", capture_output=True, timeout=60)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")
