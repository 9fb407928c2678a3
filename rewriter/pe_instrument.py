"""`ferry instrument app.exe`: a Windows program and the DLLs it imports,
rewritten so that ferry.dll counts their own system-call stubs
(rewriter/pe_rewrite.py).  The result is a directory the Windows loader
serves by itself, as the ELF one is:

    DIR/<program>.exe   the rewritten program; it imports ferry.dll
    DIR/<dll>           each imported DLL that has stubs of its own, rewritten:
                        the loader looks in the program's directory first;
                        and each of the program's own DLLs (from its
                        directory) as it is, so that the loader finds them
    DIR/ferry.dll       Ferry's DLL
    DIR/manifest.json   every module and every site

DLLs are found as the Windows loader finds them: the program's directory,
then system32 of the wine prefix (WINEPREFIX, else ~/.wine).  ntdll.dll and
win32u.dll are not rewritten and get no plan made ahead of time: ferry.dll
patches their stubs in memory when it loads, found by shape and named from
the export table of the copy actually loaded (NTDLL_NOTE says why).
"""
import os
import shutil
import time
from pathlib import Path

from . import cache, manifest, pe_kind, pe_load, pe_rewrite, pe_sites, shimlib
from .elfload import read_input
from ..base.errors import FerryError, InputError

NTDLL_NOTE = ("not rewritten: ferry.dll patches its stubs in memory at load, by shape, named "
              "from the copy loaded (SSNs change between Windows builds and with updates: a "
              "plan made from this file would not fit the one that runs)")
IN_MEMORY = ("ntdll.dll", "win32u.dll")


def ferry_dll():
    dll = shimlib.SOURCE_TREE_SHIM.parent / "ferry.dll"
    if not dll.is_file():
        raise FerryError(dll, "not built (install mingw-w64 and run `make shim`)")
    return dll


def system32():
    prefix = os.environ.get("WINEPREFIX") or os.path.expanduser("~/.wine")
    return Path(prefix) / "drive_c" / "windows" / "system32"


def _find(name, app_dir):
    for d in (app_dir, system32()):
        # Windows file names match whatever their case
        try:
            for entry in os.scandir(d):
                if entry.name.lower() == name.lower() and entry.is_file():
                    return Path(entry.path)
        except OSError:
            continue
    return None


def closure(image):
    """[(name, path or None, importer)] of the DLLs `image` imports, directly
    or not, in the order the loader meets them (API sets are the loader's
    own: left out)."""
    app_dir = image.path.parent
    seen, out, todo = set(), [], [(image, image.path.name)]
    while todo:
        img, by = todo.pop(0)
        for imp in img.binary.imports:
            name = imp.name
            if name.lower() in seen or name.lower().startswith(("api-ms-", "ext-ms-")):
                continue
            seen.add(name.lower())
            path = _find(name, app_dir)
            out.append((name, path, by))
            if path is not None and name.lower() != "ferry.dll":
                try:
                    todo.append((pe_load.load(path), name))
                except InputError:
                    pass     # a DLL Ferry cannot read is left as it is; the loader decides
    return out


def _private(dep, image):
    """Whether the loader takes DLL `dep` from the program's directory."""
    return os.path.samefile(dep.parent, image.path.parent)


def _record(name, role, path, sha, sites=None, stubs=None, read=None, rewritten=None, note=None):
    patched = [s for s in sites or [] if s.patched and s.address in (stubs or {})]
    return {
        "name": name, "role": role, "original": str(path) if path else None,
        "realpath": os.path.realpath(path) if path else None, "sha256": sha,
        "rewritten": rewritten,
        "sites_total": None if sites is None else len(sites),
        "sites_patched": None if sites is None else len(patched),
        "sites": [_site(s, name, read, stubs) for s in sites or []],
        "note": note,
    }


def _site(site, name, read, stubs):
    d = pe_sites.site_to_dict(site, name, read, stubs)
    if site.address not in stubs and site.patched:
        d["status"], d["reason"] = "unpatched", ("an inline syscall: its number means something "
                                                 "only to the Windows build it was written for")
    return d


def _rewrite_module(image, tmp, name):
    """(record fields, whether it was rewritten) for a module of the program."""
    cmap, sites, stubs = pe_sites.analyze(image)
    targets = [stubs[s.address] for s in sites if s.patched and s.address in stubs]
    if targets:
        try:
            pe_rewrite.rewrite(image.path, targets, tmp / name)
        except pe_rewrite.RewriteError as e:
            raise InputError(image.path, f"cannot be rewritten: {e}") from None
        shutil.copymode(image.path, tmp / name)
    return sites, stubs, cmap.read, bool(targets)


def instrument(path, out_dir, progress):
    from .instrument import (AlreadyRewritten, Result, _current_manifest, _move_into_place, _served,
                             manifest_of, output_dir, staging_dir)
    started = time.monotonic()
    headers, _problem = pe_kind.parse_headers(read_input(Path(path)))
    if headers is not None and headers.is_dll:     # said first: whatever else is wrong with it
        raise InputError(path, "a DLL, not a program: instrument the program that loads it")
    image = pe_load.load(path)
    if pe_rewrite.is_rewritten(image.binary):
        raise AlreadyRewritten(path)
    dll = ferry_dll()
    dll_sha = cache.sha256_file(dll)
    deps = closure(image)
    shas = [image.sha256] + [cache.sha256_file(p) if p else None for _n, p, _b in deps]
    out_dir = output_dir(out_dir, image.sha256)
    # modules not found count as such (None) in both lists
    cached = _current_manifest(out_dir, dll_sha, shas)
    if cached is not None:
        return _served(path, out_dir, cached, False, started, progress)

    progress("start", None, total=1 + len(deps))
    tmp = staging_dir(out_dir)
    try:
        records = []
        root = image.path.name
        progress("analyze", root)
        sites, stubs, read, changed = _rewrite_module(image, tmp, root)
        if not changed:
            shutil.copy2(image.path, tmp / root)     # the program runs from the directory
        records.append(_record(root, "executable", image.path, image.sha256, sites, stubs, read,
                               root if changed else None))
        progress("advance", root)
        for (name, dep, by), sha in zip(deps, shas[1:]):
            if dep is None:
                rec = _record(name, "library", None, None, note="not found in the program's "
                              f"directory nor in {system32()}: the loader's to find")
            elif name.lower() in IN_MEMORY:
                rec = _record(name, "library", dep, sha, note=NTDLL_NOTE)
            elif name.lower() == "ferry.dll":
                rec = _record(name, "shim", dep, sha, note="Ferry's DLL: never rewritten")
            else:
                progress("analyze", name)
                try:
                    sites, stubs, read, changed = _rewrite_module(pe_load.load(dep), tmp, dep.name)
                except InputError as e:
                    changed = False
                    rec = _record(name, "library", dep, sha, note=f"not rewritten: {e.problem}")
                else:
                    rec = _record(name, "library", dep, sha, sites, stubs, read,
                                  dep.name if changed else None)
                if not changed and _private(dep, image):
                    # the program now runs from this directory, and the
                    # loader looks for a DLL in the program's directory first
                    shutil.copy2(dep, tmp / dep.name)
                    rec["copied"] = dep.name
            rec["needed_by"] = by
            records.append(rec)
            progress("advance", name)
        shutil.copy2(dll, tmp / "ferry.dll")
        m = manifest_of(path, "executable", root, root, {"file": "ferry.dll", "sha256": dll_sha},
                        records, binary_format="pe")
        manifest.write_json(tmp / "manifest.json", m)
        _move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress("done", root)
    return Result(out_dir, out_dir / root, m, False, time.monotonic() - started)
