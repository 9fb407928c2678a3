"""`ferry run`: run a command with the shim and record a run directory.

The command is resolved as the shell would (PATH), instrumented through the
image cache, and started with its own argv[0], stdin, stdout and stderr.
Signals sent to `ferry run` are passed on to it; its exit status, or the
signal that killed it, becomes ours.  The run directory holds what docs/run.md
describes; the previous one is kept as DIR.old.
"""
import os
import platform
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

from . import __version__, catchdata, runindex, runlock, staging
from .base import folios
from .base.errors import FerryError
from .rewriter import cache
from .rewriter.manifest import write_json

DEFAULT_DIR = "ferry.data"
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT,
             signal.SIGWINCH)
# Signals a terminal sends to the whole foreground process group: the program
# gets them directly, so `ferry run` only has to survive them.
FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


def prepare(argv, progress=None):
    """How to start `argv` enabled (injector/launch.py)."""
    from .injector.launch import prepare as _prepare
    return _prepare(argv, progress)


class _Rotation:
    """What opening a run directory did to the runs already there: DIR moved
    to DIR.old (`moved`), the previous DIR.old parked under a hidden name.
    `commit` (the program started) removes the parked run; `undo` (it never
    did) removes the new directory and puts both back, so that a run that
    failed to start leaves nothing behind and takes nothing away."""

    def __init__(self, out_dir):
        self.out_dir, self.old = out_dir, out_dir.with_name(out_dir.name + ".old")
        self.parked, self.moved, self.made = None, False, False

    def commit(self):
        parked, self.parked = self.parked, None
        if parked is not None:
            try:
                staging.discard(parked)
            except OSError as e:
                from .console import err_console
                err_console.print(f"ferry: warning: {parked}: the run replaced as "
                                  f"{self.old.name} not removed: {e.strerror.lower() if e.strerror else e}")

    def undo(self):
        try:
            if self.made:
                staging.discard(self.out_dir)
            if self.moved and os.path.lexists(self.out_dir):
                self.commit()  # DIR is another run's now: the older run goes, as it would have
                return
            if self.moved:
                os.rename(self.old, self.out_dir)
            if self.parked is not None:
                os.rename(self.parked, self.old)
        except OSError as e:
            from .console import err_console
            err_console.print(f"ferry: warning: {self.out_dir}: the runs there not put back as they "
                              f"were: {e.strerror.lower() if e.strerror else e}")


def _rotate(out_dir):
    """Keep the previous run as DIR.old; refuse to replace anything else, or a
    run that is still going on.  Returns the _Rotation."""
    rotation = _Rotation(out_dir)
    if not out_dir.exists() and not out_dir.is_symlink():
        return rotation
    from .rundata import is_run_dir
    if not is_run_dir(out_dir):
        raise FerryError(out_dir, "exists and is not a run directory; not replacing it "
                                  "(choose another with -o)")
    runlock.refuse_if_live(out_dir)
    _finish_staging(out_dir)
    old = rotation.old
    if old.exists():
        if not is_run_dir(old):
            raise FerryError(old, "exists and is not a run directory; not replacing it")
        runlock.refuse_if_live(old)
        parked = old.with_name(f".{old.name}.replaced-{os.getpid()}")
        os.rename(old, parked)
        rotation.parked = parked
    try:
        os.rename(out_dir, old)
    except OSError:
        rotation.undo()
        raise
    rotation.moved = True
    return rotation


def _finish_staging(out_dir):
    """Move a run's records out of memory (ferry/staging.py); where they
    cannot be moved yet they stay there, read through proc/."""
    try:
        if staging.finish(out_dir) == "live":
            staging.finish_later(out_dir)
    except OSError as e:
        from .console import err_console
        err_console.print(f"ferry: warning: {out_dir}/proc: records not moved out of memory: "
                          f"{e.strerror.lower() if e.strerror else e}")


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


def open_run_dir(out_dir, manifest, profile, stage=False):
    """A fresh run directory (the previous run kept as DIR.old) holding the
    site tables, the profile and the manifest; returns its absolute path.
    With `stage`, proc/ is kept in memory until the run ends (staging.py)."""
    out_dir, rotation = _open_run_dir(out_dir, manifest, profile, stage)
    rotation.commit()
    return out_dir


