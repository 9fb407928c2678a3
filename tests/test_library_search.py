"""ld.so finds a cached program's libraries at the first place it looks (issue 17).

A child run from the image cache gets its rewritten libraries from the
program directory (DT_RPATH $ORIGIN of a rewritten executable, or
LD_LIBRARY_PATH for a program run from its own file).  ld.so looks in that
directory's glibc-hwcaps/ and tls/ subdirectories before the directory
itself: when none exists, ~20 failed openat/stat calls in every process
before libc is found.  strace around `ferry run` counts them.
"""
import os
import re
import shutil
import subprocess

import pytest

from conftest import FERRY, ferry
from ferry.rewriter import cache

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def _failed_lookups_in_programs(tmp_path, program, args=""):
    """The failed openat/stat calls under the cache's program directories
    that the child `program` (started by a shell under ferry, with `args`)
    makes, and its successful openat calls there."""
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,newfstatat,stat,execve", "-o", str(log),
                    *FERRY, "run", "--no-learn", "-o", str(tmp_path / "run"), "--", "sh", "-c", f"{program} {args}; :"],
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


MAWK = "/usr/bin/mawk"   # Debian's required awk: libm and libc
MAPS = 'BEGIN { while ((getline l < "/proc/self/maps") > 0) if (l ~ /libm[.]so/) { print l; exit } }'


@pytest.mark.skipif(not shutil.which(MAWK), reason="mawk is not installed")
def test_a_library_left_as_it_is_is_found_first_try_too(tmp_path):
    # libm has no system calls and is not rewritten: ld.so searched the
    # program directory for it (two failed openat), and, being the first
    # library not there, every glibc-hwcaps and tls subdirectory too (~20)
    program = tmp_path / "prog"
    shutil.copy2(MAWK, program)
    ferry("instrument", program, check=True)
    failed, found = _failed_lookups_in_programs(tmp_path, program, "'BEGIN { print cos(0) }'")
    assert any("/libm.so.6" in line for line in found), found
    assert failed == [], "\n".join(failed)


@pytest.mark.skipif(not shutil.which(MAWK), reason="mawk is not installed")
def test_a_users_library_path_still_comes_first(tmp_path):
    # The program directory links the system's libm where ld.so looks
    # first; a user's own LD_LIBRARY_PATH must still win, as natively.
    program = tmp_path / "prog"
    shutil.copy2(MAWK, program)
    ferry("instrument", program, check=True)
    own = tmp_path / "own"
    own.mkdir()
    shutil.copy2("/lib/x86_64-linux-gnu/libm.so.6", own / "libm.so.6")
    env = dict(os.environ, LD_LIBRARY_PATH=str(own))
    argv = ["sh", "-c", f"{program} '{MAPS}'; :"]
    native = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    under = ferry("run", "--no-learn", "-o", tmp_path / "run", "--", *argv, env=env, check=True,
                  timeout=300)
    assert native.stdout.split()[-1] == str(own / "libm.so.6"), native.stdout
    assert under.stdout.split()[-1] == str(own / "libm.so.6"), under.stdout
