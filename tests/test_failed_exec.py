"""Execs that fail (each directory of a PATH search but the last) are part of
the process that tries them: one process entry per process image, every call
counted once, exactly as `strace -f` sees them; and a process killed right
after its exec is said to be so."""
import collections
import json
import re
import shutil
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY, PROGRAMS, ferry
from ferry.rundata import load_run

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")

PYTHON = "/usr/bin/python3"
SEARCH = "/no1:/no2:/no3:/usr/bin"
LINE = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
RESULT = re.compile(r"= (-?\d+)")
VFORK = re.compile(r"^(vfork\(|clone3?\(.*CLONE_VFORK)")

WORKLOADS = {
    # glibc's posix_spawnp: a vfork child tries each directory in turn
    "posix_spawnp": [PYTHON, "-c",
                     "import os\n"
                     f"os.environ['PATH'] = '{SEARCH}'\n"
                     "for _ in range(2):\n"
                     "    pid = os.posix_spawnp('true', ['true'], os.environ)\n"
                     "    os.waitpid(pid, 0)\n"],
    # the same, to a program the cache has a rewritten image of: the exec hook runs that
    "posix_spawnp-rewritten": [PYTHON, "-c",
                               "import os\n"
                               f"os.environ['PATH'] = '{SEARCH}'\n"
                               "pid = os.posix_spawnp('python3', ['python3', '-c', 'pass'], os.environ)\n"
                               "os.waitpid(pid, 0)\n"],
    # os.execvp's own search, in the process itself, ending in a rewritten image
    "execvp-rewritten": [PYTHON, "-c",
                         "import os\n"
                         f"os.environ['PATH'] = '{SEARCH}'\n"
                         "os.execvp('python3', ['python3', '-c', 'pass'])\n"],
    # the shell's own search in the child it forked, then env's execvp
    "sh": ["sh", "-c", f"PATH={SEARCH}; env true; env true"],
}


def _calls(log):
    """(pid, name, the line that started the call, its result or None), once
    per call, in each process's order; a call strace split around another
    process's lines is put back together."""
    pending = {}
    for line in log:
        m = LINE.match(line)
        if not m:
            continue
        pid = int(m.group(1))
        if m.group(2):
            start = pending.pop(pid, None)
            if start is None:
                continue
            name, rest = m.group(2), m.group(3)
        else:
            name, start, rest = m.group(4), line, m.group(5)
            if "<unfinished ...>" in rest:
                pending[pid] = (name, line)
                continue
        if isinstance(start, tuple):
            start = start[1]
        result = RESULT.search(rest.rsplit(")", 1)[-1])
        yield pid, name, start, int(result.group(1)) if result else None
    for pid, (name, start) in pending.items():  # calls that never returned
        yield pid, name, start, None


def _strace_counts(log, run_dir, root):
    """strace's count of each syscall over the program's processes, from the
    moment the shim is up in each image: a process image's shim starts when it
    has created its process file; a vfork child counts with its own (spare)
    block from its first call.  A successful exec ends the counting until the
    new image's shim starts."""
    marker = re.compile(rf'openat\(AT_FDCWD, "{re.escape(str(run_dir))}/proc/(?:u)?\d+-\d+\.ferry"')
    calls = list(_calls(log))
    family, vforked = {root}, set()
    for pid, name, start, value in calls:
        if name in ("clone", "clone3", "fork", "vfork") and value and value > 0 and pid in family:
            family.add(value)
            if VFORK.match(start.split(None, 1)[1]):
                vforked.add(value)
    counting = set(vforked)
    counts = collections.Counter()
    for pid, name, start, value in calls:
        if pid not in family:
            continue
        if pid in counting:
            counts[name] += 1
        elif marker.search(start) and value is not None and value >= 0:
            counting.add(pid)
        if name in ("execve", "execveat") and value == 0:
            counting.discard(pid)
    return counts, family


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_a_path_search_is_counted_once_per_call(tmp_path, workload):
    argv = WORKLOADS[workload]
    for attempt in ("learn", "measure"):  # the first run rewrites what ran without the shim
        run_dir = tmp_path / attempt
        log = tmp_path / f"{attempt}.strace"
        subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                        *argv], check=True, capture_output=True, timeout=300)
    model = load_run(run_dir)
    root = json.loads((run_dir / "info.json").read_text())["pid"]
    seen, pids = _strace_counts(log.read_text().splitlines(), run_dir, root)
    counted = collections.Counter({s["name"]: s["calls"] for s in model["syscalls"]})
    counted.update(model["shim_calls"])
    assert seen["execve"] >= 4  # the failed tries were made, and strace saw them
    assert seen == counted, {n: (seen[n], counted[n]) for n in set(seen) | set(counted)
                             if seen[n] != counted[n]}
    # One entry per process image: each process once, plus once per exec that succeeded.
    rows = collections.Counter(p["pid"] for p in model["processes"])
    execs = collections.Counter(p["pid"] for p in model["processes"] if p["state"] == "exec")
    assert set(rows) == pids
    assert all(rows[pid] == 1 + execs[pid] for pid in rows), (rows, execs)
    assert all(p["enabled"] for p in model["processes"]), [p["reason"] for p in model["processes"]]


def _child_run(tmp_path, profile, program, says):
    """The model of `ferry run -p profile PROGRAM /bin/true`, which printed
    `says` of how its child ended."""
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", profile, "-o", run_dir, "--", PROGRAMS / program, "/bin/true", timeout=120)
    assert r.returncode == 0, r.stderr
    assert says in r.stdout
    return load_run(run_dir)


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_child_killed_right_after_its_exec_is_said_to_be(tmp_path, profile):
    model = _child_run(tmp_path, profile, "exec_killed", "child: signal 9")
    child = [p for p in model["processes"] if p["exe"] == "/bin/true"]
    assert len(child) == 1 and not child[0]["enabled"], model["processes"]
    assert child[0]["state"] == "killed" and child[0]["exit"]["signal"] == "SIGKILL"
    assert child[0]["reason"].startswith("killed by SIGKILL right after its exec"), child[0]["reason"]


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_vfork_childs_exec_of_a_file_the_hook_saw_missing_is_still_recorded(tmp_path, profile):
    # A vfork child's exec of a missing file writes no record first (a PATH
    # search makes one per directory); when the file is there after all, the
    # parent writes the child's record.  The child's filter hides every file
    # from the hook's stat, not from the kernel's exec.
    model = _child_run(tmp_path, profile, "exec_unseen", "child: exit 0")
    root = model["info"]["pid"]
    child = [p for p in model["processes"] if p["ppid"] == root and p["exe"].endswith("exec_unseen")]
    assert len(child) == 1, model["processes"]
    assert child[0]["state"] == "exec" and child[0]["exec"] == "/bin/true", child[0]
    # two prctl (the filter), the failed execve, the one that ran /bin/true;
    # mode off counts nothing
    assert child[0]["enabled"] and child[0]["calls"] == (0 if profile == "off" else 4), child[0]
    image = [p for p in model["processes"] if p["pid"] == child[0]["pid"] and p["exe"] == "/bin/true"]
    assert len(image) == 1 and image[0]["state"] == "exited", model["processes"]
