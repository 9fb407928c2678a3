"""A vfork parent's calls are its own from the moment it runs again.

A vfork child shares its parent's memory, the shim's per-thread state with
it: its calls go to a block of its own while its parent waits.  A signal
pending for the parent is taken the moment the child has exited or exec'd,
before the vfork call has returned to the program (Go's runtime preempts
its threads this way all the time): the handler's calls must count in the
parent, once each, as strace sees them.  Checked for a dynamic program and
the static builds (the shim inside the program)."""
import collections
import json
import shutil
import subprocess

import pytest

import strace_counts
from conftest import FERRY, ROOT, ferry
from ferry import procfile
from ferry.base import syscall_table
from ferry.rundata import load_run
from test_static_programs import TOOLCHAINS, build_static

SOURCE = ROOT / "tests" / "programs" / "vfork_signal.c"
HANDLER_CALLS = 3  # vfork_signal.c
ROUNDS = 20


@pytest.fixture(scope="module", params=["dynamic", *sorted(TOOLCHAINS)])
def program(request, test_programs, tmp_path_factory):
    if request.param == "dynamic":
        return test_programs / "vfork_signal"
    return build_static(SOURCE, request.param, tmp_path_factory)


def _by_process(run_dir):
    """{pid: Counter of its calls by syscall name}, from the threads of the run."""
    out = collections.defaultdict(collections.Counter)
    for t in load_run(run_dir)["threads"]:
        out[t["pid"]].update(t["syscalls"])
    return out


def _run_as_natively(tmp_path, program, how, profile):
    """The run directory of `program how ROUNDS` under `ferry run -p
    profile`, which behaved as natively, and the program's pid."""
    argv = [str(program), how, str(ROUNDS)]
    native = subprocess.run(argv, capture_output=True, timeout=60)
    assert native.stdout == f"{ROUNDS} rounds, {ROUNDS} handled\n".encode()
    run_dir = tmp_path / "run"
    under = ferry("run", "-p", profile, "-o", run_dir, "--", *argv, text=False, timeout=120)
    assert (under.stdout, under.stderr, under.returncode) == \
        (native.stdout, native.stderr, native.returncode)
    return run_dir, json.loads((run_dir / "info.json").read_text())["pid"]


@pytest.mark.parametrize("how", ["exit", "exec"])
@pytest.mark.parametrize("profile", ["trace", "count"])
def test_handler_calls_at_the_parents_resumption_count_in_the_parent(tmp_path, program, how, profile):
    run_dir, root = _run_as_natively(tmp_path, program, how, profile)
    calls = _by_process(run_dir)
    parent = calls.pop(root)
    assert (parent["getppid"], parent["rt_sigreturn"]) == (ROUNDS * HANDLER_CALLS, ROUNDS)
    assert parent["vfork"] + parent["clone"] + parent["clone3"] == ROUNDS
    # each child: its getppid and kill, in its own process
    children = [c for c in calls.values() if c["kill"]]
    assert len(children) == ROUNDS
    assert all((c["getppid"], c["kill"], c["rt_sigreturn"]) == (1, 1, 0) for c in children)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("how", ["exit", "exec"])
def test_vfork_parent_and_children_counted_as_strace(tmp_path, program, how):
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                    str(program), how, str(ROUNDS)], check=True, capture_output=True, timeout=300)
    strace_counts.check(log, run_dir)
    rt = [line for line in log.read_text().splitlines() if " rt_sigreturn(" in line]
    assert len(rt) == ROUNDS


@pytest.mark.parametrize("profile", ["trace", "count"])
def test_a_vfork_childs_record_left_to_its_parent_is_written_when_a_handler_vforks_first(
        tmp_path, program, profile):
    """A vfork child that execs a program the shim serves leaves its record
    to its parent, which writes it once its vfork returns.  A signal taken
    at the parent's resumption runs its handler first; a handler that
    starts a vfork child of its own finds that record still to write, and
    the new child writes it before it clears what the first one counted."""
    run_dir, root = _run_as_natively(tmp_path, program, "respawn", profile)
    records = procfile.read_dir(run_dir / "proc")
    children = [r for r in records if r.ppid == root and r.exec_path == "/bin/true"]
    assert len(children) == 2 * ROUNDS, [(r.pid, r.exec_path) for r in records]
    # the main loop's children each made a kill before their exec; the
    # handler's, none
    kills = sorted(sum(b.calls[syscall_table.NUMBERS["kill"]] for b in r.blocks) for r in children)
    assert kills == [0] * ROUNDS + [1] * ROUNDS
    assert all(r.start_mono_ns <= r.end_mono_ns for r in children)
    images = {r.pid: r for r in records if r.argv == ["true"]}
    assert all(images[r.pid].start_mono_ns >= r.end_mono_ns for r in children)

