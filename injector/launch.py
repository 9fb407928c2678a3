"""How `ferry run` starts its command: the same choices the shim's exec hook
makes for a child (shim/src/exec.c), so that the command sees what it would
see natively: its own file (/proc/self/exe, AT_EXECFN, $ORIGIN), its own
argv and $0, its own environment.

- a dynamic glibc program whose executable has no sites of its own (the usual
  case: its calls are in libc) runs from its own file, its rewritten
  libraries taken from the program directory in the image cache (LIBDIR);
- one whose executable had to be rewritten runs that rewritten image (RUN);
- one the rewriter cannot handle runs from its own file with the shim
  preloaded, which patches its libraries in memory from their plans (PRELOAD);
- a static program runs its rewritten image, which carries the shim (RUN);
- what the shim cannot serve (a static program that could not be rewritten,
  32-bit, musl, setuid) runs exactly as natively, and the run says why it
  was not enabled.

A #! script runs as the kernel would run it; a file that is neither ELF nor
#! is run by /bin/sh, as execvp does.
"""
import os
import shutil
from dataclasses import dataclass

from .environment import LIBDIR, PRELOAD, RUN
from ..base.errors import FerryError, InputError


@dataclass
class Launch:
    argv: list                 # what the program sees as its argv
    executable: str            # the file handed to execve
    original: str              # the program the user named (absolute)
    manifest: dict = None      # of the instrumented program
    how: str = None            # RUN, PRELOAD, LIBDIR; None: not enabled
    libdir: str = None         # LIBDIR: the program directory
    reason: str = None         # why not enabled
    note: str = None           # something the user should hear once
    image: str = None          # wine: the rewritten program started in the original's place
    # RUN: the file the image stands for as an exec of it names it, and the
    # name the exec is given when that is another file (a script's): what
    # the program is told of itself (FERRY_SELF, FERRY_EXECFN; shim/src/selfexe.c)
    self_name: str = None
    execfn: str = None

    @property
    def enabled(self):
        return self.how is not None


# What exec.c's classify() says, with the reasons the report gives.
DYNAMIC, STATIC, FOREIGN, SETUID, SCRIPT, NOT_ELF, OTHER = (
    "dynamic", "static", "foreign", "setuid", "script", "not-elf", "other")


def resolve(command):
    """The path execvp would run for `command` (as given when it holds a '/')."""
    if "/" in command:
        path = command
    else:
        path = shutil.which(command)
        if path is None:
            raise FerryError(command, "command not found")
    if not os.path.exists(path):
        raise FerryError(path, "no such file")
    if os.path.isdir(path):
        raise FerryError(path, "is a directory, not a program")
    # root passes access(X_OK) for any file with an x bit; the mode is what
    # the kernel's exec checks first.
    if not os.stat(path).st_mode & 0o111 or not os.access(path, os.X_OK):
        raise FerryError(path, "not executable")
    return path


def _is_pe(path):
    from ..rewriter.pe_kind import is_pe
    try:
        with open(path, "rb") as f:
            return is_pe(f.read(2))
    except OSError:
        return False


def _has_capabilities(path):
    try:
        return bool(os.getxattr(path, "security.capability"))
    except OSError:   # none (ENODATA), or a file system without them
        return False


def classify(path):
    """(kind, detail) of the file at `path`, judged as the kernel and ld.so
    would: detail is the #! line's words for a script, else a reason."""
    from ..rewriter import elfkind
    if os.stat(path).st_mode & 0o6000:
        return SETUID, "set-user-ID or set-group-ID program: never enabled"
    if _has_capabilities(path):
        # ld.so runs it in secure mode, as a set-ID program: it would ignore
        # the shim's LD_PRELOAD, and the program would see Ferry's settings
        return SETUID, "program with file capabilities: never enabled"
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as e:
        return OTHER, f"cannot be read ({e.strerror.lower()})"
    if head.startswith(b"#!"):
        line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        return SCRIPT, line.split(None, 1)
    if not head.startswith(b"\x7fELF"):
        return NOT_ELF, "not an ELF program"
    try:
        kind = elfkind.classify(path)
    except InputError as e:
        return OTHER, e.problem
    if kind.unusable:   # packed, or headers no kernel or rewriter can follow
        raise InputError(path, kind.reason)
    if kind.name in elfkind.STATIC_KINDS:
        return STATIC, elfkind.STATIC_REASON
    if kind.name in ("elf32", "musl"):
        return FOREIGN, f"{kind.reason}: the shim cannot be loaded into it"
    if kind.name != "dynamic":
        return OTHER, kind.reason or "not an ELF program the shim can serve"
    if os.path.basename(kind.interpreter) != "ld-linux-x86-64.so.2":
        return FOREIGN, (f"uses the dynamic loader {kind.interpreter}, not glibc's: the shim "
                         "(built for glibc) cannot be loaded into it")
    return DYNAMIC, None


