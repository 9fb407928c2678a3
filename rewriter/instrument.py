"""The whole job of `ferry instrument`: a program and its closure, rewritten.

An executable becomes a directory that runs by itself:

    DIR/<program>       the rewritten executable; its DT_RPATH searches
                        $ORIGIN first and its DT_NEEDED entries name each
                        rewritten library and libferry.so, so no LD_PRELOAD
                        or LD_LIBRARY_PATH is needed
    DIR/<lib>           each library of the closure that has syscall sites
    DIR/libferry.so     the shim
    DIR/glibc-hwcaps/<level>/   the same libraries and shim again (hard links),
                        where ld.so looks first (hwcaps.py)
    DIR/manifest.json   every module and every site

Libraries are rewritten once and kept in the image cache; a program directory
made earlier is reused when the program, its libraries and the shim are the
same files.  The output is assembled in a temporary directory beside its
destination and moved into place at the end, manifest last.
"""
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..base import atomic
from . import cache, elfkind, layout, manifest, shimlib
from ..base.errors import FerryError, InputError

FERRY_VERSION = "0.1.0"


class AlreadyRewritten(FerryError):
    def __init__(self, path):
        super().__init__(path, "already rewritten by Ferry; not rewriting it again")


@dataclass
class Result:
    out_dir: Path
    entry: Path            # the file to run (None for a shared object)
    manifest: dict
    from_cache: bool
    seconds: float


def _noop(*_args, **_kw):
    pass


def analyze_module(image, progress=_noop, name=None):
    """(CodeMap, [Site]) for an ElfImage. `progress` hears ("sweep", name, total=bytes of
    code), then ("swept", name, total=bytes decoded so far) while the code is decoded, and
    ("sites", name, total=sites found)."""
    from . import code, planner

    def swept(done, whole):
        progress("sweep" if done == 0 else "swept", name, total=whole if done == 0 else done)
    cmap = code.analyze(image, swept)
    sites = planner.plan(cmap)
    progress("sites", name, total=len(sites))
    return cmap, sites


def module_record(image, mod, sites, cmap, rewritten_name):
    patched = sum(s.patched for s in sites)
    return {
        "name": mod.name,
        "role": mod.role,
        "original": str(mod.path),
        "realpath": os.path.realpath(mod.path),
        "sha256": image.sha256,
        "layout": layout.FORMAT,
        "pie": image.is_pie,
        "rewritten": rewritten_name,
        "sites_total": len(sites),
        "sites_patched": patched,
        "sites": [manifest.site_to_dict(s, mod.name, cmap.read) for s in sites],
    }


def _is_shim(path):
    """libferry.so, under whatever directory (a program linked with the shim's
    API finds it through its own rpath)."""
    return Path(path).name == "libferry.so"


def _library(mod, progress):
    """(cache record of library `mod`, its rewritten file or None), rewriting
    it on a miss.  A library whose RPATH or RUNPATH names $ORIGIN gets the
    directory it was found in instead (its copy lives elsewhere), so its
    rewritten file is kept per directory."""
    from . import elfload, patcher
    from .modules import origin_of
    sha = cache.sha256_file(mod.path)
    origin = origin_of(mod.path, False)
    record = cache.load_module(sha)
    if record is not None:
        path = cache.rewritten_module(record, origin)
        if path is None or (path.is_file() and cache.share_plan(mod.path, sha)):
            progress("cached", mod.name)
            return record, path
    progress("analyze", mod.name)
    image = elfload.load(mod.path)
    if elfload.ferry_control_block(image):
        raise AlreadyRewritten(mod.path)
    cmap, sites = analyze_module(image, progress, mod.name)
    mdir = cache.module_dir(sha)
    mdir.mkdir(parents=True, exist_ok=True)
    rewritten = None
    if any(s.patched for s in sites):
        progress("rewrite", mod.name)
        where = {"sha256": sha, "rewritten": Path(mod.name).name,
                 "origin_dependent": patcher.uses_origin(image.binary)}
        rewritten = cache.rewritten_module(where, origin)
        rewritten.parent.mkdir(parents=True, exist_ok=True)
        plan_bytes = patcher.rewrite(image, sites, cmap, rewritten,
                                     patcher.DynamicChanges([], origin_dir=origin))
        cache.save_plan(mod.path, plan_bytes, sha)
    # after the rewrite: the sites know their trampolines now
    record = module_record(image, mod, sites, cmap, rewritten and rewritten.name)
    if rewritten is not None:
        record["origin_dependent"] = where["origin_dependent"]
    manifest.write_json(mdir / "module.json", record)
    return record, rewritten


