"""`ferry run` on a Windows program: it runs under wine with ferry.dll, its
output and exit code are those of the program under plain wine, and `ferry
report --json` counts exactly the Nt* calls it makes."""
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import FERRY, ferry

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ferry_dll_built():
    build = ROOT / "shim" / "build"
    if not (build / "ferry.dll").is_file() or not (build / "ferry-launch.exe").is_file():
        pytest.skip("ferry.dll is not built (mingw-w64 missing when `make shim` ran)")


def _same_as_plain(wine, exe, profile, run_dir, plain_args, ferry_args):
    """`exe` under plain wine with plain_args and under `ferry run -p profile`
    with ferry_args: the same stdout, stderr and exit code.  The ferry run's
    CompletedProcess.  The plain run is taken again if wine did not start
    the program (Wine.reference)."""
    plain = wine.reference(exe, *plain_args)
    r = ferry("run", "-p", profile, "-o", run_dir, "--", exe, *ferry_args, env=wine.env, text=False,
              timeout=180)
    assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
    return r


def _calls(run_dir, env, name):
    r = ferry("report", "--json", run_dir, env=env, text=False, timeout=180)
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)
    return model, sum(s["calls"] for s in model["syscalls"] if s["name"] == name)


@pytest.mark.parametrize("profile", ["count", "trace"])
def test_write_file_counts_exactly_and_output_is_wines(wine, win_programs, ferry_dll_built, tmp_path,
                                                       profile):
    exe = win_programs["write_count"]
    counts = {}
    for n in (0, 37):
        run_dir = tmp_path / f"run{n}"
        _same_as_plain(wine, exe, profile, run_dir, (tmp_path / f"plain{n}.bin", n),
                       (tmp_path / f"ferry{n}.bin", n))
        assert (tmp_path / f"ferry{n}.bin").read_bytes() == b"x" * n
        model, counts[n] = _calls(run_dir, wine.env, "NtWriteFile")
        if profile == "trace":   # every NtWriteFile timed, once
            write = next(s for s in model["syscalls"] if s["name"] == "NtWriteFile")
            assert sum(write["hist"]) == write["calls"] and write["time_ns"] > 0, write
            assert 0 < write["min_ns"] <= write["max_ns"]
        procs = model["processes"]
        assert len(procs) == 1 and procs[0]["enabled"] and procs[0]["windows"], procs
        assert procs[0]["exit"] == {"code": n % 7, "signal": None}
        assert procs[0]["argv"][1:] == [str(tmp_path / f"ferry{n}.bin"), str(n)]
    assert counts[37] - counts[0] == 37, counts


def test_program_sees_no_ferry_variable(wine, win_programs, ferry_dll_built, tmp_path):
    exe = win_programs["show_env"]
    plain = wine.reference(exe)
    r = ferry("run", "-p", "count", "-o", tmp_path / "run", "--", exe, env=wine.env, text=False, timeout=180)
    assert r.returncode == plain.returncode == 0, r.stderr
    assert b"FERRY_MODE" not in r.stdout and b"FERRY_WIN_RUN_DIR" not in r.stdout
    # Every variable the user gave is there as under plain wine.  (wine orders
    # the block of a process started by another Windows process, here
    # ferry-launch.exe, its own way, and adds `winsysdir` only to the first.)
    mine, theirs = set(r.stdout.splitlines()), set(plain.stdout.splitlines())
    for k, v in wine.env.items():
        line = f"{k}={v}".encode()
        assert (line in mine) == (line in theirs), line


def _one_line_refusal(r, name, run_dir):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in lines[0], r.stderr
    assert not Path(run_dir).exists()


def test_aggregation_profile_runs_a_program_without_fibers_as_count_does(wine, win_programs,
                                                                          ferry_dll_built, tmp_path):
    # no carrier: every call goes straight on, and is counted; ferry says no
    # call was aggregated
    exe = win_programs["write_count"]
    plain = wine.reference(exe, tmp_path / "plain.bin", 5)
    r = ferry("run", "-p", "aggregate", "-o", tmp_path / "run", "--", exe, tmp_path / "x.bin", 5,
              env=wine.env, text=False, timeout=180)
    assert (r.stdout, r.returncode) == (plain.stdout, plain.returncode)
    assert b"no call was aggregated" in r.stderr
    assert (tmp_path / "x.bin").read_bytes() == b"x" * 5
    model, writes = _calls(tmp_path / "run", wine.env, "NtWriteFile")
    assert writes >= 5 and model.get("aggregation") is None


