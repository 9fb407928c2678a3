"""`ferry run` counts every call the program makes once the shim is up, exactly
as `strace -f` sees them.

strace runs around `ferry run`; for each process of the program, the calls
after the shim opened its process file (where a tracer sees it start) must be
the program's calls the shim counted plus the shim's own calls, which the
shim tallies separately.  Calls before that point, made by the dynamic loader
while it maps the program, are the ones the report states as not seen.
"""
import collections
import json
import re
import shutil
import subprocess

import pytest

from conftest import FERRY, PROGRAMS, ROOT
from ferry.rundata import load_run

LINE = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>|(\w+)\()")
pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def _trace(tmp_path, argv):
    log = tmp_path / "strace.log"
    run_dir = tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--", *argv],
                   check=True, capture_output=True, timeout=300)
    return log.read_text().splitlines(), run_dir


def _program_calls_after_shim_start(lines, run_dir, root_pid):
    """strace's counts per syscall over the program's processes, from the
    moment each process's shim opened the file of its record."""
    pids = {root_pid}
    counts = collections.Counter()
    started = set()
    pending = set()     # a marker split by strace: its result is on the resumed line
    marker = re.compile(rf'openat\(AT_FDCWD, "{re.escape(str(run_dir))}/proc/(?:u)?\d+-\d+\.ferry"')
    failed = re.compile(r"= -\d+ E\w+")
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        pid = int(m.group(1))
        if m.group(2):  # "<... x resumed>": counted when it started
            if pid in pending:
                pending.discard(pid)
                if not failed.search(line):
                    started.add(pid)
            continue
        name = m.group(3)
        if pid in pids and name in ("clone", "clone3", "fork", "vfork"):
            child = re.search(r"= (\d+)$", line) or re.search(r"= (\d+) ", line)
            if child:
                pids.add(int(child.group(1)))
        if pid not in pids:
            continue
        if pid not in started:
            if marker.search(line):  # the first file opened
                if line.endswith("<unfinished ...>"):
                    pending.add(pid)
                elif not failed.search(line):
                    started.add(pid)
            continue
        counts[name] += 1
    return counts, started


@pytest.mark.parametrize("workload", ["grep-walk", "python-script", "tar"])
def test_run_counts_equal_strace_counts_once_the_shim_is_up(tmp_path, workload):
    tree = tmp_path / "tree"
    for i in range(30):
        sub = tree / f"d{i % 5}" / f"e{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"file{i}.txt").write_text(f"line {i}\n" * (i + 1) + ("needle\n" if i % 4 == 0 else ""))
    argv = {
        "grep-walk": ["grep", "-r", "-c", "needle", str(tree)],
        "python-script": ["/usr/bin/python3.11", "-S", "-I",
                          str(ROOT / "tests/programs/py_known_calls.py"), str(tmp_path)],
        "tar": ["tar", "--sort=name", "--numeric-owner", "--owner=0", "--group=0",
                "-cf", str(tmp_path / "out.tar"), "-C", str(tree), "."],
    }[workload]
    lines, run_dir = _trace(tmp_path, argv)
    model = load_run(run_dir)
    root = json.loads((run_dir / "info.json").read_text())["pid"]
    seen, started = _program_calls_after_shim_start(lines, run_dir, root)
    assert root in started, "the shim never started in the program"
    counted = collections.Counter({s["name"]: s["calls"] for s in model["syscalls"]})
    shim_own = collections.Counter(model["shim_calls"])
    assert counted["exit_group"] == 1 and sum(counted.values()) > 20
    assert seen == counted + shim_own, {
        name: (seen[name], counted[name], shim_own[name])
        for name in set(seen) | set(counted) | set(shim_own)
        if seen[name] != counted[name] + shim_own[name]}


def test_report_states_what_it_did_not_see(tmp_path):
    _, run_dir = _trace(tmp_path, ["true"])
    model = load_run(run_dir)
    assert "not seen" in model["preinit"]["note"]


def test_threads_that_start_at_once_are_counted_as_strace_sees_them(tmp_path):
    """64 threads that start together each make the shim's own calls (their
    blocks of the record mapped, the catch-all armed), tallied from every
    thread in the same entries of the header: each is counted as strace
    sees it, with the program's."""
    import strace_counts  # here: it imports this module's LINE
    log = tmp_path / "strace.log"
    run_dir = tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                    str(PROGRAMS / "many_threads"), "64", "20"], check=True, capture_output=True, timeout=300)
    counted = strace_counts.check(log, run_dir)
    assert counted["getppid"] == 64 * 20, counted
