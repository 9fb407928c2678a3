"""A program run by `ferry run` sees what it would see natively (Etch's
"original context"): its own environment (none of Ferry's settings, no
LD_PRELOAD / LD_LIBRARY_PATH of Ferry's), its own file as /proc/self/exe,
its own argv and $0, the descriptors it was given, and the signal
dispositions it inherited; programs the shim cannot serve get nothing of
Ferry's at all."""
import os
import shutil
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY, PROGRAMS, ROOT, ferry
from ferry.injector.environment import SETTINGS, is_setting
from ferry.rundata import load_run

SELF_VIEW = ROOT / "tests" / "programs" / "py_self_view.py"
PYTHON = "/usr/bin/python3"


pytestmark = pytest.mark.usefixtures("own_index")


def native_and_ferry(tmp_path, argv, profile="trace", **kw):
    # Ferry's settings (the tests' own image cache) are for Ferry itself:
    # natively the program would not have them.
    env = kw.pop("env", os.environ)
    native = subprocess.run(argv, capture_output=True, timeout=120, **kw,
                            env={k: v for k, v in env.items() if not is_setting(k)})
    kw["env"] = env
    under = subprocess.run([*FERRY, "run", "-p", profile, "-o", str(tmp_path / "run"), "--", *argv],
                           capture_output=True, timeout=120, **kw)
    return native, under


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_environment_exe_and_argv_are_the_programs_own(tmp_path, profile):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LD_LIBRARY_PATH": "/opt/none",
           "FERRY_CACHE": os.environ["FERRY_CACHE"], "FERRY_DATA": str(tmp_path / "data"),
           "FERRY_OF_THE_PROGRAM": "its own variable, whatever its name"}
    native, under = native_and_ferry(tmp_path, [PYTHON, str(SELF_VIEW)], profile, env=env)
    assert under.returncode == native.returncode == 0, under.stderr
    assert under.stdout == native.stdout
    assert load_run(tmp_path / "run")["processes"][0]["enabled"]


@pytest.mark.parametrize("profile", ALL_PROFILES)
@pytest.mark.parametrize("preset", [{}, {"LD_LIBRARY_PATH": "/opt/none"}, {"LD_PRELOAD": ""}],
                         ids=["plain", "library-path", "empty-preload"])
def test_the_auxiliary_vector_follows_the_environment(tmp_path, profile, preset):
    """Go's runtime, musl and static programs find the auxiliary vector as the
    words after the environment's NULL, walking from argv
    (tests/programs/auxv_walk.c: the page size, AT_RANDOM; then in a child of
    the exec hook). The shim takes Ferry's entries out of the array, and the
    vector was then read one word out of step whenever an odd number went:
    a Go program with cgo died at start ("failed to get system page size"),
    under some profiles and environments and not others."""
    env = dict(os.environ, **preset)
    native, under = native_and_ferry(tmp_path, [PROGRAMS / "auxv_walk", "again"], profile, env=env)
    assert native.stdout == (b"again: page 4096, random yes, ended yes\n"
                             b"child: page 4096, random yes, ended yes\n")
    assert (under.returncode, under.stdout) == (0, native.stdout), under.stderr


@pytest.mark.parametrize("extra", [{f"V{i}": "x" for i in range(1500)}, {"BIG": "y" * 20000}],
                         ids=["many-variables", "long-values"])
def test_a_large_environment_is_the_programs_own_in_proc_too(tmp_path, extra):
    # beyond what the shim sorts on its stack (1024 variables, 8 KiB)
    env = dict(os.environ, **extra)
    native, under = native_and_ferry(tmp_path, [PYTHON, str(SELF_VIEW)], env=env)
    assert under.returncode == native.returncode == 0, under.stderr
    assert under.stdout == native.stdout


@pytest.mark.parametrize("preset", [{}, {"LD_PRELOAD": ""}, {"LD_LIBRARY_PATH": "/opt/none"},
                                    {"LD_PRELOAD": "", "LD_LIBRARY_PATH": "/opt/x:/opt/y"}],
                         ids=["none", "preload", "library-path", "both"])
def test_a_users_loader_variables_keep_their_place_and_ferrys_stay_out_of_proc(tmp_path, preset):
    """With LD_PRELOAD or LD_LIBRARY_PATH of the user's own, a program sees
    them where it would natively, and /proc/PID/environ shows the same
    strings in the same order (the region ends in the zeros of the settings
    taken out: its length is the kernel's).  The exec hook put its own
    entries after the program's variables, so a child of an enabled program
    found them moved to the end; and the shim measured the strings after
    rebuilding a marker into the value it gives back (one byte shorter), so
    they no longer lay back to back and every setting of Ferry's stayed in
    /proc.  `env` is the enabled program whose exec the hook serves.
    Without either (none), the strings kept are moved down in place, with
    no copy: they are in address order."""
    env = dict(preset, **{k: v for k, v in os.environ.items() if k not in preset})  # theirs first
    code = "import sys; sys.stdout.buffer.write(open('/proc/self/environ', 'rb').read().rstrip(b'\\0'))"
    native, under = native_and_ferry(tmp_path, ["/usr/bin/env", PYTHON, "-c", code], env=env)
    assert under.returncode == native.returncode == 0, under.stderr
    assert under.stdout.split(b"\0") == native.stdout.split(b"\0")
    procs = load_run(tmp_path / "run")["processes"]
    assert [p["enabled"] for p in procs if p["exe"] in ("/usr/bin/env", os.path.realpath(PYTHON))] == [True, True]


