"""`ferry run`: run a command with the shim and record a run directory.

The command is resolved as the shell would (PATH), instrumented through the
image cache, and started with its own argv[0], stdin, stdout and stderr.
Signals sent to `ferry run` are passed on to it; its exit status, or the
signal that killed it, becomes ours.  The run directory holds what docs/run.md
describes; the previous one is kept as DIR.old.
"""
import os
import platform
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, catchdata, runindex
from .rewriter.errors import FerryError, InputError
from .rewriter.manifest import write_json

DEFAULT_DIR = "ferry.data"
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT,
             signal.SIGWINCH)
# Signals a terminal sends to the whole foreground process group: the program
# gets them directly, so `ferry run` only has to survive them.
FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


@dataclass
class Prepared:
    argv: list            # what the program sees as its argv
    executable: str       # the file actually executed
    original: str         # the program the user named
    manifest: dict        # of the instrumented program, or None
    enabled: bool
    reason: str = None


def _resolve(command):
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
    return os.path.abspath(path)


def _shebang(path):
    with open(path, "rb") as f:
        head = f.read(256)
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    parts = line.split(None, 1)
    return parts if parts else None


def prepare(argv, progress=None):
    """What to execute for `argv`, instrumenting what is needed."""
    from .rewriter.instrument import instrument
    path = _resolve(argv[0])
    interp = _shebang(path)
    if interp:
        # A script: instrument its interpreter, run it on the script.
        inner = prepare([interp[0]] + interp[1:] + [path] + list(argv[1:]), progress)
        inner.original = path
        return inner
    try:
        result = instrument(path, progress=progress or (lambda *a, **k: None))
    except InputError as e:
        if e.problem.startswith(("not an ELF", "truncated", "corrupt")):
            raise
        return Prepared(list(argv), path, path, None, False, e.problem)
    return Prepared(list(argv), str(result.entry), path, result.manifest, True)


def _rotate(out_dir):
    """Keep the previous run as DIR.old; refuse to replace anything else."""
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    from .rundata import is_run_dir
    if not is_run_dir(out_dir):
        raise FerryError(out_dir, "exists and is not a run directory; not replacing it "
                                  "(choose another with -o)")
    old = out_dir.with_name(out_dir.name + ".old")
    if old.exists():
        if not is_run_dir(old):
            raise FerryError(old, "exists and is not a run directory; not replacing it")
        shutil.rmtree(old)
    os.rename(out_dir, old)


def _module_tables(out_dir, manifest):
    (out_dir / "modules").mkdir()
    if not manifest:
        return
    for mod in manifest["modules"]:
        if not mod.get("sites"):
            continue
        name = os.path.basename(mod.get("rewritten") or mod["name"])
        write_json(out_dir / "modules" / f"{name}.json", {
            "name": name, "original": mod["original"],
            "sites": [{k: s.get(k) for k in ("index", "function", "address", "nr", "syscall", "status")}
                      for s in mod["sites"]],
        })


def _iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


def open_run_dir(out_dir, manifest, profile):
    """A fresh run directory (the previous run kept as DIR.old) holding the
    site tables, the profile and the manifest; returns its absolute path."""
    out_dir = Path(out_dir).absolute()
    _rotate(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / "proc").mkdir()
    if os.geteuid() == 0:
        # Processes of the run that switch user (runuser, su, a server's
        # workers) make their own files here too: anyone may create a file,
        # no one can list proc/ but its owner, and the sticky bit keeps every
        # file for its creator alone to replace or remove; the shim creates
        # with O_EXCL|O_NOFOLLOW and the reader takes only regular files.
        # Not needed without root: no process of the run can change user.
        os.chmod(out_dir / "proc", 0o1733)
    _module_tables(out_dir, manifest)
    (out_dir / "profile.toml").write_text(profile.to_toml())
    if manifest:
        write_json(out_dir / "manifest.json", manifest)
    return out_dir


def new_info(command, profile, program, images, pid=None, **extra):
    """info.json of a run that starts now (docs/run.md)."""
    return {
        "format": "ferry-run-info", "version": 1,
        "command": list(command), "cwd": os.getcwd(),
        "start": _iso(time.time()), "end": None, "duration_s": None, "exit": None, "pid": pid,
        "host": platform.node(), "kernel": platform.release(), "ferry_version": __version__,
        "profile": {"name": profile.name, "mode": profile.mode, "path": str(profile.path)},
        "program": program, "images": images, "state": "running", **extra,
    }