def _open_run_dir(out_dir, manifest, profile, stage):
    """open_run_dir's work; returns (its path, the _Rotation to commit once
    the program started, or to undo)."""
    out_dir = Path(out_dir).absolute()
    try:
        rotation = _rotate(out_dir)
    except OSError as e:
        raise FerryError(e.filename or out_dir, f"cannot create the run directory: {e.strerror.lower()}") from None
    try:
        try:
            out_dir.mkdir(parents=True)
        except FileExistsError:
            raise FerryError(out_dir, "another run is starting in this directory (choose another with -o)") from None
        rotation.made = True
        if not (stage and staging.stage(out_dir)):
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
    except OSError as e:
        rotation.undo()
        raise FerryError(e.filename or out_dir, f"cannot create the run directory: {e.strerror.lower()}") from None
    except BaseException:
        rotation.undo()
        raise
    return out_dir, rotation


def new_info(command, profile, program, images, pid=None, **extra):
    """info.json of a run that starts now (docs/run.md)."""
    return {
        "format": "ferry-run-info", "version": 1,
        "command": list(command), "cwd": os.getcwd(),
        "start": _iso(time.time()), "end": None, "duration_s": None, "exit": None, "pid": pid,
        "host": platform.node(), "kernel": platform.release(), "ferry_version": __version__,
        "profile": {"name": profile.name, "mode": profile.mode, "path": str(profile.path),
                    "threads": profile.agg_threads},
        "program": program, "images": images, "state": "running", **extra,
    }


def finish_info(info, started, exit_=None, ended=None):
    """Mark `info` finished: it ran from `started` to `ended` (time.monotonic()
    readings; `ended` None: now)."""
    now = time.monotonic()
    ended = now if ended is None else ended
    info.update(end=_iso(time.time() - (now - ended)), duration_s=round(ended - started, 6),
                state="finished", exit=exit_)


def _is_cached_image(path):
    """A file the image cache made (a rewritten program or module), or one it
    has a plan for: its caught sites are the ones the rewriter could not patch."""
    try:
        return (Path(path).resolve().is_relative_to(cache.root().resolve())
                or (cache.root() / "plans" / cache.exec_key(path)).is_file())
    except OSError:
        return False


def learn(out_dir):
    """Rewrite the programs that ran without the shim in this run for want of
    a rewritten image, so that the next run enables them (FX!32 translated in
    the background after a first, emulated run), plan the libraries whose
    calls the catch-all caught, and give the programs patched at load time
    their rewritten libraries.  Returns the files rewritten or planned; what
    could not be rewritten, and why, goes into the run (learned.json: its
    report then says why the next run will not enable it either)."""
    from .rewriter.instrument import instrument
    from .rundata import LEARNABLE, LEARNED, load_run
    try:
        model = load_run(out_dir, reuse=True)
    except FerryError:
        return []
    done, failed = [], {}
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
        if p["enabled"] or p.get("exec_kind") not in LEARNABLE or not p["exe"] or \
                p["exe"] in done or p["exe"] in failed:
            continue
        try:
            instrument(p["exe"])
            done.append(p["exe"])
        except FerryError as e:
            failed[p["exe"]] = e.problem
    if failed:
        write_json(Path(out_dir) / LEARNED, {"format": "ferry-learned", "version": 1, "failed": failed})
    _prepare_libraries(model, done)
    return done


def _prepare_libraries(model, done):
    """Programs whose libraries the shim patched at load time get a directory
    of the cache's rewritten libraries: their next start applies no plan."""
    from .rewriter import cache, shimlib
    from .rewriter.instrument import prepare_libraries
    seen = set(done)
    for p in model["processes"]:
        exe = p["exe"]
        if not p["enabled"] or p.get("enabled_by") != "load-time patch" or not exe or exe in seen:
            continue
        seen.add(exe)
        try:
            if not (cache.root() / "exec" / cache.exec_name(exe, shimlib.build_id())).exists():
                prepare_libraries(exe)    # the exec hook had no image for it
        except (FerryError, OSError):
            continue


