"""The DT_NEEDED closure of a program, resolved the way ld.so resolves it.

$ORIGIN is the directory of the executable's real path (ld.so reads
/proc/self/exe, so a program started through a symlink, as /usr/bin/java,
finds its libraries beside the file the link leads to), and of a library's
path as found, symlinks kept (ld.so does not resolve them for libraries).
For each needed name, in order: a name with a slash is a path ($ORIGIN
expanded); otherwise DT_RPATH of the requesting object and of the executable
(ignored when the requester has DT_RUNPATH), LD_LIBRARY_PATH, the requester's
DT_RUNPATH, the ld.so cache, then the default directories.  A candidate of the
wrong class or machine is skipped, as ld.so skips it.  Modules are visited
breadth first, the order in which ld.so maps them.
"""
import os
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import lief

from .elfload import header_problem
from ..base.errors import InputError

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                "/lib", "/usr/lib")


@dataclass
class Module:
    name: str                 # as named in DT_NEEDED (or the file name of the program)
    path: Path                # the file ld.so would load
    role: str                 # "executable", "shared-object", "library", "interpreter"
    needed_by: list = field(default_factory=list)
    origin_path: bool = False  # its DT_RPATH or DT_RUNPATH names $ORIGIN


@lru_cache(maxsize=1)
def _ld_cache():
    """soname -> path for x86-64 entries of the ld.so cache."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20,
                             env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        try:
            out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True,
                                 timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    cache = {}
    for line in out.splitlines():
        line = line.strip()
        if "=>" not in line or "x86-64" not in line:
            continue
        left, path = line.split("=>", 1)
        name = left.split(" (", 1)[0].strip()
        cache.setdefault(name, path.strip())
    return cache


def _usable(path):
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return len(head) == 64 and head[:4] == b"\x7fELF" and head[4] == 2 and head[18] == 62


def _dynamic(binary, tag):
    entry = binary.get(tag)
    if entry is None:
        return []
    value = entry.runpath if tag == lief.ELF.DynamicEntry.TAG.RUNPATH else entry.rpath
    return [p for p in value.split(":") if p]


def _expand(path, origin):
    return path.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) \
        .replace("${LIB}", "lib/x86_64-linux-gnu").replace("$LIB", "lib/x86_64-linux-gnu") \
        .replace("${PLATFORM}", "x86_64").replace("$PLATFORM", "x86_64")


def origin_of(path, executable):
    """What $ORIGIN stands for in the object at `path`."""
    return os.path.dirname(os.path.realpath(path) if executable else os.path.abspath(path))


def find_library(name, origin, requester_binary, exe_binary, exe_origin):
    """Path of the library `name` needed by an object whose $ORIGIN is
    `origin`, or None."""
    if "/" in name:
        p = _expand(name, origin)
        return Path(p) if _usable(p) else None
    TAG = lief.ELF.DynamicEntry.TAG
    dirs = []
    if not _dynamic(requester_binary, TAG.RUNPATH):
        dirs += [_expand(d, origin) for d in _dynamic(requester_binary, TAG.RPATH)]
        if exe_binary is not None and exe_binary is not requester_binary \
                and not _dynamic(exe_binary, TAG.RUNPATH):
            dirs += [_expand(d, exe_origin) for d in _dynamic(exe_binary, TAG.RPATH)]
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [_expand(d, origin) for d in _dynamic(requester_binary, TAG.RUNPATH)]
    for d in dirs:
        p = os.path.join(d, name)
        if _usable(p):
            return Path(p)
    return system_library(name)


def system_library(name):
    """Where ld.so finds the library `name` when nothing but the system says
    where to look (no DT_RPATH, DT_RUNPATH or LD_LIBRARY_PATH): the ld.so
    cache, then the default directories; None if nowhere."""
    cached = _ld_cache().get(name)
    if cached and _usable(cached):
        return Path(cached)
    for d in DEFAULT_DIRS:
        p = os.path.join(d, name)
        if _usable(p):
            return Path(p)
    return None


def _origin_path(binary):
    """Whether `binary` searches for libraries relative to its own place."""
    TAG = lief.ELF.DynamicEntry.TAG
    return binary is not None and any("$ORIGIN" in d or "${ORIGIN}" in d
                                      for tag in (TAG.RPATH, TAG.RUNPATH) for d in _dynamic(binary, tag))


class MissingLibrary(Exception):
    def __init__(self, name, requester):
        super().__init__(f"needs {name}, which cannot be found")
        self.name = name
        self.requester = requester


def closure(image):
    """Every module ld.so would load for `image` (itself first)."""
    binary = image.binary
    interp = binary.interpreter if binary.has_interpreter else None
    interp_real = os.path.realpath(interp) if interp else None
    root_role = "executable" if image.is_executable else "shared-object"
    root = Module(Path(image.path).name, Path(image.path), root_role, origin_path=_origin_path(binary))
    modules = [root]
    by_real = {os.path.realpath(image.path): root}
    by_name = {}
    if interp:
        if not _usable(interp):
            # The kernel would refuse to run it; so do we, in one line.
            raise InputError(image.path, f"its program interpreter {interp!r} is missing "
                                         "or not an x86-64 ELF file")
        m = Module(Path(interp).name, Path(interp), "interpreter")
        modules.append(m)
        by_real[interp_real] = m
    queue = [(root, binary)]
    while queue:
        mod, mod_binary = queue.pop(0)
        try:
            needed = list(mod_binary.libraries)
        except UnicodeDecodeError:
            needed = [b""]
        if any(not isinstance(n, str) for n in needed):  # LIEF gives bytes it cannot decode
            raise InputError(mod.path, "corrupt dynamic section: a needed library's name "
                                       "is not valid text")
        for name in needed:
            if name in by_name:
                by_name[name].needed_by.append(mod.name)
                continue
            path = find_library(name, origin_of(mod.path, mod is root and image.is_executable),
                                mod_binary, binary if image.is_executable else None,
                                origin_of(image.path, True))
            if path is None:
                raise MissingLibrary(name, mod.path)
            real = os.path.realpath(path)
            if real in by_real:
                existing = by_real[real]
                by_name[name] = existing
                existing.needed_by.append(mod.name)
                continue
            lib = Module(name, path, "library", [mod.name])
            by_real[real] = lib
            by_name[name] = lib
            modules.append(lib)
            with open(path, "rb") as f:
                problem = header_problem(f.read())
            lib_binary = None if problem else lief.ELF.parse(str(path))
            lib.origin_path = _origin_path(lib_binary)
            if lib_binary is not None:
                queue.append((lib, lib_binary))
    return modules
