"""The image cache (DIGITAL FX!32's database of translated images).

Everything is keyed by the SHA-256 of the original file and by the layout
FORMAT, so a changed file or a newer planner never gets a stale image:

    <root>/modules/<sha>-<format>/module.json   the module's sites
    <root>/modules/<sha>-<format>/plan          its load-time patch plan (plan.py)
    <root>/modules/<sha>-<format>/copies        the other files with its bytes given
                                                that plan, one path a line
    <root>/modules/<sha>-<format>/<name>        the rewritten library
    <root>/modules/<sha>-<format>/origin-<h>/<name>  the same, for a library whose
                                                RPATH/RUNPATH names $ORIGIN: one
                                                per directory it is found in
    <root>/programs/<sha>-<shim>-<format>/      a runnable program: the rewritten
                                                executable, its rewritten
                                                libraries, libferry.so, manifest.json;
                                                <shim> is the build id of the shim it
                                                carries (shimlib.build_id)
    <root>/programs/<sha>-<shim>-libs-<format>/ the same without the executable, for a
                                                program that runs from its own file and
                                                was never analyzed (prepare_libraries)
    <root>/shims/<sha>/libferry.so              the shim of that hash, which every
                                                program directory links as its own
    <root>/plans/<dev>-<ino>-<size>-<mtime_ns>  the load-time patch plan of a library
                                                (plan.py), for a preloaded shim
    <root>/plans/<plan>.<ino>-<mtime_ns>@<dist> the library's file with the plan's
                                                windows in place, for trampolines
                                                <dist> bytes from the planned place:
                                                made by the shim, mapped over the
                                                library's text (shim/src/plantext.c)
    <root>/exec/<dev>-<ino>-<size>-<mtime_ns>-<shim>
                                                symlink to the rewritten program made
                                                from the file with that identity and
                                                carrying the shim of build id <shim>:
                                                how the shim, at execve, finds the image
                                                to run instead (a stat, no hashing), and
                                                only one that carries itself: a child
                                                never runs a stale shim after a rebuild,
                                                nor another build's sharing the cache
    <root>/folios-<boot id>                     the images read back in large folios
                                                since this machine booted (base/folios.py)

The root is $FERRY_CACHE, else $XDG_CACHE_HOME/ferry, else ~/.cache/ferry.
"""
import hashlib
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

from ..base import atomic, folios
from .layout import FORMAT


