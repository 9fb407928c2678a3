"""`ferry detach` takes the shim's vector away while threads may be inside
a trampoline: a call that runs in the trampoline itself (clone, vfork)
reads the vector again after the system call, for the shim's post hook,
and must find it gone without jumping through NULL.  (Seen as a SIGSEGV of
a threaded HTTP server detached under load: a thread created just as the
detach came.)"""
from conftest import PROGRAMS, ferry


def test_a_detach_during_vfork_leaves_the_parent_running(tmp_path):
    program = PROGRAMS / "detach_in_vfork"
    r = ferry("run", "-o", tmp_path / "run", "--", program, text=True)
    assert (r.stdout, r.returncode) == ("parent went on; child exit 7\n", 0), r.stderr
