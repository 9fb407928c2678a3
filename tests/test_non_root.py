"""Ferry run by a user who is not root: `ferry run`, `ferry report` and
`ferry runs` work with the user's own cache and run index, programs behave
as natively, and a set-user-ID program keeps its privileges.  The tests
switch to `nobody` with runuser, so they need root; the source tree and its
venv must be readable by nobody (they run under /usr/bin/python3 of the same
version as the venv's, since the venv's interpreter may sit in root's home)."""
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from conftest import ALL_PROFILES, PROGRAMS, ROOT

SITE = sysconfig.get_paths()["purelib"]
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"


def _readable_by_nobody(path):
    return subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", str(path)],
                          capture_output=True).returncode == 0


def _why_not():
    if os.geteuid() != 0:
        return "switching to nobody needs root"
    if shutil.which("runuser") is None:
        return "runuser is not installed"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON} matching the venv's Python"
    for p in (ROOT / "ferry" / "cli.py", ROOT / "shim" / "build" / "libferry.so", Path(SITE) / "click"):
        if not _readable_by_nobody(p):
            return f"{p} is not readable by nobody"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


@pytest.fixture(scope="module")
def home():
    """nobody's HOME, cache and run directories: a directory of its own."""
    top = Path(tempfile.mkdtemp(prefix="ferry-nobody-"))
    shutil.chown(top, "nobody")
    yield top
    shutil.rmtree(top, ignore_errors=True)


def as_nobody(home, *argv, **kw):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg-cache"),
           "FERRY_CACHE": str(home / "cache"), "LANG": "C.UTF-8"}
    return subprocess.run(["runuser", "-u", "nobody", "--", "env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), *argv],
                          capture_output=True, text=True, timeout=300, cwd=home, **kw)


def ferry(home, *args):
    boot = ("import site, sys\n"
            f"site.addsitedir({SITE!r})\n"
            "from ferry.cli import main\n"
            "sys.argv[0] = 'ferry'\n"
            "sys.exit(main())\n")
    return as_nobody(home, SYSTEM_PYTHON, "-c", boot, *args)


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_run_and_report_as_nobody(home, profile):
    program = [str(PROGRAMS / "forkexec")]
    native = as_nobody(home, *program)
    run_dir = home / f"run-{profile}"
    r = ferry(home, "run", "-p", profile, "-o", str(run_dir), "--", *program)
    assert (r.returncode, r.stdout) == (native.returncode, native.stdout), r.stderr
    assert all(f.stat().st_uid == home.stat().st_uid for f in (run_dir / "proc").iterdir())
    # proc/ is opened to other users only by root's runs: no process here can switch user.
    assert (run_dir / "proc").stat().st_mode & 0o022 == 0
    report = ferry(home, "report", "--json", str(run_dir))
    assert report.returncode == 0, report.stderr
    runs = ferry(home, "runs", "--json")
    assert runs.returncode == 0 and str(run_dir) in runs.stdout, runs.stderr
    assert (home / ".local" / "share" / "ferry").is_dir()


def test_a_set_user_id_program_keeps_its_privileges(home):
    passwd = shutil.which("passwd")
    if not passwd or not os.stat(passwd).st_mode & stat.S_ISUID:
        pytest.skip("no set-user-ID passwd")
    native = as_nobody(home, "passwd", "-S")
    assert native.returncode == 0, native.stderr  # it reads /etc/shadow: root's privilege
    r = ferry(home, "run", "-o", str(home / "suid"), "--", "passwd", "-S")
    assert (r.returncode, r.stdout) == (native.returncode, native.stdout), r.stderr
    info = (home / "suid" / "info.json").read_text()
    assert "set-user-ID" in info


def test_a_program_with_file_capabilities_runs_with_its_own_environment(home):
    """A program with file capabilities runs, for a user who lacks them, in
    ld.so's secure mode, which ignores LD_PRELOAD and LD_LIBRARY_PATH: the
    shim never loaded, and the program saw Ferry's settings in its
    environment.  It is never enabled, as a set-ID program: started by
    `ferry run` or by an enabled parent's exec, it gets the environment it
    would have natively."""
    setcap = shutil.which("setcap") or "/usr/sbin/setcap"
    if not os.access(setcap, os.X_OK):
        pytest.skip("no setcap (libcap2-bin)")
    capenv = home / "capenv"
    shutil.copy("/usr/bin/env", capenv)
    os.chmod(capenv, 0o755)
    if subprocess.run([setcap, "cap_net_raw+ep", str(capenv)], capture_output=True).returncode:
        pytest.skip(f"{home}'s file system keeps no capabilities")
    # FERRY_CACHE, which as_nobody sets for ferry, is a setting of Ferry's:
    # taken out of every program's environment under ferry run
    def own(out):
        return [line for line in out.splitlines() if not line.startswith("FERRY_CACHE=")]
    for how, argv in (("direct", [str(capenv)]), ("child", ["sh", "-c", str(capenv)])):
        native = as_nobody(home, *argv)
        assert native.returncode == 0 and "LD_PRELOAD" not in native.stdout, native
        r = ferry(home, "run", "-o", str(home / f"caps-{how}"), "--", *argv)
        assert (r.returncode, own(r.stdout)) == (native.returncode, own(native.stdout)), r.stderr
        # why it ran without the shim, as the run's report says it
        report = ferry(home, "report", str(home / f"caps-{how}"))
        assert report.returncode == 0 and "capabilit" in report.stdout, report