def _user_environment():
    """The environment `ferry run` was given.  Python changes one variable of
    its own at start-up (LC_CTYPE, when it coerces the C locale to UTF-8,
    PEP 538); the program must get the user's value, as natively."""
    env = dict(os.environ)
    try:
        with open("/proc/self/environ", "rb") as f:
            given = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    except OSError:
        return env
    original = given.get(b"LC_CTYPE")
    if original is None:
        env.pop("LC_CTYPE", None)
    else:
        env["LC_CTYPE"] = os.fsdecode(original)
    return env


def _program_env(launch, profile, out_dir):
    """The environment the program starts with: its own, and for an enabled
    program what the shim needs (the shim takes it out again before the
    program's code runs, shim/src/environ.c)."""
    from .injector.environment import enabled_env, run_settings
    base = _user_environment()
    if not launch.enabled:
        return base
    if launch.how == "wine":
        from .injector.pe_launch import program_env
        return program_env(base, profile, out_dir, launch.image)
    settings = run_settings(profile, out_dir)
    from .injector.pe_launch import linux_settings
    settings.update(linux_settings(profile, out_dir))   # `wine app.exe` from a script
    if launch.self_name:   # an image: the program is told its own name (shim/src/selfexe.c)
        settings["FERRY_SELF"] = launch.self_name
        if launch.execfn:
            settings["FERRY_EXECFN"] = launch.execfn
    return enabled_env(base, settings, launch.how, shim=settings["FERRY_SHIM"],
                       libdir=launch.libdir)


def _images(launch):
    """{file started: the program it stands for} of the run's command, for
    the report (a rewritten image is named as its original)."""
    images = {os.path.realpath(launch.executable): launch.original}
    if launch.image:     # ferry.dll names a Windows program by its Windows path
        from .injector.pe_launch import win_path
        images[win_path(launch.image)] = win_path(launch.original)
    return images


class _AfterStart(threading.Thread):
    """What `ferry run` does once the program started, beside it: the run it
    replaced goes, and info.json says the program's pid.  In a thread, so
    that the program's end is seen when it comes."""

    def __init__(self, rotation, info_path, info):
        super().__init__(name="ferry-after-start", daemon=True)
        self.rotation, self.info_path, self.info = rotation, info_path, dict(info)
        self.error = None

    def run(self):
        try:
            self.rotation.commit()
            write_json(self.info_path, self.info)
        except BaseException as e:  # raised again by the thread that waits
            self.error = e


def _after_start(rotation, info_path, info):
    work = _AfterStart(rotation, info_path, info)
    work.start()
    return work


def _child_setup(parent):
    """In the child, before exec: it must not outlive `ferry run` silently
    (it is killed with `ferry run` if that dies, e.g. of SIGKILL; the run is
    then reported as cut off)."""
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def setup():
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # `ferry run` died before the line above
            os._exit(128 + signal.SIGKILL)
    return setup


