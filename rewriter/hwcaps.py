"""The glibc-hwcaps subdirectory ld.so looks in first.

ld.so searches each directory of a library search path (a program's
DT_RPATH $ORIGIN, LD_LIBRARY_PATH) in its glibc-hwcaps/<level> and legacy
tls/x86_64 subdirectories before the directory itself: for a program
directory that has none, ~20 failed openat/stat calls before libc is found,
in every process.  A program directory that also holds its libraries under
the subdirectory searched first on this machine is served on the first try.
"""
import subprocess
from functools import lru_cache


@lru_cache(maxsize=4)
def first_subdir(interpreter):
    """`glibc-hwcaps/<level>` that the loader `interpreter` searches first on
    this machine, or None (no such loader, or one older than glibc 2.33)."""
    try:
        out = subprocess.run([interpreter, "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    section = out.partition("Subdirectories of glibc-hwcaps directories")[2]
    for line in section.splitlines()[1:]:
        if not line.startswith("  "):
            break
        level, _, state = line.strip().partition(" ")
        if "searched" in state:
            return f"glibc-hwcaps/{level}"
    return None
