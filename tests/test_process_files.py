"""The shim keeps no descriptor of its own: a program sees exactly the
descriptors it would natively, even with stdin and stdout closed (the numbers
the shim's files would otherwise have taken), and its process file is intact."""
import subprocess

import pytest

from conftest import ALL_PROFILES, ROOT, ferry
from ferry.rundata import load_run

PYTHON = "/usr/bin/python3"
LSFD = str(ROOT / "tests/programs/py_lsfd.py")
# A shell starts the program with stdin and stdout closed.
CLOSED = ["sh", "-c", f'exec {PYTHON} {LSFD} "$@" <&- >&-', "sh"]


def _native(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, close_fds=True)


@pytest.mark.parametrize("profile", ALL_PROFILES)
@pytest.mark.parametrize("extra", [[], ["print"]], ids=["list", "list-and-print"])
def test_closed_descriptors_stay_the_programs(tmp_path, profile, extra):
    native = _native(CLOSED + extra)
    run_dir = tmp_path / "run"
    under = ferry("run", "-p", profile, "-o", run_dir, "--", *CLOSED, *extra, timeout=120)
    listing = native.stderr.splitlines()[:2]
    assert listing[0].startswith("2=") and listing[1] == "new: 0", native.stderr
    assert (under.returncode, under.stderr.splitlines()[:2]) == (native.returncode, listing), under.stderr
    model = load_run(run_dir)  # every process file reads back
    python = [p for p in model["processes"] if p["argv"] and LSFD in p["argv"]]
    assert python and python[-1]["state"] == "exited" and python[-1]["enabled"]
    report = ferry("report", run_dir, timeout=60)
    assert report.returncode == 0 and "not a Ferry process file" not in report.stderr, report.stderr


def test_pass_fds_children_see_only_what_they_were_given(tmp_path):
    code = ("import os, subprocess, sys\n"
            "r, w = os.pipe()\n"
            f"subprocess.run([{PYTHON!r}, {LSFD!r}], pass_fds=[w], stdin=subprocess.DEVNULL)\n")
    native = _native([PYTHON, "-c", code])
    under = ferry("run", "-o", tmp_path / "run", "--", PYTHON, "-c", code, timeout=120)
    assert under.stderr.splitlines()[:2] == native.stderr.splitlines()[:2], (native.stderr, under.stderr)