def run(argv, profile, out_dir=DEFAULT_DIR, progress=None, index=True, stage=True):
    """Run `argv` under `profile` into `out_dir`; returns (info, returncode).
    With `stage`, the process records are kept in memory while the program
    runs and moved into `out_dir` once it ended (staging.py)."""
    if not argv:
        raise FerryError("ferry run", "no command given (usage: ferry run [OPTIONS] -- COMMAND ARGS...)")
    launch = prepare(argv, progress)
    if profile.mode == "aggregate" and (launch.manifest or {}).get("static"):
        # the shim inside a static program has no engine (shim/src/static_noagg.c)
        raise FerryError(launch.original, "statically linked: aggregation profiles are not "
                                          "available for static programs (trace, count and off are)")
    if profile.agg_threads == "fibers" and launch.how == "wine":
        # ferry.dll has carriers for fibers made through its API only; running
        # the program anyway would only count its calls
        raise FerryError(launch.original, "a Windows program's threads cannot run as fibers "
                                          f"(profile {profile.name}: threads = \"fibers\"); "
                                          "ferry.dll aggregates the calls of fibers a program "
                                          "makes through its API, under `-p aggregate`")
    # A profile that records every call keeps a ring of events per thread
    # (event_buffer x 32 bytes, up to 512 MiB): too much to hold in memory.
    stage = stage and not (profile.mode == "trace" and profile.events)
    # What can fail for want of a part (the shim) fails before the run
    # directory is touched.
    env = _program_env(launch, profile, Path(out_dir).absolute())
    # the images the programs' processes map, in large folios again after a
    # reboot, where they were read back in 4 KiB pages (base/folios.py);
    # the text patched from plans once a process of this boot mapped it
    folios.warm(cache.linked_images(), cache.root())
    folios.warm(cache.plan_texts(), cache.root(), in_use="cached")
    out_dir, rotation = _open_run_dir(out_dir, launch.manifest, profile, stage)
    lock, child = None, []
    try:
        lock = runlock.hold(out_dir)
        info = new_info(argv, profile,
                        {"original": launch.original, "executable": launch.executable,
                         "enabled": launch.enabled, "reason": launch.reason, "how": launch.how,
                         "note": launch.note},
                        _images(launch))
        write_json(out_dir / "info.json", info)

        # The forwarders are in place before the program exists, so a signal sent
        # as soon as its pid is known (from info.json) cannot kill `ferry run`
        # instead; one that comes before the program started waits for it.  A
        # signal `ferry run` was told to ignore stays ignored, for the program too.
        saved = {s: signal.getsignal(s) for s in FORWARDED + FROM_TERMINAL}
        held = []

        def forward(sig, _frame):
            if not child:
                held.append(sig)
                return
            try:
                child[0].send_signal(sig)
            except ProcessLookupError:
                pass

        def survive(_sig, _frame):
            # The terminal sends these to the whole foreground group: the program
            # has them already.  A handler, unlike SIG_IGN, is not inherited.
            pass

        for s in FORWARDED:
            if saved[s] is not signal.SIG_IGN:
                signal.signal(s, forward)
        for s in FROM_TERMINAL:
            if saved[s] is not signal.SIG_IGN:
                signal.signal(s, survive)
        started_work = None
        try:
            setup = _child_setup(os.getpid())
            # The program's duration is its own: from its start to the moment
            # its end is known, without `ferry run`'s work around it (writing
            # info.json, removing the run it replaced: ~1-5 ms, which a short
            # program's duration counted as its own).
            started = time.monotonic()
            try:
                # Descriptors `ferry run` inherited go on to the program, as they
                # would natively; ferry's own are close-on-exec.
                proc = subprocess.Popen(launch.argv, executable=launch.executable, env=env,
                                        close_fds=False, preexec_fn=setup)
            except OSError as e:
                raise FerryError(launch.executable, f"cannot start: {e.strerror.lower()}") from None
            child.append(proc)
            for sig in held:
                forward(sig, None)
            info["pid"] = proc.pid
            started_work = _after_start(rotation, out_dir / "info.json", info)
            returncode = proc.wait()
            ended = time.monotonic()
        finally:
            if started_work is not None:
                started_work.join()   # not cut off half done, whatever ended the wait
            for s, handler in saved.items():
                if handler is not None:
                    signal.signal(s, handler)
        if started_work.error:
            raise started_work.error
        finish_info(info, started, {"code": returncode, "signal": None} if returncode >= 0
                    else {"code": None, "signal": _signal_name(-returncode)}, ended)
        write_json(out_dir / "info.json", info)
    except BaseException:
        if not child:
            # the program never started: no run, and the runs there as they were
            if lock is not None:
                runlock.release(lock)
            rotation.undo()
            raise
        _finish_staging(out_dir)  # records left in memory would have nobody to move them
        raise
    _finish_staging(out_dir)
    runlock.release(lock)
    if index:
        try:
            runindex.add(out_dir, info)
        except Exception as e:  # the run itself is recorded; the index is a convenience
            from .console import err_console
            err_console.print(f"ferry: warning: run not indexed: {e}")
    return info, returncode


def _signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def exit_like(returncode):
    """End `ferry run` the way the program ended: same code, or same signal."""
    if returncode >= 0:
        raise SystemExit(returncode)
    sig = -returncode
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    # The program may have dumped core; `ferry run` must not add its own.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    raise SystemExit(128 + sig)
