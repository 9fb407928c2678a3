"""`ferry run`: the program runs as it would alone (streams, exit status,
signals), and leaves a run directory that says what happened, even when the
program crashes or is killed."""
import json
import shutil
import os
import signal
import subprocess
import time

import pytest

from conftest import FERRY, ROOT, ferry
from ferry.rundata import load_run

CRASH = ROOT / "tests" / "programs" / "build" / "crash"
FORKEXEC = ROOT / "tests" / "programs" / "build" / "forkexec"
MANY_CHILDREN = ROOT / "tests" / "programs" / "build" / "many_children"


pytestmark = pytest.mark.usefixtures("own_index")


def ferry_run(tmp_path, *argv, profile=None, input=None, check=False, out="run"):
    chosen = ["--profile", profile] if profile else []
    return ferry("run", "-o", tmp_path / out, *chosen, "--", *argv, input=input, check=check,
                 text=False, timeout=120)


def test_streams_and_exit_status_pass_through(tmp_path):
    r = ferry_run(tmp_path, "sh", "-c", "cat; echo to-err >&2; exit 7", input=b"from stdin\n")
    assert (r.returncode, r.stdout, r.stderr) == (7, b"from stdin\n", b"to-err\n")
    model = load_run(tmp_path / "run")
    assert model["info"]["exit"] == {"code": 7, "signal": None}
    assert model["info"]["command"] == ["sh", "-c", "cat; echo to-err >&2; exit 7"]
    root = model["processes"][0]
    assert (root["state"], root["exit"], root["enabled"]) == ("exited", {"code": 7, "signal": None}, True)
    assert root["argv"][0] == "sh" and root["exe"] == shutil.which("sh")  # as named, not resolved


@pytest.mark.parametrize("mode,sig", [("segv", signal.SIGSEGV), ("abort", signal.SIGABRT),
                                      ("kill", signal.SIGTERM)])
def test_a_crash_kills_ferry_run_with_the_same_signal_and_is_recorded(tmp_path, mode, sig):
    r = ferry_run(tmp_path, CRASH, mode)
    assert r.returncode == -sig
    model = load_run(tmp_path / "run")
    assert model["info"]["exit"] == {"code": None, "signal": sig.name}
    root = model["processes"][0]
    assert root["state"] == "killed" and root["exit"]["signal"] == sig.name
    assert model["totals"]["calls"] > 0  # what it did before dying is there


def test_signal_sent_to_ferry_run_reaches_the_program(tmp_path):
    proc = subprocess.Popen([*FERRY, "run", "-o", str(tmp_path / "run"), "--", "sleep", "30"])
    deadline = time.time() + 20
    while time.time() < deadline and not list((tmp_path / "run" / "proc").glob("*.ferry")):
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    model = load_run(tmp_path / "run")
    assert model["info"]["exit"]["signal"] == "SIGTERM"
    assert model["processes"][0]["state"] == "killed"


def test_previous_run_is_kept_as_old(tmp_path):
    ferry_run(tmp_path, "true", check=True)
    first = json.loads((tmp_path / "run" / "info.json").read_text())
    ferry_run(tmp_path, "false")
    assert json.loads((tmp_path / "run.old" / "info.json").read_text())["start"] == first["start"]
    assert load_run(tmp_path / "run")["info"]["exit"]["code"] == 1


def test_children_are_recorded_with_how_they_ended(tmp_path):
    r = ferry_run(tmp_path, FORKEXEC)
    assert r.returncode == 0
    model = load_run(tmp_path / "run")
    procs = model["processes"]
    enabled = [p for p in procs if p["enabled"]]
    assert len({p["pid"] for p in enabled}) >= 6  # the program, its forks, vforks and spawns
    # Children that exec'd /bin/echo ran its rewritten image if the cache has
    # one (the exec hook), or say why they ran without the shim.
    echo = [p for p in procs if os.path.basename(p["exe"] or "") == "echo"]
    assert echo
    assert all(p["enabled"] or "no rewritten image yet" in p["reason"] for p in echo)
    assert any(p["exit"] == {"code": 3, "signal": None} for p in procs)  # sh -c 'exit 3'


def test_a_child_killed_after_hundreds_of_waits_is_still_recorded_as_killed(tmp_path):
    """The parent's table of the waits it made holds 512; past that a child
    killed by a signal, whose own record never ends, takes the place of one
    that exited (tests/programs/many_children.c)."""
    r = ferry_run(tmp_path, MANY_CHILDREN, "600", check=True)
    killed = int(r.stdout)
    model = load_run(tmp_path / "run")
    child = [p for p in model["processes"] if p["pid"] == killed]
    assert child and child[-1]["state"] == "killed", child
    assert child[-1]["exit"] == {"code": None, "signal": "SIGKILL"}


def test_profiles_choose_what_the_shim_records(tmp_path):
    for profile in ("trace", "count", "off"):
        ferry_run(tmp_path, "ls", "/", profile=profile, out=profile, check=True)
    trace, count, off = (load_run(tmp_path / p) for p in ("trace", "count", "off"))
    assert trace["totals"]["time_ns"] > 0 and trace["sites"]
    assert count["totals"]["calls"] == trace["totals"]["calls"] and count["totals"]["time_ns"] == 0
    assert off["totals"]["calls"] == 0
    assert [p["mode"] for p in off["processes"]] == ["off"]


