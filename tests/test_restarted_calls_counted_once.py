"""A call the kernel restarts without running a handler is one call: the
same `syscall` instruction runs again (as restart_syscall after
ERESTART_RESTARTBLOCK, as itself after ERESTARTSYS or ERESTARTNOHAND), on
the shim's fast path, its C path or the trampoline alike, and is not
counted again.  tests/programs/stop_restart: a sleep through SIGSTOP and
SIGCONT, a futex wait and a pause cut short by them; dynamic, and the static
builds (the shim inside the program)."""
import collections
import json
import shutil
import subprocess

import pytest

import strace_counts
from conftest import FERRY, ROOT, ferry
from ferry.rundata import load_run
from test_static_programs import TOOLCHAINS, build_static

SOURCE = ROOT / "tests" / "programs" / "stop_restart.c"
OUTPUT = b"slept, stopped and continued; usr1 1; child 0\n"


@pytest.fixture(scope="module", params=["dynamic", *sorted(TOOLCHAINS)])
def program(request, test_programs, tmp_path_factory):
    if request.param == "dynamic":
        return test_programs / "stop_restart"
    return build_static(SOURCE, request.param, tmp_path_factory)


@pytest.mark.parametrize("profile", ["trace", "count"])
def test_restarted_calls_count_once(tmp_path, program, profile):
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", profile, "-o", run_dir, "--", program, text=False, timeout=120)
    assert (r.stdout, r.stderr, r.returncode) == (OUTPUT, b"", 0)
    root = json.loads((run_dir / "info.json").read_text())["pid"]
    calls = collections.Counter()
    for t in load_run(run_dir)["threads"]:
        if t["pid"] == root:
            calls.update(t["syscalls"])
    assert calls["nanosleep"] + calls["clock_nanosleep"] == 1
    assert calls["pause"] == 1
    assert calls["restart_syscall"] == 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_restarted_calls_counted_as_strace(tmp_path, program):
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    r = subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                        str(program)], capture_output=True, timeout=300)
    assert (r.stdout, r.returncode) == (OUTPUT, 0)
    assert "restart_syscall(" in log.read_text()
    strace_counts.check(log, run_dir)
