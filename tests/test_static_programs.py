"""Static programs carry the shim inside them (issue 13): built here, at test
time, with each toolchain there is (gcc -static, gcc -static-pie, musl-gcc),
they behave under `ferry run` exactly as natively (output, stderr, exit
status, byte for byte), their calls are counted as strace counts them, and
the rewritten file is one file that runs anywhere, recording nothing when
started outside `ferry run`."""
import json
import os
import re
import shutil
import subprocess

import pytest

import strace_counts
from conftest import FERRY, ROOT, ferry, ferry_env
from ferry.rundata import load_run

SOURCE = ROOT / "tests" / "programs" / "static_mix.c"
TOOLCHAINS = {
    "gcc-static": ["gcc", "-static"],
    "gcc-static-pie": ["gcc", "-static-pie"],
    "musl": ["musl-gcc", "-static"],
}


def build_static(source, toolchain, tmp_path_factory):
    """`source` (a C file) built with `toolchain` (a key of TOOLCHAINS) into a
    new directory, named as the source; skips the test when the compiler is
    not installed."""
    cc = TOOLCHAINS[toolchain]
    if shutil.which(cc[0]) is None:
        pytest.skip(f"{cc[0]} is not installed")
    out = tmp_path_factory.mktemp(toolchain) / source.stem
    subprocess.run([*cc, "-O2", "-pthread", "-o", str(out), str(source)], check=True,
                   capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module", params=sorted(TOOLCHAINS))
def program(request, tmp_path_factory):
    return build_static(SOURCE, request.param, tmp_path_factory)


def _native(argv):
    return subprocess.run(argv, capture_output=True, timeout=60)


def _under_ferry(run_dir, argv, profile="trace"):
    return ferry("run", "-p", profile, "-o", run_dir, "--", *argv, text=False, timeout=120)


@pytest.mark.parametrize("args", [["threads", "6"], ["fork"], ["signal"], ["crash"], ["smallstack"]],
                         ids=lambda a: a[0])
def test_static_program_behaves_as_natively_and_is_counted(tmp_path, program, args):
    argv = [str(program), *args]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv)
    assert (under.stdout, under.stderr, under.returncode) == \
        (native.stdout, native.stderr, native.returncode)
    model = load_run(tmp_path / "run")
    root = model["processes"][0]
    assert root["calls"] > 0, root
    counted = {s["name"]: s["calls"] for s in model["syscalls"]}
    if args[0] == "threads":
        # every thread's clone and its exit, through the shim
        assert counted.get("clone", 0) + counted.get("clone3", 0) == 6
        assert counted.get("exit", 0) == 6
    if args[0] == "crash":
        assert "exit_group" not in counted


@pytest.mark.parametrize("profile", ["count", "off"])
def test_static_program_under_other_profiles(tmp_path, program, profile):
    argv = [str(program), "threads", "3"]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv, profile)
    assert (under.stdout, under.returncode) == (native.stdout, native.returncode)
    calls = load_run(tmp_path / "run")["processes"][0]["calls"]
    assert (calls > 0) == (profile == "count")


def test_aggregation_is_refused_for_static_programs(tmp_path, program):
    r = _under_ferry(tmp_path / "run", [str(program), "signal"], profile="fibers")
    assert r.returncode == 2 and r.stdout == b""
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "static" in lines[0] and "aggregation" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("args", [["threads", "4"], ["fork"]], ids=lambda a: a[0])
def test_static_counts_equal_strace(tmp_path, program, args):
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                    str(program), *args], check=True, capture_output=True, timeout=300)
    counted = strace_counts.check(log, run_dir)
    if args[0] == "threads":
        assert counted["exit_group"] == 1 and counted["clone3"] + counted["clone"] == 4
    else:
        # the child (musl forks with SYS_fork) has a record of its own: each
        # process its exit_group, echo's after its exec included
        assert counted["exit_group"] == 2 and len(load_run(run_dir)["processes"]) >= 2


def test_rewritten_static_file_is_self_contained(tmp_path, program):
    out = tmp_path / "out"
    ferry("instrument", "-q", program, "-o", out, check=True)
    m = json.loads((out / "manifest.json").read_text())
    assert m["static"] and sorted(p.name for p in out.iterdir()) == ["manifest.json", "static_mix"]
    headers = subprocess.run(["readelf", "-ld", str(out / "static_mix")], capture_output=True,
                             text=True, check=True).stdout
    assert "INTERP" not in headers and "NEEDED" not in headers
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = elsewhere / "prog"
    shutil.copy2(out / "static_mix", copy)
    shutil.rmtree(out)
    for args in (["threads", "5"], ["fork"], ["signal"], ["crash"]):
        native = subprocess.run(["env", "-i", str(program), *args], capture_output=True, timeout=60)
        moved = subprocess.run(["env", "-i", str(copy), *args], capture_output=True, timeout=60,
                               cwd=elsewhere)
        assert (moved.stdout, moved.stderr, moved.returncode) == \
            (native.stdout, native.stderr, native.returncode), args
    assert sorted(os.listdir(elsewhere)) == ["prog"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_outside_ferry_run_it_records_nothing(tmp_path, program):
    """Started by hand, with none of Ferry's settings: no file is created or
    written, and the program's own calls are what they are natively."""
    out = tmp_path / "out"
    ferry("instrument", "-q", program, "-o", out, check=True)
    log = tmp_path / "strace.log"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,open,creat,mkdir,mkdirat",
                        "-o", str(log), str(out / "static_mix"), "threads", "2"],
                       capture_output=True, env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and r.stdout == _native([str(program), "threads", "2"]).stdout
    writes = [line for line in log.read_text().splitlines()
              if "O_CREAT" in line or "O_WRONLY" in line or "O_RDWR" in line or "mkdir" in line]
    assert writes == []
    assert not (tmp_path / "home").exists()


