"""Threads naming each other (tests/programs/names_others.c): glibc's
pthread_setname_np and pthread_getname_np of another thread open
/proc/self/task/TID/comm.  Under fibers TID is a vtid, of which the kernel
has no entry: both failed with ENOENT where natively they succeed
(agg_names.c)."""
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY


def _run(argv, tmp_path, profile=None):
    if profile is not None:
        argv = [*FERRY, "run", "--no-learn", "-p", str(profile), "-o", str(tmp_path / "run"), "--", *argv]
    return subprocess.run(argv, capture_output=True, timeout=60)


def _native(test_programs, tmp_path):
    native = _run([str(test_programs / "names_others")], tmp_path)
    assert native.returncode == 0 and b"a worker's name: ok named-1\n" in native.stdout, native
    return native


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_threads_name_each_other_as_natively(tmp_path, test_programs, profile):
    native = _native(test_programs, tmp_path)
    under = _run([str(test_programs / "names_others")], tmp_path, profile)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")


def test_threads_on_two_carriers_name_each_other_as_natively(tmp_path, test_programs, fibers2_profile):
    native = _native(test_programs, tmp_path)
    for _ in range(3):
        under = _run([str(test_programs / "names_others")], tmp_path, fibers2_profile)
        assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")
