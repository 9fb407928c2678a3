"""Processes of a run that switch user are recorded like any other: a program
exec'd by `runuser`, and a process running as another user that `ferry attach`
enables.  Where such a process cannot reach the run directory, the report
says so (and nothing else).  These need root (they switch to `nobody`)."""
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ALL_PROFILES, FERRY, ferry
from ferry.rundata import load_run

PYTHON = "/usr/bin/python3"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root"),
    pytest.mark.skipif(shutil.which("runuser") is None, reason="runuser is not installed"),
]


@pytest.fixture
def shared(monkeypatch):
    """A directory every user can reach (pytest's own is root's alone), with
    the image cache in it: a process running as nobody reads its patch plans."""
    top = Path(tempfile.mkdtemp(prefix="ferry-shared-"))
    top.chmod(0o755)
    (top / "cache").mkdir()
    monkeypatch.setenv("FERRY_CACHE", str(top / "cache"))
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _run(run_dir, *argv, profile="trace"):
    return ferry("run", "-p", profile, "-o", run_dir, "--", *argv, timeout=120)


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_program_runuser_starts_is_recorded(shared, profile):
    nobody = pwd.getpwnam("nobody").pw_uid
    argv = ["runuser", "-u", "nobody", "--", "ls", "-d", "/"]
    native = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    for attempt in ("first", "second"):  # the second runs ls from its rewritten image
        r = _run(shared / attempt, *argv, profile=profile)
        assert (r.returncode, r.stdout) == (native.returncode, native.stdout), r.stderr
        model = load_run(shared / attempt)
        ls = [p for p in model["processes"] if (p["argv"] or [""])[0] == "ls"]
        assert len(ls) == 1 and ls[0]["enabled"], model["processes"]
        assert ls[0]["uid"] == nobody and ls[0]["state"] == "exited"
        assert ls[0]["calls"] > 0 or profile == "off"  # mode off counts nothing
        assert all(p["reason"] is None for p in model["processes"]), model["processes"]
    files = list((shared / "second" / "proc").iterdir())
    assert {f.stat().st_uid for f in files} == {0, nobody}
    assert all(f.stat().st_mode & 0o022 == 0 for f in files)  # each file its creator's alone
    proc = (shared / "second" / "proc").stat()
    assert proc.st_mode & 0o7777 == 0o1733  # others may add a file, not list or remove one
    report = ferry("report", shared / "second", timeout=60)
    assert report.returncode == 0 and "without the shim" not in report.stdout, report.stdout


def test_a_user_who_cannot_reach_the_run_directory_is_named(shared):
    private = shared / "private"
    private.mkdir(mode=0o700)
    r = _run(private / "run", "runuser", "-u", "nobody", "--", "ls", "-d", "/")
    assert r.returncode == 0, r.stderr
    model = load_run(private / "run")
    ls = [p for p in model["processes"] if p["exe"] and p["exe"].endswith("/ls")]
    assert len(ls) == 1 and not ls[0]["enabled"]
    assert ls[0]["reason"].startswith("switched to user nobody"), ls[0]["reason"]
    assert "not searchable" in ls[0]["reason"]


def test_attach_records_a_process_running_as_nobody(shared):
    nobody = pwd.getpwnam("nobody").pw_uid
    target = subprocess.Popen(
        [PYTHON, "-c", "import os, sys\n"
                       "for line in sys.stdin:\n"
                       "    for _ in range(100):\n"
                       "        os.getppid()\n"],
        stdin=subprocess.PIPE, user=nobody, cwd="/")
    run_dir = shared / "attached"
    attacher = None
    try:
        attacher = subprocess.Popen([*FERRY, "attach", "-o", str(run_dir), str(target.pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((run_dir / "proc").glob("*.ferry")):
            assert attacher.poll() is None, attacher.stderr.read()
            time.sleep(0.05)
        for _ in range(3):
            target.stdin.write(b"go\n")
        target.stdin.close()
        assert target.wait(timeout=60) == 0
        assert attacher.wait(timeout=60) == 0, attacher.stderr.read()
    finally:
        for p in (target, attacher):
            if p and p.poll() is None:
                p.kill()
    model = load_run(run_dir)
    proc = model["processes"][0]
    assert proc["pid"] == target.pid and proc["uid"] == nobody and proc["enabled"]
    getppid = {s["name"]: s["calls"] for s in model["syscalls"]}.get("getppid", 0)
    assert getppid >= 300