def finish_info(info, started, exit_=None):
    """Mark `info` finished, `started` (time.time()) seconds ago."""
    ended = time.time()
    info.update(end=_iso(ended), duration_s=round(ended - started, 6), state="finished", exit=exit_)


def _is_cached_image(path):
    """A file the image cache made (a rewritten program or module), or one it
    has a plan for: its caught sites are the ones the rewriter could not patch."""
    from .rewriter import cache
    try:
        return (Path(path).resolve().is_relative_to(cache.root().resolve())
                or (cache.root() / "plans" / cache.exec_key(path)).is_file())
    except OSError:
        return False


def learn(out_dir):
    """Rewrite the dynamic programs that ran without the shim in this run, so
    that the next run enables them (FX!32 translated in the background after a
    first, emulated run), and plan the libraries whose calls the catch-all
    caught.  Returns the files rewritten or planned."""
    from .procfile import EXEC_PLAIN
    from .rewriter.instrument import instrument
    from .rundata import load_run
    try:
        model = load_run(out_dir)
    except FerryError:
        return []
    done = []
    # Libraries whose calls only the catch-all saw: a plan makes the next
    # run patch them when they load.
    for path in catchdata.modules_to_plan(model.get("catch_all") or {"sites": []}):
        if path in done or _is_cached_image(path):
            continue
        try:
            instrument(path)
            done.append(path)
        except FerryError:
            continue
    for p in model["processes"]:
        if p["enabled"] or p.get("exec_kind") != EXEC_PLAIN or not p["exe"] or p["exe"] in done:
            continue
        try:
            instrument(p["exe"])
            done.append(p["exe"])
        except FerryError:
            continue
    return done


def run(argv, profile, out_dir=DEFAULT_DIR, progress=None, index=True):
    """Run `argv` under `profile` into `out_dir`; returns (info, returncode)."""
    if not argv:
        raise FerryError("ferry run", "no command given (usage: ferry run [OPTIONS] -- COMMAND ARGS...)")
    prepared = prepare(argv, progress)
    out_dir = open_run_dir(out_dir, prepared.manifest, profile)

    env = dict(os.environ)
    # A FERRY_AGG left in the environment must not reach a program run in another mode:
    # the C API's ferry_group_config_default() would take it for this profile's settings.
    env.pop("FERRY_AGG", None)
    env.update(profile.shim_env())
    env["FERRY_RUN_DIR"] = str(out_dir)
    from .rewriter import shimlib
    env["FERRY_SHIM"] = str(shimlib.path().resolve())  # preloaded into children without an image
    started = time.time()
    info = new_info(argv, profile,
                    {"original": prepared.original, "executable": prepared.executable,
                     "enabled": prepared.enabled, "reason": prepared.reason},
                    {prepared.executable: prepared.original})
    write_json(out_dir / "info.json", info)

    # The forwarders are in place before the program exists, so a signal sent
    # as soon as its pid is known (from info.json) cannot kill `ferry run`
    # instead; one that comes before the program started waits for it.
    saved = {s: signal.getsignal(s) for s in FORWARDED + FROM_TERMINAL}
    child, held = [], []

    def forward(sig, _frame):
        if not child:
            held.append(sig)
            return
        try:
            child[0].send_signal(sig)
        except ProcessLookupError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    for s in FROM_TERMINAL:
        signal.signal(s, signal.SIG_IGN)
    try:
        try:
            proc = subprocess.Popen(prepared.argv, executable=prepared.executable, env=env)
        except OSError as e:
            raise FerryError(prepared.executable, f"cannot start: {e.strerror.lower()}") from None
        child.append(proc)
        for sig in held:
            forward(sig, None)
        info["pid"] = proc.pid
        write_json(out_dir / "info.json", info)
        returncode = proc.wait()
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    finish_info(info, started, {"code": returncode, "signal": None} if returncode >= 0
                else {"code": None, "signal": signal.Signals(-returncode).name})
    write_json(out_dir / "info.json", info)
    if index:
        try:
            runindex.add(out_dir, info)
        except Exception as e:  # the run itself is recorded; the index is a convenience
            from .console import err_console
            err_console.print(f"ferry: warning: run not indexed: {e}")
    return info, returncode


def exit_like(returncode):
    """End `ferry run` the way the program ended: same code, or same signal."""
    if returncode >= 0:
        raise SystemExit(returncode)
    sig = -returncode
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    raise SystemExit(128 + sig)