def test_exec_hook_runs_a_static_child_rewritten(tmp_path, program):
    """A static program started by a dynamic one (sh) runs its image from the
    cache: the child is in the run, with its calls."""
    ferry("instrument", "-q", program, check=True)
    argv = ["sh", "-c", f"{program} threads 2; echo done"]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv)
    assert (under.stdout, under.returncode) == (native.stdout, native.returncode)
    procs = load_run(tmp_path / "run")["processes"]
    child = [p for p in procs if p.get("program") == "static_mix" or
             os.path.basename(p.get("exe") or "") == "static_mix"]
    assert child and child[0]["calls"] > 0, procs


def test_a_static_parent_runs_a_static_child_rewritten(tmp_path, program):
    """The static shim's own exec hook finds the child's image (looked up by
    the static shim's build id, not libferry.so's)."""
    child = tmp_path / "child"
    shutil.copy(program, child)
    ferry("instrument", "-q", child, check=True)
    argv = [str(program), "run", str(child)]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv)
    assert (under.stdout, under.returncode) == (native.stdout, native.returncode)
    procs = load_run(tmp_path / "run")["processes"]
    # the child is the same file as its parent (one image in the cache); the
    # image it ran is its last record
    (parent,) = [p for p in procs if p["ppid"] not in {q["pid"] for q in procs}]
    kid = [p for p in procs if p["ppid"] == parent["pid"]][-1]
    assert kid["state"] == "exited" and kid["enabled"] and kid["calls"] > 0, procs
    assert kid["image"] != str(child), procs


def test_ferry_cache_counts_static_images_as_current(tmp_path, program):
    """Static images carry the static shim: `ferry cache verify` must not
    call them made by another build."""
    env = ferry_env(FERRY_CACHE=tmp_path / "cache")
    ferry("instrument", "-q", program, env=env, check=True)
    r = ferry("cache", "verify", env=env)
    assert r.returncode == 0 and "all usable" in r.stdout, r.stdout + r.stderr


GO = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


@pytest.fixture(scope="module")
def go_program(tmp_path_factory):
    if GO is None:
        pytest.skip("go is not installed")
    tmp = tmp_path_factory.mktemp("go")
    out = tmp / "static_go"
    env = dict(os.environ, CGO_ENABLED="0", GOCACHE=str(tmp / "cache"), GOPATH=str(tmp / "path"),
               GOFLAGS="-mod=mod", GO111MODULE="off")
    subprocess.run([GO, "build", "-o", str(out), str(ROOT / "tests/programs/static_go.go")],
                   check=True, capture_output=True, env=env, timeout=300)
    return out


def _masked(stderr):
    """A Go panic's stderr with its addresses and goroutine ids left out."""
    return re.sub(rb"0x[0-9a-f]+|goroutine \d+", b"N", stderr)


@pytest.mark.parametrize("profile", ["trace", "count", "off"])
@pytest.mark.parametrize("args", [[], ["panic"]], ids=["plain", "panic"])
def test_go_static_program_behaves_as_natively(tmp_path, go_program, profile, args):
    argv = [str(go_program), *args]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv, profile)
    assert (under.stdout, _masked(under.stderr), under.returncode) == \
        (native.stdout, _masked(native.stderr), native.returncode)
    counted = {s["name"]: s["calls"] for s in load_run(tmp_path / "run")["syscalls"]}
    if profile != "off":
        assert counted["getppid"] == 64 * 2000
        assert counted.get("sigaltstack", 0) > 0  # every Go thread sets its own


def test_a_go_program_knows_its_own_executable(tmp_path, go_program):
    """os.Executable() names the program's file, not its image in the cache
    (tests/test_self_exe.py has the rest of what a program sees of itself)."""
    argv = [str(go_program), "exe"]
    native, under = _native(argv), _under_ferry(tmp_path / "run", argv)
    assert native.stdout == f"executable {go_program} <nil>\n".encode()
    assert (under.stdout, under.returncode) == (native.stdout, 0)


def test_go_fibers_refused(tmp_path, go_program):
    r = _under_ferry(tmp_path / "run", [str(go_program)], profile="fibers")
    assert r.returncode == 2 and len(r.stderr.decode().strip().splitlines()) == 1


def test_static_child_learned_after_the_run(tmp_path, program):
    """A static program exec'd during a run without a cached image runs
    without the shim, says so, and is rewritten after the run: the next run
    enables it, and names it as the file it exec'd, though the cache's
    image of those bytes was first made from another file (the image of a
    static program names itself by its place in the cache, whose name is
    the first file's)."""
    fresh = tmp_path / "fresh_static"
    shutil.copy2(program, fresh)
    first = tmp_path / "first_made"
    shutil.copy2(program, first)
    ferry("instrument", "-q", first, check=True)
    argv = ["sh", "-c", f"{fresh} threads 1"]
    native = _native(argv)

    def child(run):
        assert (run.stdout, run.returncode) == (native.stdout, native.returncode)
        procs = load_run(tmp_path / "run")["processes"]
        # found by the pid the shell's child exec'd it in: an image is named
        # as the file it was first made from, and other tests (other pytest
        # workers, sharing the cache) make the same bytes under other names
        # (static_mix, child): a run once found none by name
        (shell_child,) = [p for p in procs if p.get("exec") == str(fresh)]
        return [p for p in procs if p["pid"] == shell_child["pid"] and p is not shell_child][-1]

    unserved = child(_under_ferry(tmp_path / "run", argv))
    assert not unserved["enabled"]
    served = child(_under_ferry(tmp_path / "run", argv))
    assert served["enabled"] and served["calls"] > 0
    assert served["exe"] == str(fresh)
