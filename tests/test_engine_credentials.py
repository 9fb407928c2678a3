"""A server that starts as root and drops to nobody runs as nobody under
every profile: the engine's own threads (workers that run a fiber's
blocking calls, carriers) take on the credentials the program changed to.

Under -p fibers they kept root: calls sent to a worker (truncate,
open_by_handle_at, flock, msgsnd, ...) ran with root's rights after the
program dropped them (a nobody process read /etc/shadow through
open_by_handle_at), and /proc listed 8 root tasks in it
(tests/programs/drop_root.c)."""
import os
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="drops root's privileges: needs root")


def _outcome(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    # threads print in any order
    return sorted(r.stdout.splitlines()), r.returncode


@pytest.mark.parametrize("profile", [*ALL_PROFILES, "net"])
def test_a_program_that_drops_root_runs_as_nobody_on_the_engines_threads_too(tmp_path, test_programs,
                                                                             profile):
    os.chmod(tmp_path, 0o755)  # nobody may reach the file; only root may write it
    program = [str(test_programs / "drop_root"), str(tmp_path)]
    native = _outcome(program)
    assert native[1] == 0 and len(native[0]) == 5, native
    assert "tasks not nobody's: 0" in native[0][0]
    under = _outcome([*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                      *program])
    assert under == native


@pytest.mark.parametrize("profile", ["trace", "fibers"])
def test_a_thread_that_gives_up_roots_file_access_has_none_through_the_engine(tmp_path, test_programs,
                                                                               profile):
    """setfsuid and setfsgid (a thread's own: glibc broadcasts neither); under fibers the
    truncate ran on a worker that kept root's file access."""
    os.chmod(tmp_path, 0o755)
    program = [str(test_programs / "drop_root"), str(tmp_path), "fsuid"]
    native = _outcome(program)
    assert native == (["fsuid 65534: truncate Permission denied"], 0) or \
        native == (["fsuid 65534: truncate Operation not permitted"], 0), native
    under = _outcome([*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                      *program])
    assert under == native
