"""Starting a Windows program enabled: under wine on Linux, with ferry.dll
loaded into it before its code runs.

`ferry-launch.exe` (shim/win/launch.c) starts the program through Detours'
DetourCreateProcessWithDllExW, which adds ferry.dll to the new process's
imports while it is suspended; ferry.dll then patches ntdll's stubs from its
DllMain.  Detours' DLL comes from the `detoursdll` package (Microsoft's
Detours 4.0.1, fetched at set-up time; never copied into this tree).
"""
import importlib.util
import os
import shutil
from pathlib import Path

from ..rewriter import pe_kind, shimlib
from ..base.errors import FerryError, InputError

WINE = "wine"      # a Launch's `how` for a PE program


def win_path(path):
    """`path` as a Windows program under wine sees it: wine's default drive Z:
    is the Linux root."""
    return "Z:" + os.path.abspath(path).replace("/", "\\")


def detours_dll():
    """detours.dll of the detoursdll package (found, not imported: its module
    loads Windows-only ctypes), or None."""
    spec = importlib.util.find_spec("detoursdll")
    if spec is None or not spec.submodule_search_locations:
        return None
    dll = Path(list(spec.submodule_search_locations)[0]) / "detours.dll"
    return dll if dll.is_file() else None


def check_program(path):
    """Refuse, in one line, a PE file that is no x86-64 Windows program."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(path, (e.strerror or str(e)).lower()) from None
    headers, problem = pe_kind.parse_headers(data)
    if problem is None:
        problem = pe_kind.refusal(data)
    if problem and "no .pdata" not in problem:   # .pdata matters to the rewriter, not to a run
        raise InputError(path, problem)
    if headers.is_dll:
        raise InputError(path, "a DLL, not a program: run the program that loads it")


def prepare(argv, given, original, progress=None):
    """The Launch (injector/launch.py) of Windows program `given`."""
    from .launch import Launch
    check_program(given)
    wine = shutil.which("wine")
    if wine is None:
        raise FerryError(original, "a Windows program, and wine is not installed "
                                   "(Debian package wine; tools/sysdeps.sh installs it)")
    detours = detours_dll()
    if detours is None:
        raise FerryError(original, "a Windows program, and the detoursdll package is missing "
                                   "(pip install detoursdll==1.0.0; `make setup` installs it)")
    build = shimlib.SOURCE_TREE_SHIM.parent
    if _built() is None:
        raise FerryError(build / "ferry.dll", "not built (install mingw-w64 and run `make shim`)")
    dll, launcher = _built()
    manifest, image = _image(original, progress)
    # the parent the report gives the program: `ferry run`, as for a Linux program
    return Launch([wine, str(launcher), win_path(detours), win_path(dll), str(os.getpid()),
                   win_path(original)]
                  + list(argv[1:]), wine, original, manifest, WINE, image=image)


def _image(original, progress):
    """(manifest, rewritten program) of `original` from the image cache, made
    now if need be, as `ferry run` does for a Linux program; (None, None) when
    nothing of the program needed rewriting (ferry.dll's patching of ntdll is
    then all there is) or it cannot be rewritten (the run says nothing: the
    program still runs enabled, its own stubs uncounted)."""
    from ..rewriter.instrument import instrument
    try:
        result = instrument(original, progress=progress or (lambda *a, **k: None))
    except FerryError:
        return None, None
    if not any(m.get("rewritten") and m.get("sites_patched") for m in result.manifest["modules"]):
        return None, None
    return result.manifest, str(result.entry)


def _built():
    """ferry.dll and ferry-launch.exe of this tree, or None when not built."""
    build = shimlib.SOURCE_TREE_SHIM.parent
    files = build / "ferry.dll", build / "ferry-launch.exe"
    return files if all(f.is_file() for f in files) else None


def linux_settings(profile, out_dir):
    """The settings with which a Linux program's exec hook starts a Windows
    program it runs under wine as `ferry run` would (shim/src/exec_wine.c):
    the files and the run directory as Windows sees them.  None when this run
    cannot enable one (no ferry.dll, no detoursdll, an aggregation profile):
    wine then runs as any Linux program does."""
    detours, built = detours_dll(), _built()
    if profile.mode == "aggregate" or detours is None or built is None:
        return {}
    dll, launcher = built
    return {"FERRY_WIN_LAUNCH": win_path(launcher), "FERRY_WIN_DLL": win_path(dll),
            "FERRY_WIN_DETOURS": win_path(detours), "FERRY_WIN_RUN_DIR": win_path(out_dir)}


def program_env(base, profile, out_dir, image=None):
    """The environment of `wine` for an enabled PE program: its own, and the
    variables ferry.dll reads (and takes out of the program's environment):
    the mode, the run directory, and detours.dll for the children; the
    launcher's FERRY_WIN_IMAGE when the program runs from its rewritten image;
    in mode aggregate the profile's [aggregate] settings (FERRY_AGG, its routes
    by Nt name: docs/aggregate.md)."""
    from ..profiles.aggenv import encode
    detours = detours_dll()
    env = dict(base, FERRY_MODE=profile.mode, FERRY_WIN_RUN_DIR=win_path(out_dir),
               FERRY_WIN_DETOURS=win_path(detours) if detours else "")
    if profile.mode == "aggregate":
        env["FERRY_AGG"] = encode(profile, windows=True)
    if image:
        env["FERRY_WIN_IMAGE"] = win_path(image)
    return env