def root():
    env = os.environ.get("FERRY_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg if xdg else Path.home() / ".cache") / "ferry"


def module_dir(sha):
    return root() / "modules" / f"{sha}-{FORMAT}"


def program_dir(sha, shim_id=None, libraries=False):
    """The program directory of the image of hash `sha`; one that carries a
    copy of the shim (ELF: libferry.so) is the shim's too, `shim_id` its build
    id.  `libraries`: the one holding only the rewritten libraries of a
    program whose own code was not analyzed (instrument.prepare_libraries)."""
    if not shim_id:
        return root() / "programs" / f"{sha}-{FORMAT}"
    return root() / "programs" / f"{sha}-{shim_id}{'-libs' if libraries else ''}-{FORMAT}"


@lru_cache(maxsize=256)
def _sha256_cached(path, size, mtime_ns, ino):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shim_copy(shim):
    """The cache's one copy of the shim file `shim`, made the first time:
    every program directory links it, so that the processes of every
    program map one file, which the page cache holds once and whose pages
    they share, where each program had a copy of its own (a megabyte of
    disk each, its pages read and cached again for each program)."""
    target = root() / "shims" / sha256_file(shim) / Path(shim).name
    try:
        whole = target.stat().st_size == os.stat(shim).st_size
    except OSError:
        whole = False
    if not whole:   # not made yet, or cut short since: program directories made from now on link a new one
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_with(target, lambda tmp: (shutil.copyfile(shim, tmp), folios.settle(tmp, root())),
                          os.stat(shim).st_mode & 0o777)
    return target


def linked_images():
    """The files of the cache that program directories link: the shim and
    the rewritten libraries, which every enabled process of those programs
    maps (a file of the cache that more than one name leads to)."""
    def files(d, depth):
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            if e.name.startswith(".") or e.name in ("module.json", "plan", "copies"):
                continue
            if e.is_dir(follow_symlinks=False):
                if depth:
                    yield from files(e.path, depth - 1)
            elif e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_nlink > 1:
                yield Path(e.path)
    r = root()
    yield from files(r / "shims", 1)
    yield from files(r / "modules", 2)      # modules/<sha>/<name>, modules/<sha>/origin-<h>/<name>


def plan_texts():
    """The patched text and trampolines preloaded shims made from plans
    (plans/<plan>.<ino>-<mtime_ns>@<dist>[.tramp-ctl])."""
    try:
        entries = list(os.scandir(root() / "plans"))
    except OSError:
        return
    for e in entries:
        if "@" in e.name and not e.name.startswith(".") and e.is_file(follow_symlinks=False):
            yield Path(e.path)


def sha256_file(path):
    st = os.stat(path)
    return _sha256_cached(str(path), st.st_size, st.st_mtime_ns, st.st_ino)


def exec_key(path):
    """The identity of a file as the shim computes it at execve (shim/src/exec.c)."""
    st = os.stat(path)
    return f"{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"


def exec_name(path, shim_id):
    """The name of the exec link of the file at `path` for the shim of build
    id `shim_id`, as the shim computes it at execve (shim/src/exec.c)."""
    return f"{exec_key(path)}-{shim_id}"


def register_exec(original, rewritten, shim_id):
    """Let the shim of build id `shim_id` run `rewritten` (which carries that
    shim) whenever a process execs `original`."""
    d = root() / "exec"
    d.mkdir(parents=True, exist_ok=True)
    link = d / exec_name(original, shim_id)
    tmp = d / f".{link.name}.{os.getpid()}.tmp"
    try:
        os.symlink(os.path.abspath(rewritten), tmp)
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()


def save_plan(original, plan_bytes, sha):
    """Keep the patch plan of library `original`, of hash `sha`, where the
    shim looks for it, and with the module, for the identical files that
    have other identities (share_plan)."""
    atomic.write_bytes(module_dir(sha) / "plan", plan_bytes)
    d = root() / "plans"
    d.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(d / exec_key(original), plan_bytes)


def share_plan(original, sha):
    """Give library `original` the plan kept with the module of hash `sha`,
    unless it has one already.  The shim finds a plan by the file's identity
    (dev, inode, size, mtime), and an identical file elsewhere (a copy, the
    same wheel in another virtualenv) has another: without a plan of its own
    its calls were caught on every run, learning never planned it (its
    module was in the cache).  A plan depends only on the file's bytes.
    False when the module kept no plan (a cache made before it did)."""
    target = root() / "plans" / exec_key(original)
    if target.is_file():
        return True
    try:
        data = (module_dir(sha) / "plan").read_bytes()
    except OSError:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(target, data)
    # `ferry cache` tells a plan still in use by the identity of a file it
    # was made for: the module's own, and these
    with open(module_dir(sha) / "copies", "a") as f:
        f.write(os.path.abspath(original) + "\n")
    return True


def plan_copies(mdir):
    """The files given the plan of the module kept in `mdir` (share_plan)."""
    try:
        with open(Path(mdir) / "copies") as f:
            return list(dict.fromkeys(line.rstrip("\n") for line in f if line.strip()))
    except OSError:
        return []


def rewritten_module(record, origin):
    """Where the rewritten file of module `record` (found in directory
    `origin`) is kept, or None if it needs none."""
    if not record.get("rewritten"):
        return None
    d = module_dir(record["sha256"])
    if record.get("origin_dependent"):
        d = d / f"origin-{hashlib.sha256(origin.encode()).hexdigest()[:16]}"
    return d / record["rewritten"]


def load_module(sha):
    """The cached module record for `sha`, or None."""
    p = module_dir(sha) / "module.json"
    try:
        with open(p) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if record.get("sha256") != sha or record.get("layout") != FORMAT:
        return None
    rewritten = record.get("rewritten")
    if rewritten and not record.get("origin_dependent") and not (module_dir(sha) / rewritten).is_file():
        return None
    return record