def _current_manifest(out_dir, shim_sha, shas=None):
    """The manifest in `out_dir` if that directory was made by this rewriter
    and shim from files that are unchanged: the hashes in `shas` (a closure
    just resolved) or, without them, the files the manifest names, hashed
    again (so a cache hit needs no ELF parsing, nor even LIEF)."""
    m = _read_manifest(out_dir)
    if m is None or m.get("layout") != layout.FORMAT or m.get("shim", {}).get("sha256") != shim_sha:
        return None
    try:
        made_from = [mod["sha256"] for mod in m["modules"]]
        now = shas if shas is not None else [cache.sha256_file(mod["original"]) for mod in m["modules"]]
    except (OSError, KeyError, TypeError):
        return None
    if made_from != now:
        return None
    entry = m.get("entry")
    if entry and not (out_dir / entry).is_file():
        return None
    return m


def _place(src, dst, link):
    if link:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)


def _servable(path, m, in_cache):
    """Whether the directory of manifest `m` serves `path` as it is: a
    library made from an identical file elsewhere is, once `path` has the
    module's plan too (cache.share_plan; planned again otherwise)."""
    root = m["modules"][0] if m.get("modules") else {}
    if not in_cache or m.get("kind") == "executable" or not root.get("rewritten"):
        return True
    return cache.share_plan(path, root["sha256"])


def _served(path, out_dir, m, in_cache, started, progress, shim_id=None):
    """The Result of a program directory that was already there (registered
    for the exec hook of the shim of build id `shim_id` when in the cache)."""
    progress("done", Path(path).name)
    entry = out_dir / m["entry"] if m.get("entry") else None
    if entry is not None and in_cache:
        cache.register_exec(path, exec_target(out_dir, m), shim_id)
    return Result(out_dir, entry, m, True, time.monotonic() - started)


def own_file_unchanged(m):
    """Whether the program of manifest `m` runs from its own file, with only
    its libraries taken from the program directory: no site of the
    executable itself needed patching (the usual dynamic program, whose
    system calls are all in libc).  It then keeps what it sees of itself:
    /proc/self/exe, AT_EXECFN, $ORIGIN."""
    root = m["modules"][0] if m.get("modules") else {}
    return m.get("kind") == "executable" and not m.get("static") and not root.get("sites_patched")


def exec_target(out_dir, m):
    """What the shim's exec hook should use for the program of manifest `m`
    (shim/src/exec.c): the program directory, or the rewritten executable."""
    return out_dir if own_file_unchanged(m) else out_dir / m["entry"]