def test_the_unused_engine_note_of_a_windows_program_does_not_suggest_fibers(wine, win_programs,
                                                                              ferry_dll_built,
                                                                              tmp_path):
    # `-p fibers`, which the note suggests for a Linux program, refuses a
    # Windows one: the note, at the run's end and in the report, says what
    # aggregates there
    r = ferry("run", "-p", "aggregate", "-o", tmp_path / "run", "--", win_programs["write_count"],
              tmp_path / "x.bin", 1, env=wine.env, timeout=180)
    assert "no call was aggregated" in r.stderr, r.stderr
    report = " ".join(ferry("report", tmp_path / "run", env=wine.env, timeout=180).stdout.split())
    for said in (r.stderr, report):
        assert "-p fibers" not in said and "fibers it makes through ferry.dll's API" in said, said


def test_a_windows_programs_threads_are_not_made_fibers_silently(wine, win_programs,
                                                              ferry_dll_built, tmp_path):
    # ferry.dll runs as fibers only those made through its API: `-p fibers`
    # (threads = "fibers") would have run the program with its calls only
    # counted and a note suggesting `-p fibers` itself
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "fibers", "-o", run_dir, "--", win_programs["write_count"],
              tmp_path / "x.bin", 1, env=wine.env, text=False, timeout=180)
    _one_line_refusal(r, "write_count.exe: a Windows program's threads cannot run as fibers", run_dir)
    assert b"-p aggregate" in r.stderr and not (tmp_path / "x.bin").exists()


def test_dll_given_to_run_refused(wine, ferry_dll_built, tmp_path):
    dll = tmp_path / "some.dll"
    shutil.copy(ROOT / "shim" / "build" / "ferry.dll", dll)
    os.chmod(dll, 0o755)
    run_dir = tmp_path / "run"
    r = ferry("run", "-o", run_dir, "--", dll, env=wine.env, text=False, timeout=180)
    _one_line_refusal(r, "a DLL, not a program", run_dir)


def test_missing_wine_refused(wine, win_programs, ferry_dll_built, tmp_path):
    env = dict(wine.env, PATH=str(Path(FERRY[0]).parent))
    run_dir = tmp_path / "run"
    r = ferry("run", "-o", run_dir, "--", win_programs["write_count"], tmp_path / "x.bin", 1, env=env,
              text=False, timeout=180)
    _one_line_refusal(r, "wine is not installed", run_dir)


@pytest.mark.parametrize("profile", ["count", "trace"])
def test_threads_exceptions_and_apcs(wine, win_programs, ferry_dll_built, tmp_path, profile):
    """Four threads counted, an exception resumed by a vectored handler, an
    access violation recovered, two APCs: the program checks each itself and
    prints what it saw.  A writer that ended may leave its block, with its
    counts, to a later writer: each block holds whole writers' writes."""
    exe = win_programs["threads_exc"]
    counts = {}
    for n in (0, 25):
        run_dir = tmp_path / f"run{n}"
        r = _same_as_plain(wine, exe, profile, run_dir, (tmp_path / f"plain{n}", n),
                           (tmp_path / f"ferry{n}", n))
        assert b"exceptions resumed 3, recovered 7, apcs 11, sleep alerted" in r.stdout
        model, counts[n] = _calls(run_dir, wine.env, "NtWriteFile")
        assert model["processes"][0]["threads"] >= 2
        writes = [t["syscalls"].get("NtWriteFile", 0) for t in model["threads"]]
        writers = [w for w in writes if w >= n]     # the main thread's few are not
        assert n == 0 or (sum(writers) == 4 * n and all(w % n == 0 for w in writers)), writes
    assert counts[25] - counts[0] == 4 * 25, counts


