"""A run never looks empty silently: every process that ran without the shim
is in the run's process tree with the true reason, the same reason whether
it was the command itself (`ferry run` classifies it before launch) or a
child (the shim's exec hook classifies it at the exec), and the report's
first lines say so, in text and HTML."""
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ferry, ferry_env
from test_static_bad_input import no_room, upx_header

PYTHON = "/usr/bin/python3"
# a parent that is enabled: it runs each program given, one after the other
RUN_EACH = "import subprocess, sys\nfor p in sys.argv[1:]: subprocess.run([p])"


@pytest.fixture(scope="module")
def kinds(static_program, tmp_path_factory):
    """{kind: (program, words its reason has)} for every kind the shim cannot serve here
    (static programs it can: they carry it once rewritten, test_static_programs.py)."""
    d = tmp_path_factory.mktemp("unenabled")
    out = {}
    (d / "t32.s").write_text("_start: movl $1, %eax\n movl $7, %ebx\n int $0x80\n .globl _start\n")
    subprocess.run(["as", "--32", "-o", str(d / "t32.o"), str(d / "t32.s")], check=True)
    subprocess.run(["ld", "-m", "elf_i386", "-o", str(d / "elf32"), str(d / "t32.o")], check=True)
    out["elf32"] = (d / "elf32", "not a 64-bit ELF file")
    setuid = d / "setuid"
    shutil.copy(static_program("static_c-glibc"), setuid)
    setuid.chmod(0o4755)
    out["setuid"] = (setuid, "set-user-ID")
    if shutil.which("musl-gcc"):
        src = d / "hello.c"
        src.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
        subprocess.run(["musl-gcc", "-o", str(d / "musl"), str(src)], check=True)
        out["musl-dynamic"] = (d / "musl", "/lib/ld-musl-x86_64.so.1")
    return out


def _model(run_dir):
    return json.loads(ferry("report", "--json", run_dir, check=True).stdout)


def _unenabled(model, path):
    rows = [p for p in model["processes"] if p["exe"] == str(path)]
    assert len(rows) == 1, model["processes"]
    assert rows[0]["enabled"] is False
    return rows[0]["reason"]


@pytest.mark.parametrize("kind", ["elf32", "setuid", "musl-dynamic"])
def test_command_and_child_give_the_same_true_reason(kinds, tmp_path, kind):
    if kind not in kinds:
        pytest.skip("musl-gcc is not installed (apt-get install musl-tools)")
    path, words = kinds[kind]
    ferry("run", "-o", tmp_path / "top", "--", path)
    top = _unenabled(_model(tmp_path / "top"), path)
    ferry("run", "-o", tmp_path / "child", "--", PYTHON, "-c", RUN_EACH, path)
    child = _unenabled(_model(tmp_path / "child"), path)
    assert words in top and words in child, (top, child)


def test_packed_child_is_named(static_program, tmp_path):
    packed = tmp_path / "packed"
    packed.write_bytes(upx_header(static_program("go_runtime").read_bytes()))
    packed.chmod(0o755)
    ferry("run", "-o", tmp_path / "run", "--", PYTHON, "-c", RUN_EACH, packed)
    assert "packed with UPX" in _unenabled(_model(tmp_path / "run"), packed)


def test_an_environment_too_large_for_the_hook_is_the_reason(tmp_path):
    """The hook adds the run's settings to a child's environment in tables of
    its own; when they do not fit, the child runs without the shim, and the
    reason is that, not 'no rewritten image yet' (which the next run would
    not make true)."""
    code = ("import subprocess\n"
            "subprocess.run(['/usr/bin/true'], env={f'V{i}': 'x' for i in range(1100)}, check=True)")
    for attempt in ("first", "second"):     # the first run rewrites what ran without the shim
        ferry("run", "-o", tmp_path / attempt, "--", PYTHON, "-c", code, check=True)
    reason = _unenabled(_model(tmp_path / "second"), "/usr/bin/true")
    assert "environment" in reason and "rewritten image" not in reason


def _text_report(run_dir):
    return ferry("report", run_dir, env=ferry_env(COLUMNS="300"), check=True).stdout.splitlines()


def test_report_says_first_what_ran_without_the_shim(kinds, tmp_path):
    path = kinds["setuid"][0]
    ferry("run", "-o", tmp_path / "mixed", "--", PYTHON, "-c", RUN_EACH, path, check=True)
    lines = _text_report(tmp_path / "mixed")
    at = next(i for i, line in enumerate(lines) if line.startswith("exit 0 after"))
    assert "ran without the shim: set-user-ID" in lines[at + 1], lines[:at + 3]
    assert f"({path.name} " in lines[at + 1]
    html = tmp_path / "mixed.html"
    ferry("report", "--html", tmp_path / "mixed", "-o", html, check=True)
    page = html.read_text()
    assert page.index("ran without the shim") < page.index("<dl>")


def test_a_run_where_nothing_ran_with_the_shim_says_why_it_is_empty(kinds, tmp_path):
    path = kinds["setuid"][0]
    ferry("run", "-o", tmp_path / "run", "--", path, check=True)
    lines = _text_report(tmp_path / "run")
    assert lines[-1] == ("no system calls recorded: no process of this run ran with the shim "
                         "(the reasons are above)")
    assert any("ran without the shim: set-user-ID" in line for line in lines)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"),
                    reason="switching to another user needs root and runuser")
def test_a_program_the_process_may_run_but_not_read(static_program):
    """An execute-only file, run by a user who cannot read it."""
    top = Path(tempfile.mkdtemp(prefix="ferry-execonly-"))
    try:
        top.chmod(0o755)
        path = top / "execonly"
        shutil.copy(static_program("static_c-glibc"), path)
        path.chmod(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        ferry("run", "-o", top / "run", "--", "runuser", "-u", "nobody", "--", path, "child", "x", check=True)
        reason = _unenabled(_model(top / "run"), path)
        assert "could run the file but not read it" in reason
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_child_ferry_could_not_rewrite_after_the_run_says_why(static_program, tmp_path):
    """`ferry run` rewrites after the run what ran without the shim for want of
    an image; when that fails, the next run will not enable it either, and the
    report says why instead of leaving it at 'no rewritten image'."""
    path = tmp_path / "noroom"
    path.write_bytes(no_room(static_program("static_c-glibc").read_bytes()))
    path.chmod(0o755)
    ferry("run", "-o", tmp_path / "run", "--", PYTHON, "-c", RUN_EACH, path, check=True)
    reason = _unenabled(_model(tmp_path / "run"), path)
    assert "statically linked program without a rewritten image; rewriting it after the run " \
           "failed: its loadable segments reach 0x7fffffff0000" in reason
    ferry("run", "--no-learn", "-o", tmp_path / "unlearned", "--", PYTHON, "-c", RUN_EACH, path, check=True)
    assert "rewriting it after the run failed" not in _unenabled(_model(tmp_path / "unlearned"), path)


def test_ferry_run_says_at_once_that_its_command_ran_without_the_shim(kinds, tmp_path):
    path = kinds["setuid"][0]
    r = ferry("run", "-v", "-o", tmp_path / "run", "--", path, "child", "x",
              env=ferry_env(COLUMNS="300"), check=True)
    assert r.stdout == "child: [x]\n"
    assert f"ferry: {path} ran without the shim: set-user-ID" in r.stderr