def _instrumented(path, progress):
    """(how, result or None, problem) for the dynamic program at `path`."""
    from ..rewriter import cache
    from ..rewriter.instrument import instrument, own_file_unchanged
    check_cache_usable(cache.root())
    try:
        result = instrument(path, progress=progress)
    except InputError as e:
        if e.problem.startswith(("truncated", "corrupt", "not an ELF")):
            raise
        return PRELOAD, None, e.problem
    except FerryError as e:
        return PRELOAD, None, e.problem
    except OSError as e:
        raise FerryError(e.filename or cache.root(),
                         f"cannot write the image cache: {(e.strerror or str(e)).lower()}") from None
    return (LIBDIR if own_file_unchanged(result.manifest) else RUN), result, None


def check_cache_usable(root):
    """Refuse, in one line, an image cache the run could not use."""
    from pathlib import Path
    root = Path(root)
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if root.exists() and not root.is_dir():
        raise FerryError(root, "the image cache path is not a directory (set FERRY_CACHE to a directory)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise FerryError(probe, "the image cache is not writable (set FERRY_CACHE to a writable directory)")
    if os.statvfs(probe).f_flag & os.ST_NOEXEC:
        raise FerryError(probe, "the image cache is on a noexec mount: rewritten images cannot run "
                                "from it (set FERRY_CACHE to another directory)")


def prepare(argv, progress=None, depth=0):
    """How to start `argv` enabled (a Launch), instrumenting what is needed."""
    progress = progress or (lambda *a, **k: None)
    given = resolve(argv[0])
    original = os.path.abspath(given)
    if _is_pe(given):
        from .pe_launch import prepare as prepare_pe
        return prepare_pe(argv, given, original, progress)
    kind, detail = classify(given)
    if kind == SCRIPT and detail and depth < 4:
        interp = prepare(detail + [given], progress, depth + 1)
        if interp.how == RUN:
            # The interpreter's rewritten image, run on the script as the
            # kernel would have: [interp, arg, script as given, args...].
            interp.argv = interp.argv + list(argv[1:])
            interp.execfn = given
        else:
            # The kernel runs the script; only the interpreter's libraries change.
            interp.argv, interp.executable = list(argv), given
        interp.original = original
        return interp
    if kind == NOT_ELF:
        # execvp's fallback: /bin/sh runs a file that is neither ELF nor #!.
        inner = prepare(["/bin/sh", given] + list(argv[1:]), progress, depth + 1)
        inner.original = original
        return inner
    if kind == STATIC:
        # the rewritten image carries the shim (rewriter/static_embed.py)
        how, result, problem = _instrumented(original, progress)
        if result is None:
            return Launch(list(argv), given, original, reason=f"{detail}: {problem}")
        return Launch(list(argv), str(result.entry), original, result.manifest, RUN, self_name=given)
    if kind != DYNAMIC:
        return Launch(list(argv), given, original, reason=detail)
    how, result, problem = _instrumented(original, progress)
    if how == RUN:
        return Launch(list(argv), str(result.entry), original, result.manifest, RUN, self_name=given)
    if how == LIBDIR:
        return Launch(list(argv), given, original, result.manifest, LIBDIR, libdir=str(result.out_dir))
    _plan_libc(original)
    return Launch(list(argv), given, original, None, PRELOAD,
                  note=f"{os.path.basename(original)}: {problem}; running it with the shim "
                       "preloaded instead (its libraries are patched when they load)")


def _plan_libc(program):
    """A plan for the C library beside the program's loader, so that a
    preloaded shim has the usual sites patched from the first run on (the
    catch-all catches the rest, and `ferry run` plans those after the run)."""
    from ..rewriter.instrument import instrument
    libc = os.path.join(os.path.dirname(os.path.realpath("/lib64/ld-linux-x86-64.so.2")), "libc.so.6")
    try:
        instrument(libc)
    except FerryError:
        pass
