"""The engine reads some arguments of the calls it runs (a futex word, a poll's
entry) as the kernel would: a pointer into a page the program has taken away
is EFAULT, not a crash, even after earlier calls read that very page.
tests/programs/agg_fault.c runs the same calls natively, in a fiber of a group
made through the API (-p aggregate), and on its main thread with a second
thread alive (-p fibers). Under -p aggregate the calls that take pages away
stay on the entry's fast path, unseen, so the engine must not keep pages it
read there; it did, and the last call died with SIGSEGV."""
import subprocess

import pytest

from conftest import PROGRAMS, ferry


@pytest.mark.parametrize("profile, how", [("aggregate", "fiber"), ("fibers", "thread")])
def test_a_page_taken_away_is_efault_after_earlier_reads_of_it(profile, how, test_programs, tmp_path):
    native = subprocess.run([str(PROGRAMS / "agg_fault"), "native"], capture_output=True, text=True,
                            timeout=60)
    assert native.returncode == 0 and native.stdout.count("after Bad address") == 2, native
    got = ferry("run", "--no-learn", "-p", profile, "-o", tmp_path / "run", "--",
                PROGRAMS / "agg_fault", how, timeout=180)
    assert (got.returncode, got.stdout) == (0, native.stdout), got.stderr[-2000:]