def test_every_child_carries_ferry_dll(wine, win_programs, ferry_dll_built, tmp_path):
    """spawn_tree 3: a child through CreateProcessW, a grandchild through
    `cmd.exe /c` (cmd.exe itself enabled too), and so on down: every process
    is in the report, enabled, in one tree, and the NtWriteFile calls of all
    of them are counted."""
    exe = win_programs["spawn_tree"]
    counts = {}
    for n in (0, 15):
        run_dir = tmp_path / f"run{n}"
        r = _same_as_plain(wine, exe, "trace", run_dir, (3, n, tmp_path / f"plain{n}"),
                           (3, n, tmp_path / f"ferry{n}"))
        assert r.returncode == 3
        model, counts[n] = _calls(run_dir, wine.env, "NtWriteFile")
        procs = model["processes"]
        assert all(p["enabled"] and p["windows"] for p in procs), procs
        names = sorted(p["exe"].split("\\")[-1].lower() for p in procs)
        assert names == ["cmd.exe", "spawn_tree.exe", "spawn_tree.exe", "spawn_tree.exe",
                         "spawn_tree.exe"], names
        # one tree: every process descends from the first by Windows pids; the
        # first's own ppid is a Linux pid (its launcher's parent), which may
        # equal a wine pid of the tree (6112 both, once in CI)
        roots = [p for p in procs if p["argv"][1] == "3"]
        assert len(roots) == 1, procs
        by_pid = {p["pid"]: p for p in procs}
        for p in procs:
            up = p
            for _ in procs:
                if up is roots[0]:
                    break
                up = by_pid.get(up["ppid"])
                assert up is not None, procs
            assert up is roots[0], procs
        assert sorted(p["exit"]["code"] for p in procs) == [0, 1, 1, 2, 3]
    assert counts[15] - counts[0] == 4 * 15, counts


def test_winsock_echo_server_under_load(wine, win_programs, ferry_dll_built, tmp_path):
    """Four clients, each 500 messages of 64 bytes checked byte for byte,
    against a server on 127.0.0.1 in the same program, in trace mode: every
    send and recv is at least one NtDeviceIoControlFile (wine's AFD), timed."""
    exe = win_programs["echo_server"]
    messages = 500
    r = _same_as_plain(wine, exe, "trace", tmp_path / "run", (messages,), (messages,))
    assert r.returncode == 0 and b"0 failed" in r.stdout, r.stdout
    model, ioctl = _calls(tmp_path / "run", wine.env, "NtDeviceIoControlFile")
    assert ioctl >= 4 * 4 * messages, ioctl
    assert model["processes"][0]["threads"] >= 9


def test_win32u_calls_counted_too(wine, win_programs, ferry_dll_built, tmp_path):
    """user32's GetAsyncKeyState goes through win32u's NtUserGetAsyncKeyState
    stub: ferry.dll patches win32u's stubs as it patches ntdll's."""
    exe = win_programs["user_calls"]
    counts = {}
    for n in (0, 40):
        _same_as_plain(wine, exe, "trace", tmp_path / f"run{n}", (n,), (n,))
        model, counts[n] = _calls(tmp_path / f"run{n}", wine.env, "NtUserGetAsyncKeyState")
    assert counts[40] - counts[0] == 40, counts
    assert any(s["name"] == "NtWriteFile" for s in model["syscalls"])   # ntdll's still counted


def test_missing_detoursdll_refused(wine, win_programs, ferry_dll_built, tmp_path):
    """A detoursdll package without its detours.dll (first on the path, as a
    broken or foreign install would be) is no Detours: refused in one line."""
    shadow = tmp_path / "site" / "detoursdll"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = dict(wine.env, PYTHONPATH=str(shadow.parent))
    run_dir = tmp_path / "run"
    r = ferry("run", "-o", run_dir, "--", win_programs["write_count"], tmp_path / "x.bin", 1, env=env,
              text=False, timeout=180)
    _one_line_refusal(r, "detoursdll package is missing", run_dir)
    assert not (tmp_path / "x.bin").exists()