def test_runs_are_indexed(tmp_path):
    ferry_run(tmp_path, "true", check=True)
    ferry_run(tmp_path, "false", out="run2")
    rows = json.loads(ferry("runs", "--json", check=True).stdout)
    assert [r["command"] for r in rows[:2]] == [["false"], ["true"]]
    assert rows[0]["exit_code"] == 1 and rows[0]["present"] and rows[0]["calls"] > 0
    out = ferry("runs", check=True).stdout
    assert "false" in out and "true" in out


@pytest.mark.parametrize("argv,problem", [(["/nonexistent/prog"], "no such file"),
                                          (["no-such-command-ferry"], "command not found"),
                                          (["{data}"], "not executable"),
                                          (["/tmp"], "is a directory")])
def test_bad_command_gives_one_line_and_leaves_nothing(tmp_path, argv, problem):
    data = tmp_path / "data.txt"
    data.write_text("not a program\n")
    r = ferry_run(tmp_path, *(a.format(data=data) for a in argv))
    assert r.returncode == 2
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and problem in lines[0] and lines[0].startswith("ferry: ")
    assert not (tmp_path / "run").exists()


def _names(tmp_path):
    """The run directories in tmp_path, and anything hidden left there."""
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("run", ".")))


def _runs_there(tmp_path):
    """{name: info.json} of the run directories in tmp_path, hidden ones too."""
    return {d.name: (d / "info.json").read_text() for d in sorted(tmp_path.iterdir())
            if d.is_dir() and (d / "info.json").exists()}


def test_a_run_whose_shim_is_missing_leaves_the_runs_there_as_they_were(tmp_path):
    ferry_run(tmp_path, "true", check=True)
    ferry_run(tmp_path, "false")
    before = _runs_there(tmp_path)
    env = dict(os.environ, FERRY_SHIM=str(tmp_path / "no-shim.so"))
    r = subprocess.run(FERRY + ["run", "-o", str(tmp_path / "run"), "--", "true"],
                       capture_output=True, env=env, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and "the shim is not built" in lines[0], r.stderr
    assert _names(tmp_path) == ["run", "run.old"]
    assert _runs_there(tmp_path) == before
    ferry_run(tmp_path, "true", check=True)  # and the directory takes the next run


def test_a_program_that_cannot_be_started_leaves_the_runs_there_as_they_were(tmp_path, monkeypatch):
    """The exec itself fails (what `ferry run` checks first did not see it):
    the new run directory goes, the run it replaced and the one before come back."""
    from ferry import runner
    from ferry.base.errors import FerryError
    from ferry.profiles import load
    ferry_run(tmp_path, "true", check=True)
    ferry_run(tmp_path, "false")
    before = _runs_there(tmp_path)

    def refused(*_args, **_kw):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(runner.subprocess, "Popen", refused)
    with pytest.raises(FerryError, match="cannot start: permission denied"):
        runner.run(["/bin/true"], load("trace"), tmp_path / "run", index=False)
    assert _names(tmp_path) == ["run", "run.old"]
    assert _runs_there(tmp_path) == before


def test_a_programs_duration_leaves_out_what_ferry_run_does_beside_it(tmp_path, monkeypatch):
    """duration_s is the program's: removing the run it replaced and writing
    info.json happen while it runs, and its end is taken when it comes (a
    short program's duration was mostly that work, ~1-5 ms).  Here that
    work is made to take 3 s; /bin/true takes a few ms."""
    from ferry import runner
    from ferry.profiles import load
    ferry_run(tmp_path, "true", check=True)
    ferry_run(tmp_path, "true", check=True)   # a run.old to replace: commit has work
    slow = runner._Rotation.commit

    def commit(self):
        time.sleep(3)
        slow(self)
    monkeypatch.setattr(runner._Rotation, "commit", commit)
    info, code = runner.run(["/bin/true"], load("trace"), tmp_path / "run", index=False)
    assert code == 0 and info["duration_s"] < 1.5, info
    assert _names(tmp_path) == ["run", "run.old"]


def test_a_directory_that_is_not_a_run_is_never_replaced(tmp_path):
    precious = tmp_path / "run"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    r = ferry_run(tmp_path, "true")
    assert r.returncode == 2 and b"not a run directory" in r.stderr
    assert (precious / "notes.txt").read_text() == "mine"


def test_corrupt_process_file_is_reported_by_name(tmp_path):
    ferry_run(tmp_path, "true", check=True)
    victim = next((tmp_path / "run" / "proc").glob("*.ferry"))
    victim.write_bytes(victim.read_bytes()[:1000])
    from ferry.base.errors import FerryError
    with pytest.raises(FerryError, match="truncated process file"):
        load_run(tmp_path / "run")
    victim.write_bytes(b"garbage" * 20000)
    with pytest.raises(FerryError, match="not a Ferry process file"):
        load_run(tmp_path / "run")


def test_a_process_killed_before_its_file_was_written_is_skipped(tmp_path):
    # The shim creates its file at full size, then writes the header: a
    # process killed in between leaves zeros (or nothing), not a corrupt run.
    ferry_run(tmp_path, "true", check=True)
    proc = tmp_path / "run" / "proc"
    (proc / "99998-0.ferry").write_bytes(b"")
    (proc / "99999-0.ferry").write_bytes(bytes(1 << 16))
    model = load_run(tmp_path / "run")
    assert [p["exe"] for p in model["processes"]] == ["/usr/bin/true"]
