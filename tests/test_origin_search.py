"""$ORIGIN as ld.so sees it: the directory of the executable's real path
(a program started through a symlink, as /usr/bin/java, finds libraries
beside the file the link leads to), and, in a rewritten library copied out of
its directory, still the directory it was found in."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, calls_of, read_stats, recording_env, ferry

SRC = ROOT / "tests" / "programs"


def _gcc(*args):
    subprocess.run(["gcc", "-O2", *map(str, args)], check=True)


def _app(tmp_path):
    """app/bin/site_caller needs libsite.so from $ORIGIN/../lib; libsite.so
    needs libhelper.so from its own $ORIGIN/../private; links/site_caller is
    a symlink to the program from another directory."""
    (tmp_path / "app" / "bin").mkdir(parents=True)
    (tmp_path / "app" / "lib").mkdir()
    (tmp_path / "app" / "private").mkdir()
    (tmp_path / "links").mkdir()
    helper = tmp_path / "app" / "private" / "libhelper.so"
    # no code of its own, so never rewritten: it must be found where it lies
    _gcc("-shared", "-fPIC", "-Wl,-soname,libhelper.so", "-o", helper, "-x", "c", "/dev/null")
    lib = tmp_path / "app" / "lib" / "libsite.so"
    _gcc("-shared", "-fPIC", "-o", lib, SRC / "libsite.c", "-Wl,--no-as-needed",
         f"-L{helper.parent}", "-lhelper", "-Wl,-rpath,$ORIGIN/../private", "-Wl,--enable-new-dtags")
    exe = tmp_path / "app" / "bin" / "site_caller"
    _gcc("-o", exe, SRC / "site_caller.c", f"-L{lib.parent}", "-lsite",
         "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--disable-new-dtags")
    link = tmp_path / "links" / "site_caller"
    link.symlink_to(os.path.relpath(exe, link.parent))
    return exe, link


def test_program_started_through_a_symlink_finds_origin_libraries(tmp_path):
    exe, link = _app(tmp_path)
    native = subprocess.run([str(link), "9"], capture_output=True, text=True)
    assert native.returncode == 0, native.stderr
    out = tmp_path / "out"
    ferry("instrument", link, "-o", out, check=True)
    mods = {m["name"]: m for m in json.loads((out / "manifest.json").read_text())["modules"]}
    assert Path(mods["libsite.so"]["original"]).resolve() == (exe.parent.parent / "lib" / "libsite.so")
    assert mods["libsite.so"]["sites_patched"] == 1
    env = recording_env(os.environ, tmp_path / "run")
    got = subprocess.run([str(out / "site_caller"), "9"], capture_output=True, text=True, env=env)
    assert (got.stdout, got.stderr, got.returncode) == (native.stdout, native.stderr, 0)
    assert calls_of(read_stats(tmp_path / "run"), "getppid") == 9


def test_rewritten_library_keeps_its_origin_search(tmp_path):
    """libsite.so is copied beside the rewritten program; the libhelper.so it
    needs through $ORIGIN/../private must still be found where it is."""
    exe, _link = _app(tmp_path)
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    assert (out / "libsite.so").is_file() and not (out / "libhelper.so").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    got = subprocess.run([str(out / "site_caller"), "4"], capture_output=True, text=True, env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "site_getppid: 4 of 4 calls returned a pid\n"
    # The same library found in another directory gets its own copy.
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "app", other, symlinks=True)
    shutil.rmtree(tmp_path / "app" / "private")
    out2 = tmp_path / "out2"
    ferry("instrument", other / "bin" / "site_caller", "-o", out2, check=True)
    got = subprocess.run([str(out2 / "site_caller"), "4"], capture_output=True, text=True, env=env)
    assert got.returncode == 0, got.stderr


def test_java_through_its_symlink_is_enabled(tmp_path):
    java = shutil.which("java")
    if java is None:
        pytest.skip("java is not installed")
    if Path(java).resolve() == Path(java):
        pytest.skip("java is not a symlink here")
    native = subprocess.run([java, "-version"], capture_output=True, text=True)
    out = tmp_path / "out"
    ferry("instrument", java, "-o", out, check=True)
    got = subprocess.run([str(out / "java"), "-version"], capture_output=True, text=True)
    assert (got.stderr, got.returncode) == (native.stderr, native.returncode)
