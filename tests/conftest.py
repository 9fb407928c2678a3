"""Shared fixtures: the ferry CLI (ferry()), instrumenting real programs, the shim's
counts (recording_env, read_stats).

Every test session uses its own image cache and run index (FERRY_CACHE and FERRY_DATA
in temporary directories), so tests never depend on, or pollute, the user's.  Programs
are instrumented once per session and shared between tests.
"""
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Wine for the PE tests: one prefix and one wineserver for the whole session
# (a fixture imported into each module would make one per module).
from winenv import wine, win_programs  # noqa: E402,F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs" / "build"
FERRY = [str(Path(sys.executable).parent / "ferry")]
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(scope="session", autouse=True)
def ferry_places(tmp_path_factory):
    """The session's image cache and run index: never the user's."""
    places = {"FERRY_CACHE": tmp_path_factory.mktemp("ferry-cache"),
              "FERRY_DATA": tmp_path_factory.mktemp("ferry-data")}
    old = {k: os.environ.get(k) for k in places}
    os.environ.update({k: str(v) for k, v in places.items()})
    yield places
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def own_index(tmp_path, monkeypatch):
    """A run index of the test's own (FERRY_DATA), for tests that read `ferry runs`
    or count what a run added to it."""
    monkeypatch.setenv("FERRY_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def ferry_env(**changes):
    """The environment ferry() gives the command by default: this process's, without
    COLUMNS (a text report then has the width it has when redirected), with `changes`."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update({k: str(v) for k, v in changes.items()})
    return env


def ferry(*args, check=False, env=None, timeout=300, text=True, **kw):
    """Run the `ferry` command line with `args`; its CompletedProcess, output captured
    (as text unless text=False).  env: the whole environment (default ferry_env());
    check: fail with the command's output unless it exits 0.  Other keywords go to
    subprocess.run (cwd, input, stdin)."""
    r = subprocess.run(FERRY + [str(a) for a in args], capture_output=True, text=text,
                       timeout=timeout, env=ferry_env() if env is None else env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"ferry {' '.join(map(str, args))} failed ({r.returncode}):\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def write_profile(directory, text, name="p.toml"):
    """A profile (or any file) `name` in `directory` holding `text`; its path."""
    path = directory / name
    path.write_text(text)
    return path


class Instrumented:
    """A program rewritten by `ferry instrument` into its own directory."""

    def __init__(self, original, out_dir):
        self.original = Path(original)
        self.out_dir = Path(out_dir)
        self.manifest = json.loads((self.out_dir / "manifest.json").read_text())
        self.path = self.out_dir / self.manifest["entry"]


@pytest.fixture(scope="session")
def instrument(tmp_path_factory):
    """instrument(program) -> Instrumented; each program is rewritten once."""
    done = {}

    def _instrument(program):
        program = shutil.which(str(program)) or str(program)
        program = os.path.realpath(program)
        if program not in done:
            out = tmp_path_factory.mktemp("instrumented") / Path(program).name
            ferry("instrument", program, "-o", out, check=True)
            done[program] = Instrumented(program, out)
        return done[program]

    return _instrument


def waits_in(pid, nr, first=None):
    """Whether process `pid` is blocked in system call `nr` (with `first` as its
    first argument, when given), as /proc/PID/syscall says: how a test knows a
    process it started is past its start (the shim's constructor included)
    and waiting, rather than guessing with a sleep."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return fields[:1] == [str(nr)] and (first is None or fields[1:2] == [hex(first)])


def proc_records(run_dir):
    """(file, offset, name in messages) of each process record of a run (slots
    of shared files, or files of their own), in the order of the run model's
    processes."""
    from ferry import procfile
    return [(r.file, r.offset, str(r.path)) for r in procfile.read_dir(Path(run_dir) / "proc")]


def read_record(rec, size=None):
    """The first `size` bytes of a record (its header by default)."""
    from ferry import procfile
    size = procfile.HEADER_SIZE if size is None else size
    path, offset, _ = rec
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def evict(path):
    """`path`'s pages out of the page cache (written back first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def pages_with_data(path, start, end):
    """The pages (file offset // 4096) of [start, end) of the sparse file at
    `path` that hold data."""
    from ferry.base.sparse import data_extents
    with open(path, "rb") as f:
        return {p for first, stop in data_extents(f.fileno(), start, end)
                for p in range(first // 4096, -(-stop // 4096))}


def write_record(rec, at, data):
    """`data` into a record at offset `at` of it."""
    path, offset, _ = rec
    with open(path, "r+b") as f:
        f.seek(offset + at)
        f.write(data)


def recording_env(env, run_dir):
    """`env` with the shim recording into the run directory `run_dir` (its proc/
    made), as `ferry run` has it record: read back with read_stats."""
    (Path(run_dir) / "proc").mkdir(parents=True, exist_ok=True)
    return dict(env, FERRY_RUN_DIR=str(run_dir))


def read_stats(run_dir):
    """{pid: counts} of the processes that ran the shim with FERRY_RUN_DIR=run_dir
    and ended through it (exit_group): pid, ppid, exe, modules (rewritten modules
    enabled), invalid, and calls {syscall number: count} summed over threads."""
    from ferry import procfile
    stats = {}
    for rec in procfile.read_dir(Path(run_dir) / "proc"):
        if rec.state != procfile.STATE_EXITED:
            continue
        calls = {}
        for b in rec.blocks:
            for nr, n in enumerate(b.calls):
                if n:
                    calls[nr] = calls.get(nr, 0) + n
        stats[rec.pid] = {"pid": rec.pid, "ppid": rec.ppid, "exe": rec.exe,
                          "modules": len(rec.modules), "invalid": sum(b.invalid for b in rec.blocks),
                          "calls": calls}
    return stats


def calls_of(stats, name):
    """Total calls of syscall `name` over all processes in `stats`."""
    from ferry.base.syscall_table import NUMBERS
    return sum(s["calls"].get(NUMBERS[name], 0) for s in stats.values())


def make(directory, *targets, timeout=300, **variables):
    """`make -s -C directory targets... NAME=value...`, failing the test with make's
    output if it fails.  Under pytest-xdist every worker builds what its tests
    need: the Makefile is held locked (flock) while make runs, so that two
    workers never build the same files at once (the second then finds them
    made)."""
    args = ["make", "-s", "-C", str(directory), *targets, *(f"{k}={v}" for k, v in variables.items())]
    with open(Path(directory) / "Makefile", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")


@pytest.fixture(scope="session")
def fibers2_profile(tmp_path_factory):
    """profiles/fibers.toml with `carriers = 2`, as fibers2.toml in a directory of its own."""
    shipped = ROOT / "profiles" / "fibers.toml"
    text, n = re.subn(r"(?m)^carriers\s*=\s*\d+", "carriers = 2", shipped.read_text())
    assert n == 1, f"{shipped} has no single `carriers = N` line to change"
    path = tmp_path_factory.mktemp("profiles") / "fibers2.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="session")
def test_programs():
    """tests/programs/build, built (`make -C tests/programs`) if needed."""
    make(PROGRAMS.parent)
    return PROGRAMS

STATIC_SRC = ROOT / "tests" / "programs" / "static"
# static test program -> the target of tests/programs/static/Makefile that builds it
STATIC_TARGETS = {"go_http": "go", "go_runtime": "go", "static_c-musl": "musl",
                  "static_c-glibc": "glibc", "static_c-glibc-pie": "glibc",
                  "go_http-cgo": "cgo", "go_runtime-cgo": "cgo", "go_calls": "go", "go_calls-cgo": "cgo"}


def go_command():
    """Go's `go`: the one on PATH, else Debian's golang-go (not on PATH by default)."""
    for path in (shutil.which("go"), "/usr/lib/go/bin/go", "/usr/local/go/bin/go"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def _missing_toolchain(target):
    """Why `target` cannot be built here (what CI installs: tools/sysdeps.sh), or None."""
    if target in ("go", "cgo"):
        return None if go_command() else "no Go toolchain (apt-get install golang-go)"
    if target == "musl":
        return None if shutil.which("musl-gcc") else "no musl-gcc (apt-get install musl-tools)"
    libc_a = subprocess.run(["gcc", "-print-file-name=libc.a"], capture_output=True, text=True)
    if not os.path.isabs(libc_a.stdout.strip()):
        return "no static glibc (libc.a; apt-get install libc6-dev)"
    return None


@pytest.fixture(scope="session")
def static_program():
    """static_program(name) -> the path of a static test program of
    tests/programs/static (a key of STATIC_TARGETS), built on first use; the
    test is skipped, with the reason, when its toolchain is missing."""
    built = {}

    def _get(name):
        target = STATIC_TARGETS[name]
        if target not in built:
            missing = _missing_toolchain(target)
            if missing is None:
                make(STATIC_SRC, target, timeout=600, GO=go_command() or "go")
            built[target] = missing
        if built[target]:
            pytest.skip(built[target])
        return STATIC_SRC / "build" / name

    return _get


# Every built-in profile: a behaviour that must not depend on the profile is
# checked under each.
ALL_PROFILES = ["trace", "count", "off", "aggregate", "fibers"]

# Markers by test file, or by file::test-name prefix: one table for the whole suite
# (markers declared in setup.cfg; `make test-fast` runs what has none of them).
MARKS = {
    "test_gui.py": ("gui",),
    "test_gui_charts.py": ("gui",),
    "test_gui_pe.py": ("gui",),
    "test_net_server.py": ("net",),
    "test_static_native.py::test_go_http": ("net",),
    "test_attach.py::test_attached_http_server": ("net",),
    "test_fibers.py::test_net_server": ("net",),
    "test_fibers.py::test_apache_worker": ("net",),
    "test_non_root.py": ("root",),
    "test_privilege_drop.py": ("root",),
    "test_unenabled_reasons.py::test_a_program_the_process_may_run_but_not_read": ("root",),
    # more than a few seconds each, or many runs of large programs
    "test_static_programs.py": ("slow",),
    "test_static_go_acceptance.py": ("slow",),
    "test_static_native.py": ("slow",),
    "test_vfork_parent_counts.py": ("slow",),
    "test_restarted_calls_counted_once.py": ("slow",),
    "test_cache_shim_identity.py": ("slow",),
    "test_library_search.py": ("slow",),
    "test_fibers_never_hang.py": ("slow",),
    "test_bad_input.py": ("slow",),
    "test_report_aggregate.py": ("slow",),
    "test_fibers.py": ("slow",),
    "test_cache_command.py": ("slow",),
    "test_children_enabled.py": ("slow",),
    "test_run_supervision.py": ("slow",),
    "test_package.py": ("slow",),
    "test_instrument_progress.py": ("slow",),
    "test_failed_exec.py": ("slow",),
    "test_libc_coverage.py": ("slow",),
    "test_run_matches_strace.py": ("slow",),
    "test_packed_segments.py": ("slow",),
    "test_refused_programs.py": ("slow",),
    # Windows programs under wine: a prefix to boot, a second or so each
    "test_pe_run.py": ("slow",),
    "test_pe_instrument.py": ("slow",),
    "test_pe_late_load.py": ("slow",),
    "test_pe_from_linux.py": ("slow",),
    "test_pe_report.py": ("slow",),
    "test_pe_wine.py": ("slow",),
    "test_pe_sites.py": ("slow",),
    "test_process_records.py::test_a_full_file_goes_on_in_the_next": ("slow",),
    "test_engine_calls_recorded.py": ("slow",),
    "test_original_context.py": ("slow",),
    "test_process_files.py": ("slow",),
    "test_programs_behave_identically.py::test_python_script_output_identical": ("slow",),
    "test_programs_behave_identically.py::test_sigrestart": ("slow",),
    "test_report.py::test_html": ("slow",),
    "test_run_model_schema.py::test_html": ("slow",),
    # property tests: hundreds of examples each
    "test_profiles.py::test_to_toml_loads_back_equal": ("slow",),
    "test_profiles.py::test_any_value_of_any_key": ("slow",),
    "test_profile_aggregate.py::test_to_toml_loads_back_equal": ("slow",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = f"{item.path.name}::{item.name}"
        for key, marks in MARKS.items():
            if where == key or where.startswith(key if "::" in key else key + "::"):
                for mark in marks:
                    item.add_marker(mark)
