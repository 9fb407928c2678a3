"""The injector: every dynamic child of a run is enabled and its calls are
counted, whatever way it was started, once `ferry run` has rewritten the
programs it saw (the first run learns them, as DIGITAL FX!32 translated after
a first run).  Ground truth: `strace -f -e trace=process` on the second run.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import FERRY, ROOT, ferry
from ferry.rundata import load_run

CHILDREN = ROOT / "tests" / "programs" / "build" / "children"
pytestmark = [pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed"),
              pytest.mark.usefixtures("own_index")]


def _ground_truth(log, root):
    """{pid: [programs it exec'd successfully]} for the run's process tree.
    The tree is made first, then its execs are read: a vfork child's exec
    often comes before the line where its parent's vfork returns its pid."""
    calls, pending = [], {}
    for line in log.splitlines():
        m = re.match(r"^(\d+) +(\w+)\((.*) <unfinished \.\.\.>$", line)
        if m:
            pending[(int(m.group(1)), m.group(2))] = m.group(3)
            continue
        m = re.match(r"^(\d+) +<\.\.\. (\w+) resumed>.*\) += (-?\d+)", line)
        if m:
            pid, call, result = int(m.group(1)), m.group(2), int(m.group(3))
            args = pending.pop((pid, call), "")
        else:
            m = re.match(r"^(\d+) +(\w+)\((.*)\) += (-?\d+)", line)
            if not m:
                continue
            pid, call, args, result = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
        calls.append((pid, call, args, result))
    children = {}
    for pid, call, _, result in calls:
        if call in ("clone", "clone3", "fork", "vfork") and result > 0:
            children.setdefault(pid, []).append(result)
    pids, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in pids:
            pids.add(pid)
            todo.extend(children.get(pid, []))
    execs = {}
    for pid, call, args, result in calls:
        if pid in pids and call in ("execve", "execveat") and result == 0:
            path = re.search(r'"([^"]*)"', args)
            execs.setdefault(pid, []).append(path.group(1) if path else "?")
    return pids, execs


def _learn(tmp_path, argv, cwd=None):
    """Run until a run rewrites nothing new (each run enables one more level
    of the process tree); returns the last learning run."""
    for _ in range(4):
        first = ferry("run", "--verbose", "-o", tmp_path / "first", "--", *argv, cwd=cwd, timeout=600,
                      text=False)
        if b"that ran without the shim" not in first.stderr:
            return first
    raise AssertionError(f"still learning after 4 runs: {first.stderr}")


def _run_twice(tmp_path, argv, cwd=None):
    """Learn, then run again under strace; returns (model, pids, execs, learning run, traced run)."""
    first = _learn(tmp_path, argv, cwd)
    log = tmp_path / "strace.log"
    second = subprocess.run(["strace", "-f", "-qq", "-e", "trace=process", "-o", str(log),
                             *FERRY, "run", "--no-learn", "-o", str(tmp_path / "second"), "--", *argv],
                            cwd=cwd, capture_output=True, timeout=300)
    model = load_run(tmp_path / "second")
    pids, execs = _ground_truth(log.read_text(), model["info"]["pid"])
    return model, pids, execs, first, second


def _assert_all_enabled(model, pids, execs, except_programs=()):
    by_pid = {}
    for p in model["processes"]:
        by_pid.setdefault(p["pid"], []).append(p)
    for pid in pids:
        images = by_pid.get(pid, [])
        programs = execs.get(pid, [])
        if programs and os.path.realpath(programs[-1]) in except_programs:
            continue
        assert images, f"pid {pid} ({programs}) is missing from the run"
        last = images[-1]
        assert last["enabled"], f"pid {pid} ran {programs} without the shim: {last['reason']}"
        assert last["calls"] > 0
    return by_pid


CASES = {
    "sh-pipeline": ["sh", "-c", "ls / | sort | head -3; echo $((1 + 2)) | cat"],
    "env-i": ["sh", "-c", "env -i /bin/ls -d / && echo done"],
    "posix-spawn-envp": [str(CHILDREN), "spawn-envp"],
    "vfork-exec": [str(CHILDREN), "vfork"],
    "system": [str(CHILDREN), "system"],
    "double-fork-daemon": [str(CHILDREN), "daemon"],
    "fexecve": [str(CHILDREN), "fexecve"],
    "execveat": [str(CHILDREN), "execveat"],
    "python-subprocess-empty-env": ["/usr/bin/python3.11", "-c",
                                    "import subprocess; subprocess.run(['/bin/echo', 'hi'], env={}, "
                                    "close_fds=True, check=True)"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_child_is_enabled_and_counted(tmp_path, case):
    model, pids, execs, first, second = _run_twice(tmp_path, CASES[case])
    assert second.returncode == first.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert b"ferry" not in second.stderr  # the program's stderr is its own
    assert len(pids) >= 2
    _assert_all_enabled(model, pids, execs)


def test_script_with_a_shebang_runs_its_rewritten_interpreter(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho script ran\nls -d /\n")
    script.chmod(0o755)
    model, pids, execs, _, second = _run_twice(tmp_path, ["sh", "-c", f"{script} arg"])
    assert second.stdout == b"script ran\n/\n"
    _assert_all_enabled(model, pids, execs)
    # The script's process ran the rewritten interpreter with the kernel's #! argv.
    runs_script = [p for p in model["processes"] if p["argv"] == ["/bin/sh", str(script), "arg"]]
    assert runs_script and runs_script[0]["enabled"] and runs_script[0]["calls"] > 0


def test_setuid_child_is_reported_not_enabled_with_the_reason(tmp_path):
    mount = "/usr/bin/mount"
    if not os.path.exists(mount) or not os.stat(mount).st_mode & 0o4000:
        pytest.skip("no setuid mount here")
    model, pids, execs, _, second = _run_twice(tmp_path, ["sh", "-c", f"{mount} --version >/dev/null"])
    assert second.returncode == 0
    _assert_all_enabled(model, pids, execs, except_programs={mount})
    entries = [p for p in model["processes"] if p["exe"] == mount]
    assert entries and not entries[-1]["enabled"] and "set-user-ID" in entries[-1]["reason"]


def test_make_build_with_gcc_is_enabled_throughout_and_builds_the_same(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    for name, body in {"a.c": "int a(void) { return 1; }\n", "b.c": "int b(void) { return 2; }\n",
                       "main.c": '#include <stdio.h>\nint a(void); int b(void);\n'
                                 'int main(void) { printf("%d\\n", a() + b()); return 0; }\n'}.items():
        (proj / name).write_text(body)
    (proj / "Makefile").write_text("prog: a.o b.o main.o\n\tgcc -o $@ $^\n%.o: %.c\n\tgcc -O2 -c -o $@ $<\n"
                                   "clean:\n\trm -f *.o prog\n")
    subprocess.run(["make", "-s", "-j2"], cwd=proj, check=True, capture_output=True)
    native = (proj / "prog").read_bytes()
    for _ in range(4):
        subprocess.run(["make", "-s", "clean"], cwd=proj, check=True)
        first = ferry("run", "--verbose", "-o", tmp_path / "first", "--", "make", "-s", "-j2", cwd=proj,
                      timeout=600, text=False)
        assert first.returncode == 0, first.stderr
        if b"that ran without the shim" not in first.stderr:
            break
    subprocess.run(["make", "-s", "clean"], cwd=proj, check=True)
    log = tmp_path / "strace.log"
    second = subprocess.run(["strace", "-f", "-qq", "-e", "trace=process", "-o", str(log), *FERRY, "run",
                             "--no-learn", "-o", str(tmp_path / "second"), "--", "make", "-s", "-j2"],
                            cwd=proj, capture_output=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert (proj / "prog").read_bytes() == native
    model = load_run(tmp_path / "second")
    pids, execs = _ground_truth(log.read_text(), model["info"]["pid"])
    _assert_all_enabled(model, pids, execs)
    ran = {os.path.basename(p["exe"]) for p in model["processes"] if p["enabled"]}
    # Programs preloaded show their real file (gcc is x86_64-linux-gnu-gcc-12).
    for tool in ("gcc", "cc1", "-as", "collect2", "ld"):
        assert any(tool in name for name in ran), (tool, ran)


def test_first_run_enables_children_by_load_time_patching(tmp_path, monkeypatch):
    # A fresh image cache: only the command itself gets rewritten (and libc's
    # patch plan made with it); every child is a program nobody rewrote, run
    # with the shim preloaded, which patches libc in memory from the plan.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    argv = ["sh", "-c", "ls / | head -2; env -i /bin/ls -d / ; cat /dev/null"]
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=process", "-o", str(log), *FERRY, "run",
                        "--no-learn", "-o", str(tmp_path / "run"), "--", *argv],
                       capture_output=True, timeout=300)
    assert r.returncode == 0 and r.stdout.endswith(b"/\n")
    model = load_run(tmp_path / "run")
    pids, execs = _ground_truth(log.read_text(), model["info"]["pid"])
    by_pid = _assert_all_enabled(model, pids, execs)
    patched = {os.path.basename(p["exe"]) for p in model["processes"] if p.get("enabled_by") == "load-time patch"}
    assert {"ls", "head", "env", "cat"} <= patched, patched
    assert len(by_pid) >= 5


def test_module_loaded_with_dlopen_is_patched_when_it_appears(tmp_path, monkeypatch):
    # The shim hooks ld.so's _dl_debug_state and patches a module loaded
    # later from its plan, before anything in it runs.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    lib = ROOT / "tests" / "programs" / "build" / "libsite.so"
    ferry("instrument", lib, check=True, text=False)  # makes its plan
    r = ferry("run", "--no-learn", "-o", tmp_path / "run", "--",
              ROOT / "tests" / "programs" / "build" / "dlopen_main", lib, "77", timeout=120, text=False)
    assert r.returncode == 0 and b"77 of 77" in r.stdout
    model = load_run(tmp_path / "run")
    site = next(s for s in model["sites"] if s["module"] == "libsite.so")
    assert (site["calls"], site["name"], site["function"]) == (77, "getppid", "site_getppid")
