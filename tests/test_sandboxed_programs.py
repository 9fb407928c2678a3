"""Programs that confine their own system calls run as natively under every
profile: the shim puts each call of its own to the program's filters
(shim/src/sandbox.c) and does without the ones they would not let through,
and under fibers a call the filter refuses is made where the kernel applies
it.

tests/programs/sandboxed.c allows itself only read, write and exit (a
filter, or seccomp's strict mode), or forbids itself the TSC: every profile
killed it at exit (the record's end took two `clock_gettime`), and strict
mode or a forbidden TSC under every profile that times calls (SIGSEGV at
the shim's first `rdtsc`).  tests/programs/sandboxed_threads.c starts
threads after its filter: every profile, off included, killed it at the
first (the shim's read of clone3's arguments, the new thread's catch-all
and record), and under fibers the engine's ring and workers, which no filter
binds, opened a file the program had forbidden itself to open.  A filter that
refuses only getpid left the shim no pid to write the program's memory by: a
query of SIGSYS's action into the heap failed with EFAULT under every profile
but off."""
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY


def run(program, tmp_path, profile=None, stdin=b""):
    argv = program if profile is None else [
        *FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--", *program]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60)


@pytest.mark.parametrize("how", ["seccomp", "prctl", "strict", "notsc", "jit", "nogetpid"])
@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_program_that_sandboxes_itself_ends_as_natively(tmp_path, test_programs, profile, how):
    """Through prctl(PR_SET_SECCOMP), the shim did not see the filter (prctl reached
    its C path only under some profiles), and the program died at exit."""
    program = [str(test_programs / "sandboxed"), how]
    native = run(program, tmp_path, stdin=b"a line\n")
    assert (native.stdout, native.returncode) == (b"sandboxed, read: a line\n", 0), native
    under = run(program, tmp_path, profile, stdin=b"a line\n")
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")


@pytest.mark.parametrize("filter_kind", ["allow", "deny", "arith", "errno", "idle", "late"])
@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_sandboxed_program_starts_threads_as_natively(tmp_path, test_programs, profile, filter_kind):
    program = [str(test_programs / "sandboxed_threads"), filter_kind]
    native = run(program, tmp_path)
    assert native.returncode == 0, native
    assert native.stdout in (b"thread 0\nthread 1\nthread 2\n",
                             b"thread 0\nthread 1\nthread 2\nchild\nchild status 0\n",
                             b"opened 0 of 250\n", b"idle while waiting: yes\n"), native
    under = run(program, tmp_path, profile)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")


def test_threads_a_filtered_thread_starts_stay_filtered_on_two_carriers(tmp_path, test_programs,
                                                                          fibers2_profile):
    """A filter a thread installs once there are others binds that thread and the
    threads it starts, not its carrier's neighbours on other carriers: under fibers
    with two carriers its new threads went to the other one, whose kernel thread had
    no filter, and opened the file the filter answers EPERM (50-150 times of 250)."""
    program = [str(test_programs / "sandboxed_threads"), "late"]
    assert run(program, tmp_path).stdout == b"opened 0 of 250\n"
    for _ in range(3):
        under = run(program, tmp_path, str(fibers2_profile))
        assert (under.stdout, under.returncode) == (b"opened 0 of 250\n", 0), under.stderr.decode(errors="replace")


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_filter_older_than_the_run_binds_every_call_of_the_program(tmp_path, test_programs, profile):
    """`ferry run` started under a filter (a container's, systemd's): the shim never
    saw it installed, and under fibers a thread's connect, which it answers EACCES,
    went to io_uring, whose operations no filter binds, and connected (20 of 20)."""
    program = [str(test_programs / "under_filter")]
    native = run([*program, str(test_programs / "connects")], tmp_path)
    assert (native.stdout, native.returncode) == (b"0 connected, 20 refused\n" * 2, 0), native
    under = run([*program, *FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                 str(test_programs / "connects")], tmp_path)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")


def test_a_program_a_sandboxed_process_runs_is_left_without_the_shim_and_the_report_says_why(
        tmp_path, test_programs):
    """The filter stays in force across the exec, and the new program's shim
    would start not knowing it: the child of the deny-list runs as it is."""
    from ferry import rundata
    under = run([str(test_programs / "sandboxed_threads"), "deny"], tmp_path, "trace")
    assert under.returncode == 0 and under.stdout.endswith(b"child\nchild status 0\n"), under
    echo = [p for p in rundata.load_run(tmp_path / "run")["processes"] if p["exe"] == "/bin/echo"]
    assert len(echo) == 1 and not echo[0]["enabled"], echo
    assert "confined its system calls" in echo[0]["reason"], echo
