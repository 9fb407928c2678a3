"""What `ferry report` says of a Windows run: the root's parent is the
process the run started it from (not Ferry's launcher), a process ended by
TerminateProcess is killed (not running) with the code it was given, and
threads beyond ferry.dll's blocks are counted against ferry.dll's table, ferry.dll's own
calls are not the program's, and a Windows pid that is also a Linux pid of
the run names two processes."""
import json
import os
import subprocess

import pytest

from conftest import FERRY, ferry
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)


def _run(wine, run_dir, *argv, profile="count"):
    r = ferry("run", "-p", profile, "-o", run_dir, "--", *argv, env=wine.env, timeout=180, text=False)
    rep = ferry("report", "--json", run_dir, env=wine.env, timeout=120, text=False)
    assert rep.returncode == 0, rep.stderr
    return r, json.loads(rep.stdout)


def test_root_parent_is_ferry_run_and_tree_is_whole(wine, win_programs, ferry_dll_built, tmp_path):
    """As for a Linux program, the root's parent is `ferry run` itself, not
    ferry-launch.exe (Ferry's machinery, in no report)."""
    run_dir = tmp_path / "run"
    run = subprocess.Popen(FERRY + ["run", "-p", "count", "-o", str(run_dir), "--",
                                    str(win_programs["spawn_tree"]), "2", "1", str(tmp_path / "out")],
                           env=wine.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.communicate(timeout=180)
    assert run.returncode == 2
    rep = ferry("report", "--json", run_dir, env=wine.env, timeout=120, text=False)
    procs = json.loads(rep.stdout)["processes"]
    pids = {p["pid"] for p in procs}
    roots = [p for p in procs if p["ppid"] not in pids]
    assert len(roots) == 1 and roots[0]["argv"][1] == "2", procs
    assert roots[0]["ppid"] == run.pid, (roots[0], run.pid)


def test_root_parent_from_a_script_is_the_shell_that_ran_wine(wine, win_programs, ferry_dll_built,
                                                             tmp_path):
    exe = win_programs["write_count"]
    r, model = _run(wine, tmp_path / "run", "sh", "-c", f"wine {exe} {tmp_path / 'x.bin'} 3")
    assert r.returncode == 3, r.stderr
    procs = model["processes"]
    win = [p for p in procs if p.get("windows")]
    wine_row = [p for p in procs if p["exe"] == "/usr/bin/wine"]
    assert len(win) == 1 and len(wine_row) == 1, procs
    assert win[0]["ppid"] == wine_row[0]["pid"]


def test_terminated_child_is_killed_with_its_code(wine, win_programs, ferry_dll_built, tmp_path):
    plain = wine.reference(win_programs["kill_child"])
    r, model = _run(wine, tmp_path / "run", win_programs["kill_child"])
    assert (r.stdout, r.returncode) == (plain.stdout, plain.returncode)
    assert b"child ended with 7" in r.stdout
    procs = model["processes"]
    assert len(procs) == 2, procs
    parent = next(p for p in procs if p["argv"][1:] == [])
    child = next(p for p in procs if p["argv"][1:2] == ["wait"])
    assert child["ppid"] == parent["pid"]
    assert child["state"] == "killed" and child["exit"] == {"code": 7, "signal": None}, child
    assert str(parent["pid"]) in child["reason"] and "TerminateProcess" in child["reason"]
    assert parent["state"] == "exited" and parent["exit"]["code"] == 0


@pytest.mark.parametrize("at_once", [1, 8])
def test_every_thread_of_a_long_life_is_counted(wine, win_programs, ferry_dll_built, tmp_path, at_once):
    """A thread-per-connection server makes threads all its life, far more
    than ferry.dll has blocks: 200 threads (one after the other, or 8 alive at
    a time), 3 NtYieldExecution each, are all counted; an ended thread's block
    (its counts kept) is taken by a later thread."""
    r, model = _run(wine, tmp_path / "run", win_programs["many_threads"], 200, at_once, 3)
    assert r.returncode == 0 and b"200 threads ran" in r.stdout, r.stdout
    (proc,) = model["processes"]
    assert proc["reason"] is None, proc["reason"]
    assert proc["threads"] < 200, proc
    yields = sum(s["calls"] for s in model["syscalls"] if s["name"] == "NtYieldExecution")
    assert yields == 200 * 3


def test_threads_alive_beyond_ferry_dll_blocks_are_said_against_its_table(wine, win_programs,
                                                                          ferry_dll_built, tmp_path):
    """Only threads alive at once need blocks of their own: 1100 of them
    (and the main thread) are more than the file's 1024 blocks."""
    r, model = _run(wine, tmp_path / "run", win_programs["many_threads"], 1100, 1100)
    assert r.returncode == 0 and b"1100 threads ran" in r.stdout, r.stdout
    (proc,) = model["processes"]
    assert proc["threads"] == 1024, proc
    assert "ferry.dll's 1024-block table" in proc["reason"], proc["reason"]


def _parent_calls(model):
    """{Nt name: calls} of kill_child's parent, summed over its threads."""
    (parent,) = [p for p in model["processes"] if p["argv"][1:2] != ["wait"]]
    out = {}
    for t in model["threads"]:
        if t["pid"] == parent["pid"]:
            for name, n in t["syscalls"].items():
                out[name] = out.get(name, 0) + n
    return out


def test_calls_ferry_dll_makes_in_its_hooks_are_not_the_programs(wine, win_programs,
                                                                  ferry_dll_built, tmp_path):
    """ferry.dll writes Detours' import into a child (NtWriteVirtualMemory and
    friends) and asks a killed process's id (NtQueryInformationProcess) from
    inside the program's own calls; those are ferry.dll's, not the program's.
    kill_child never touches another process's memory, and a TerminateProcess
    more is one NtTerminateProcess more, nothing else."""
    calls = {}
    for times in (1, 6):
        r, model = _run(wine, tmp_path / f"run{times}", win_programs["kill_child"], times)
        assert r.returncode == 0 and b"child ended with 7" in r.stdout, r.stderr
        calls[times] = _parent_calls(model)
    for name in ("NtWriteVirtualMemory", "NtReadVirtualMemory"):
        assert name not in calls[1], calls[1]
    assert calls[6]["NtTerminateProcess"] - calls[1]["NtTerminateProcess"] == 5
    assert calls[6].get("NtQueryInformationProcess") == calls[1].get("NtQueryInformationProcess")


def test_windows_and_linux_pids_that_coincide_are_two_processes(win_programs, ferry_dll_built,
                                                                tmp_path):
    """wine numbers Windows processes on its own; in a mixed run (a script
    running wine) a Windows pid can be a Linux pid of the same run.  Here, in
    a pid namespace with a wineserver of its own, 400 Linux processes take
    every pid wine hands out next; the Windows server killed with SIGKILL
    (ferry.dll never hears of its end) must not take the exit status of the
    Linux process that had its number."""
    import shutil
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare (util-linux) and root for a pid namespace")
    prefix, run_dir = tmp_path / "prefix", tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    script = (f"for i in $(seq 400); do /bin/true; done; "
              f"wine {win_programs['echo_server']} 100000000 >/dev/null 2>&1 & sleep 4; kill -9 $!; wait")
    inner = (f"wineboot -u >/dev/null 2>&1; {' '.join(FERRY)} run -p count -o {run_dir} -- "
             f"sh -c '{script}'; wineserver -k >/dev/null 2>&1")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", inner], env=env,
                       capture_output=True, timeout=300)
    assert run_dir.is_dir(), r.stderr
    rep = ferry("report", "--json", run_dir, env=env, timeout=120)
    procs = json.loads(rep.stdout)["processes"]
    (win,) = [p for p in procs if p.get("windows")]
    linux = {p["pid"]: p for p in procs if not p.get("windows")}
    assert win["pid"] in linux, "no Linux process of the run had the Windows pid: nothing checked"
    assert linux[win["pid"]]["exit"] == {"code": 0, "signal": None}    # a /bin/true
    assert win["state"] == "unfinished" and win["exit"] is None, win