@pytest.mark.parametrize("mode", ["env-at-page-end", "env-across-pages", "path-at-page-end",
                                  "path-across-pages"])
def test_a_childs_environment_array_at_a_mappings_end_or_across_pages_is_read_whole(tmp_path, mode):
    # The exec hook reads the array a batch at a time, each batch as far as
    # its page and on into the next: it must take every entry, and not fail
    # on the page that is not there (a failed read runs the child unserved).
    # Its first batch is read with the program's path (path-*: an array at
    # its mapping's end, and a path at its own or running into the next page).
    native, under = native_and_ferry(tmp_path, [str(PROGRAMS / "children"), mode])
    assert under.returncode == native.returncode == 0, under.stderr
    assert under.stdout == native.stdout
    assert native.stdout.count(b"CHILD_VAR_") == 80
    env = [p for p in load_run(tmp_path / "run")["processes"] if p["exe"] == "/usr/bin/env"]
    assert len(env) == 1 and env[0]["enabled"], env


def test_a_program_started_with_an_empty_environment_sees_none(tmp_path):
    native, under = native_and_ferry(tmp_path, ["env", "-i", "/usr/bin/env"])
    assert (under.returncode, under.stdout) == (0, b"") == (native.returncode, native.stdout)
    native, under = native_and_ferry(tmp_path, ["env", "-i", PYTHON, str(SELF_VIEW)])
    assert under.stdout == native.stdout
    procs = load_run(tmp_path / "run")["processes"]
    assert all(p["enabled"] for p in procs if p["calls"]), procs


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_children_see_their_own_environment_and_exe(tmp_path, shell):
    # a child without a rewritten image yet is preloaded; the next run takes
    # its libraries from the cache: both must look native.  dash's child is a
    # vfork child, bash's a fork child (whose exec hook reads the environment
    # onto the program's stack)
    script = f"{PYTHON} {SELF_VIEW}; exec {PYTHON} {SELF_VIEW}"
    for _ in range(2):
        native, under = native_and_ferry(tmp_path, [shell, "-c", script])
        assert under.stdout == native.stdout


def test_scripts_keep_their_dollar_zero(tmp_path):
    (tmp_path / "s.sh").write_text('#!/bin/sh\necho "$0 $1"; readlink /proc/$$/exe\n')
    (tmp_path / "noshebang").write_text('echo "no shebang: $0 $1"\n')
    for name in ("s.sh", "noshebang"):
        os.chmod(tmp_path / name, 0o755)
        native = subprocess.run(["env", f"./{name}", "arg"], capture_output=True, cwd=tmp_path)
        under = ferry("run", "-o", tmp_path / "run", "--", f"./{name}", "arg", cwd=tmp_path, text=False)
        assert (under.returncode, under.stdout) == (native.returncode, native.stdout), under.stderr


def test_inherited_descriptors_reach_the_program(tmp_path):
    r, w = os.pipe()
    try:
        native, under = native_and_ferry(tmp_path, [PYTHON, str(SELF_VIEW)], pass_fds=(r, w))
    finally:
        os.close(r)
        os.close(w)
    fds = [line for line in under.stdout.splitlines() if line.startswith(b"fds")]
    assert fds == [line for line in native.stdout.splitlines() if line.startswith(b"fds")]
    assert str(w).encode() in fds[0]


def test_a_32_bit_program_gets_nothing_of_ferry(tmp_path):
    cc = shutil.which("gcc")
    src = tmp_path / "m32.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\nint main(void){'
                   'puts(getenv("LD_PRELOAD") ? "preloaded" : "clean"); return 0;}\n')
    build = subprocess.run([cc, "-m32", "-o", str(tmp_path / "m32"), str(src)], capture_output=True)
    if build.returncode != 0:
        pytest.skip("no 32-bit toolchain (gcc-multilib)")
    native, under = native_and_ferry(tmp_path, ["sh", "-c", str(tmp_path / "m32")])
    assert (under.returncode, under.stdout, under.stderr) == (native.returncode, native.stdout, native.stderr)
    run = load_run(tmp_path / "run")
    m32 = [p for p in run["processes"] if not p["enabled"]]
    assert m32 and "32-bit" in m32[0]["reason"]


def test_the_shim_and_ferry_run_agree_on_which_variables_are_ferrys():
    header = (ROOT / "shim" / "src" / "settings.h").read_text()
    block = header[header.index("#define FERRY_SETTINGS"):header.index("/* Markers")]
    import re
    assert tuple(re.findall(r'"(FERRY_[A-Z_]+)"', block)) == SETTINGS
