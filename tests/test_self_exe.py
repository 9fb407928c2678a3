"""A program that runs from its rewritten image (its own file has system-call
sites: every static program, and a dynamic one with calls of its own) sees
its own file as natively: /proc/self/exe by every name, whole and cut short,
AT_EXECFN, after a chdir, through a symlink, as a #! script's interpreter,
and in the program it starts by exec'ing /proc/self/exe.  Started by `ferry
run` and by an enabled shell (the exec hook) alike."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT, ferry
from ferry.rundata import load_run

SOURCE = ROOT / "tests" / "programs" / "self_exe.c"
BUILDS = {"dynamic": [], "static": ["-static"], "static-pie": ["-static-pie"]}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def program(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "self_exe"
    subprocess.run(["gcc", "-O2", *BUILDS[request.param], "-o", str(out), str(SOURCE)], check=True,
                   capture_output=True, timeout=120)
    return out


def _native(argv, cwd):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _enabled(argv, cwd, run_dir):
    r = ferry("run", "-o", run_dir, "--", *argv, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("started", ["by ferry run", "by a shell"])
def test_a_program_run_from_its_image_sees_its_own_file(tmp_path, program, started):
    argv = ["./self_exe"] if started == "by ferry run" else ["sh", "-c", "./self_exe"]
    native = _native(argv, program.parent)
    assert f'"{program}"' in native and 'execfn: "./self_exe"' in native
    # a static child no image was made for yet runs without the shim and is
    # rewritten after the run: the second run serves it from its image
    _enabled(argv, program.parent, tmp_path / "first")
    assert _enabled(argv, program.parent, tmp_path / "run") == native
    run = load_run(tmp_path / "run")
    if started == "by ferry run":
        assert run["info"]["program"]["how"] == "run"
    # the child that exec'd /proc/self/exe is the same program in the report
    exes = {p["exe"] for p in run["processes"]}
    assert str(program) in exes and {os.path.basename(e) for e in exes} <= {"self_exe", "sh", "dash"}


@pytest.mark.parametrize("started", ["by ferry run", "by a shell"])
def test_a_symlink_to_the_program_names_the_file_and_the_link_as_natively(tmp_path, program, started):
    (tmp_path / "link").symlink_to(program)
    argv = ["./link"] if started == "by ferry run" else ["sh", "-c", "./link"]
    native = _native(argv, tmp_path)
    assert f'"{program}"' in native and 'execfn: "./link"' in native
    assert _enabled(argv, tmp_path, tmp_path / "run") == native


@pytest.mark.parametrize("started", ["by ferry run", "by a shell"])
def test_a_scripts_interpreter_run_from_its_image_sees_itself_and_the_script(tmp_path, program, started):
    script = tmp_path / "script"
    script.write_text(f"#!{program}\n")
    script.chmod(0o755)
    argv = ["./script"] if started == "by ferry run" else ["sh", "-c", "./script"]
    native = _native(argv, tmp_path)
    assert f'"{program}"' in native and 'execfn: "./script"' in native
    assert _enabled(argv, tmp_path, tmp_path / "run") == native


GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


@pytest.mark.skipif(GO is None, reason="go is not installed")
def test_the_go_toolchain_finds_its_root_as_natively(tmp_path):
    """`go env GOROOT`: a toolchain built with -trimpath (go.dev's) knows
    its root only from os.Executable()."""
    native = _native([GO, "env", "GOROOT"], tmp_path)
    assert _enabled([GO, "env", "GOROOT"], tmp_path, tmp_path / "run") == native