def _read_manifest(out_dir):
    import json
    try:
        with open(out_dir / "manifest.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def instrument(path, out_dir=None, progress=_noop):
    """Rewrite `path` and its closure into `out_dir` (default: the cache)."""
    try:
        return _instrument(path, out_dir, progress)
    except UnicodeDecodeError:
        # LIEF decodes names (symbols, sections, libraries) as UTF-8; a damaged
        # file can hold anything there.
        raise InputError(path, "corrupt ELF file: a name in it is not valid text") from None


def _is_pe(path):
    from .pe_kind import is_pe
    try:
        with open(path, "rb") as f:
            return is_pe(f.read(2))
    except OSError:
        return False        # said by the ELF path, as for any unreadable file


def _instrument(path, out_dir, progress):
    if _is_pe(path):
        from . import pe_instrument
        return pe_instrument.instrument(path, out_dir, progress)
    started = time.monotonic()
    # Refuse what the shim cannot serve before hashing or parsing anything.
    kind = elfkind.classify(path)
    if kind.refused:
        raise InputError(path, kind.reason)
    if kind.name in elfkind.STATIC_KINDS:
        from . import static_instrument
        return static_instrument.instrument(path, out_dir, progress, started)
    shim = shimlib.path()
    shim_sha = cache.sha256_file(shim)
    shim_id = shimlib.build_id(shim)
    if out_dir is None:
        try:
            hit_dir = cache.program_dir(cache.sha256_file(path), shim_id)
        except OSError:
            hit_dir = None
        hit = _current_manifest(hit_dir, shim_sha) if hit_dir else None
        if hit is not None and _servable(path, hit, True):
            return _served(path, hit_dir, hit, True, started, progress, shim_id)

    import lief
    from . import elfload, patcher
    from .modules import MissingLibrary, closure
    if _is_shim(path):
        raise InputError(path, "this is Ferry's shim, which is never rewritten")
    image = elfload.load(path)
    if elfload.ferry_control_block(image):
        raise AlreadyRewritten(path)
    if not image.binary.has(lief.ELF.Segment.TYPE.DYNAMIC):
        if image.is_executable:
            raise InputError(path, elfkind.STATIC_REASON)
        raise InputError(path, "corrupt shared object: no dynamic segment")
    try:
        mods = closure(image)
    except MissingLibrary as e:
        raise FerryError(e.requester, f"needs {e.name}, which cannot be found") from None
    shas = [image.sha256] + [cache.sha256_file(m.path) for m in mods[1:]]
    in_cache = out_dir is None
    out_dir = output_dir(out_dir, image.sha256, shim_id)

    cached = _current_manifest(out_dir, shim_sha, shas)
    if cached is not None and _servable(path, cached, in_cache):
        return _served(path, out_dir, cached, in_cache, started, progress, shim_id)

    progress("start", None, total=len(mods))
    records = [None] * len(mods)
    files = [None] * len(mods)
    for i, mod in enumerate(mods):
        if i == 0:
            continue
        records[i] = _kept_record(mod, shas[i])
        if records[i] is None:
            records[i], files[i] = _library(mod, progress)
            records[i]["needed_by"] = mod.needed_by
        progress("advance", mod.name)

    tmp = staging_dir(out_dir)
    try:
        rewritten_libs = _stage_libraries(tmp, mods, files, shim, in_cache, image)

        root_name = Path(path).name
        if not image.is_executable:
            record, file = _library(mods[0], progress)
            _place(file, tmp / root_name, in_cache) if file is not None \
                else shutil.copy2(path, tmp / root_name)
            records[0] = record
        else:
            progress("analyze", mods[0].name)
            cmap, sites = analyze_module(image, progress, mods[0].name)
            # Libraries loaded only indirectly become direct needs, so that they
            # are mapped (from $ORIGIN) before anything looks them up by name.
            direct = {str(n) for n in image.binary.libraries}
            changes = patcher.DynamicChanges(
                add_needed=[n for n in rewritten_libs if n not in direct]
                + ([] if "libferry.so" in direct else ["libferry.so"]),
                search_first="$ORIGIN",
                origin_dir=str(Path(os.path.realpath(path)).parent))
            progress("rewrite", mods[0].name)
            patcher.rewrite(image, sites, cmap, tmp / root_name, changes)
            records[0] = module_record(image, mods[0], sites, cmap, root_name)
        progress("advance", mods[0].name)

        m = _manifest(path, mods[0].role, root_name if image.is_executable else None, root_name,
                      shim_sha, shim_id, records)
        if in_cache and own_file_unchanged(m) and image.binary.has_interpreter:
            # the exec hook runs the program's own file with this directory
            # in LD_LIBRARY_PATH (exec_target); never a directory that is
            # run by itself, whose DT_RPATH $ORIGIN comes before a user's
            # LD_LIBRARY_PATH
            _link_system_libraries(tmp, mods, files, image.binary.interpreter)
        manifest.write_json(tmp / "manifest.json", m)
        _move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress("done", mods[0].name)
    entry = out_dir / root_name if image.is_executable else None
    if entry is not None and in_cache:
        cache.register_exec(path, exec_target(out_dir, m), shim_id)
    return Result(out_dir, entry, m, False, time.monotonic() - started)


def _kept_record(mod, sha):
    """The record of a module of the closure that is never rewritten (the
    shim, ld.so), or None for a library."""
    if _is_shim(mod.path):
        # a program linked with libferry (the aggregation API): the shim
        # must never patch its own calls
        role, note = "shim", "Ferry's shim: never rewritten"
    elif mod.role == "interpreter":
        role, note = mod.role, ("loaded by the kernel before the shim can run; "
                                "its calls are made before the shim initializes")
    else:
        return None
    return {"name": mod.name, "role": role, "original": str(mod.path),
            "realpath": os.path.realpath(mod.path), "sha256": sha,
            "rewritten": None, "sites_total": None, "sites_patched": None,
            "sites": [], "note": note}


def _stage_libraries(tmp, mods, files, shim, link, image):
    """Into `tmp`: the rewritten file (or None) `files[i]` of each library
    `mods[i]`, the shim, and both again where ld.so looks first.  Returns
    {library name: file name} of those placed."""
    rewritten_libs = {}
    for mod, file in zip(mods[1:], files[1:]):
        if file is not None:
            name = Path(mod.name).name
            rewritten_libs[mod.name] = name
            _place(file, tmp / name, link)
    _place(cache.shim_copy(shim) if link else shim, tmp / "libferry.so", link)
    if image.binary.has_interpreter:
        _link_first_searched(tmp, [*rewritten_libs.values(), "libferry.so"], image.binary.interpreter)
    return rewritten_libs


def _manifest(path, kind, entry, rewritten, shim_sha, shim_id, records):
    return manifest_of(path, kind, entry, rewritten,
                       {"file": "libferry.so", "sha256": shim_sha, "build_id": shim_id}, records)


def manifest_of(path, kind, entry, rewritten, shim, records, **extra):
    """manifest.json of a program directory (docs/manifest.md), for ELF, a
    static program (`static`) and PE (`binary_format`) alike; `shim` says
    which shim the directory's files carry."""
    return {
        "format": "ferry-manifest",
        "version": 1,
        "ferry": FERRY_VERSION,
        "layout": layout.FORMAT,
        "input": os.path.abspath(path),   # the report names a process by it
        "kind": kind,
        **extra,
        "entry": entry,
        "rewritten": rewritten,
        "shim": shim,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "modules": records,
    }


def prepare_libraries(path):
    """For a program that an enabled process started with the shim preloaded
    (its libraries patched at load time from their plans): a program
    directory holding the rewritten libraries the image cache already has
    for its closure, and the exec hook's link to it.  Next time the program
    runs from its own file with those libraries first, as a program whose
    own file needs no change does: no plan to apply (~50 us less at each
    start).  Nothing is analyzed: its own code is not (calls made there are
    caught by the catch-all, as they were), nor any library the cache does
    not hold yet.  Returns the directory, or None when there is nothing to
    gain (no rewritten library, not a dynamic glibc program)."""
    from . import elfload
    from .modules import MissingLibrary, closure, origin_of
    if _is_pe(path) or _is_shim(path) or elfkind.classify(path).refused:
        return None
    shim = shimlib.path()
    shim_sha, shim_id = cache.sha256_file(shim), shimlib.build_id(shim)
    sha = cache.sha256_file(path)
    for made in (cache.program_dir(sha, shim_id), cache.program_dir(sha, shim_id, libraries=True)):
        m = _current_manifest(made, shim_sha)
        if m is not None and m.get("kind") == "executable":
            cache.register_exec(path, exec_target(made, m), shim_id)
            return made
    image = elfload.load(path)
    if not image.is_executable or not image.binary.has_interpreter:
        return None
    try:
        mods = closure(image)
    except MissingLibrary:
        return None
    shas = [sha] + [cache.sha256_file(mod.path) for mod in mods[1:]]
    records, files = [None] * len(mods), [None] * len(mods)
    for i, mod in enumerate(mods[1:], 1):
        records[i] = _kept_record(mod, shas[i]) or cache.load_module(shas[i])
        if records[i] is None:
            records[i] = {"name": mod.name, "role": mod.role, "original": str(mod.path),
                          "realpath": os.path.realpath(mod.path), "sha256": shas[i],
                          "rewritten": None, "sites_total": None, "sites_patched": None,
                          "sites": [], "note": "not in the image cache: left as it is"}
        elif records[i].get("role") not in ("shim", "interpreter"):
            records[i] = dict(records[i], needed_by=mod.needed_by)
            file = cache.rewritten_module(records[i], origin_of(mod.path, False))
            files[i] = file if file is not None and file.is_file() else None
    if not any(files):
        return None
    records[0] = {"name": mods[0].name, "role": "executable", "original": str(path),
                  "realpath": os.path.realpath(path), "sha256": sha, "rewritten": None,
                  "sites_total": None, "sites_patched": None, "sites": [],
                  "note": "runs from its own file, not analyzed: calls made from its own "
                          "code are caught by the catch-all"}
    out_dir = cache.program_dir(sha, shim_id, libraries=True)
    tmp = staging_dir(out_dir)
    try:
        _stage_libraries(tmp, mods, files, shim, True, image)
        _link_system_libraries(tmp, mods, files, image.binary.interpreter)
        m = _manifest(path, "executable", None, None, shim_sha, shim_id, records)
        manifest.write_json(tmp / "manifest.json", m)
        _move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache.register_exec(path, out_dir, shim_id)
    return out_dir


def _link_system_libraries(tmp, mods, files, interpreter):
    """For a program that runs from its own file with `tmp` first in its
    LD_LIBRARY_PATH: each library of its closure that is not rewritten, as a
    link to the file ld.so finds for it, where ld.so looks first.  ld.so
    searches that directory for every library before the system's: each one
    not there was two failed openat, and the first also probed every
    glibc-hwcaps and tls subdirectory (~20 failed openat and stat), 20-40 us
    of a `sed`, `grep` or `cc1` start.  Only for a library that the ld.so
    cache or a default directory gives as the closure found it (so that a
    DT_RPATH or DT_RUNPATH, searched before the cache, finds that same file,
    and the directory, searched before DT_RUNPATH, changes nothing), and
    that does not search for its own libraries relative to its place
    ($ORIGIN would be the directory's).  The exec hook puts a user's own
    LD_LIBRARY_PATH before the directory, so that what a user points ld.so
    at is still found first.  A library whose file moves or goes makes a
    link that leads nowhere, which ld.so passes over to search on, as
    natively."""
    from . import hwcaps
    from .modules import system_library
    sub = hwcaps.first_subdir(interpreter)
    if sub is None:
        return
    for mod, file in zip(mods[1:], files[1:]):
        if file is not None or mod.role != "library" or "/" in mod.name or mod.origin_path or \
                _is_shim(mod.path):
            continue
        found = system_library(mod.name)
        link = tmp / sub / mod.name
        if found is None or os.path.realpath(found) != os.path.realpath(mod.path) or \
                os.path.lexists(link):
            continue
        (tmp / sub).mkdir(parents=True, exist_ok=True)
        os.symlink(str(found), link)


def _link_first_searched(tmp, names, interpreter):
    """Each file of `names` in `tmp` also where `interpreter` looks for it
    first, so that finding it costs one openat, not ~20 failed lookups."""
    from . import hwcaps
    sub = hwcaps.first_subdir(interpreter)
    if sub is None:
        return
    (tmp / sub).mkdir(parents=True)
    for name in names:
        _place(tmp / name, tmp / sub / name, True)


def output_dir(out_dir, sha, shim_id=None):
    """The directory to write into: `out_dir`, or the cache's for a program of
    hash `sha` (carrying the shim of build id `shim_id`)."""
    out_dir = Path(out_dir) if out_dir is not None else cache.program_dir(sha, shim_id)
    if out_dir.exists() and not out_dir.is_dir():
        raise FerryError(out_dir, "output exists and is not a directory")
    return out_dir


def staging_dir(out_dir):
    """A new directory beside `out_dir`, where its content is made before it moves in."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    os.chmod(tmp, 0o777 & ~atomic.umask())
    return tmp


def _move_into_place(tmp, out_dir):
    """Make `out_dir` hold what `tmp` holds; the manifest is renamed last, so
    a directory with a manifest is always complete."""
    if not out_dir.exists():
        try:
            os.rename(tmp, out_dir)
            return
        except OSError:
            pass
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = out_dir / "manifest.json"
    if stale.exists():
        stale.unlink()
    for item in sorted(tmp.iterdir(), key=lambda p: p.name == "manifest.json"):
        dest = out_dir / item.name
        if item.is_dir() and dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)     # a directory is replaced whole, never merged
        os.replace(item, dest)
