"""glibc's pthread_cancel unwinds a thread blocked in a system call from a
signal handler; threads blocked in the shim must still be cancelled, with
their cleanup handlers run."""
import subprocess

from conftest import ROOT, ferry


def test_cancelled_threads_blocked_in_syscalls_run_cleanup_and_exit(tmp_path):
    exe = tmp_path / "cancel"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(ROOT / "tests/programs/cancel.c")],
                   check=True)
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    original = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    rewritten = subprocess.run([str(out / "cancel")], capture_output=True, text=True, timeout=60)
    assert original.stdout.count("cancelled, cleanup ran") == 3
    assert (rewritten.stdout, rewritten.stderr, rewritten.returncode) == \
        (original.stdout, original.stderr, original.returncode)
