"""ld.so finds a cached program's libraries at the first place it looks (issue 17).

A child run from the image cache gets its rewritten libraries from the
program directory (DT_RPATH $ORIGIN of a rewritten executable, or
LD_LIBRARY_PATH for a program run from its own file).  ld.so looks in that
directory's glibc-hwcaps/ and tls/ subdirectories before the directory
itself: when none exists, ~20 failed openat/stat calls in every process
before libc is found.  strace around `ferry run` counts them.
"""
import re
import shutil
import subprocess

import pytest

from conftest import FERRY, ferry
from ferry.rewriter import cache

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def _failed_lookups_in_programs(tmp_path, program):
    """The failed openat/stat calls under the cache's program directories
    that the child `program` (started by a shell under ferry) makes, and its
    successful openat calls there."""
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,newfstatat,stat,execve", "-o", str(log),
                    *FERRY, "run", "--no-learn", "-o", str(tmp_path / "run"), "--", "sh", "-c", f"{program}; :"],
                   check=True, timeout=300, capture_output=True)
    programs = str(cache.root() / "programs")
    failed, found, child = [], [], set()
    for line in log.read_text().splitlines():
        pid, _, call = line.partition(" ")
        m = re.search(r'"([^"]*)"', call)
        if not m:
            continue
        if call.lstrip().startswith("execve("):
            # the program itself, or the exec hook's link to its image
            if m.group(1) == str(program) or m.group(1).startswith(str(cache.root() / "exec")):
                child.add(pid)
        elif pid in child and m.group(1).startswith(programs):
            (failed if "ENOENT" in call else found).append(line)
    return failed, found


@pytest.mark.parametrize("which", ["own file", "rewritten image"])
def test_cached_libraries_are_found_first_try(tmp_path, test_programs, which):
    # `true` has no call sites of its own: it runs from its own file with its
    # rewritten libc from the program directory; inline_syscalls has sites in
    # its own code, so the rewritten executable runs
    source = "/bin/true" if which == "own file" else test_programs / "inline_syscalls"
    program = tmp_path / "prog"
    shutil.copy2(source, program)
    ferry("instrument", program, check=True)
    failed, found = _failed_lookups_in_programs(tmp_path, program)
    assert any("/libc.so.6" in line for line in found), found   # the rewritten libc
    assert failed == [], "\n".join(failed)
