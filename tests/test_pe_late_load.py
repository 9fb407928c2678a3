"""A stub DLL mapped after start-up is patched when it loads: late_user
imports neither user32 nor win32u and loads user32 (bringing win32u) with
LoadLibrary; its NtUserGetAsyncKeyState calls are counted exactly."""
import json

import pytest

from conftest import ferry
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)


@pytest.mark.parametrize("profile", ["count", "trace"])
def test_win32u_loaded_later_is_patched(wine, win_programs, ferry_dll_built, tmp_path, profile):
    exe = win_programs["late_user"]
    counts = {}
    for n in (0, 40):
        plain = wine.reference(exe, n)
        run_dir = tmp_path / f"run{n}"
        r = ferry("run", "-p", profile, "-o", run_dir, "--", exe, n, env=wine.env, timeout=180, text=False)
        assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
        assert plain.returncode == 0, plain.stdout     # win32u was not there at start-up
        rep = ferry("report", "--json", run_dir, env=wine.env, timeout=120, text=False)
        assert rep.returncode == 0, rep.stderr
        model = json.loads(rep.stdout)
        counts[n] = sum(s["calls"] for s in model["syscalls"] if s["name"] == "NtUserGetAsyncKeyState")
        assert any(s["name"] == "NtWriteFile" for s in model["syscalls"])     # ntdll's still counted
    assert counts[40] - counts[0] == 40, counts
