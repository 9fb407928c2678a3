"""A run directory, read into the run model of docs/run.md.

`ferry run` writes info.json, the profile, and the module tables (which site
index is which function); the shim writes one process file per process image.
This module joins them: processes with how they ended, syscalls summed over
every thread of every process, the hottest sites, and the event timeline.
"""
import json
import os
import signal
from itertools import compress
from pathlib import Path

from . import aggdata, catchdata, procfile, runlock
from .base.errors import FerryError, InputError
from .rewriter import elfkind

NOT_ENABLED = {
    procfile.EXEC_REWRITTEN: "its rewritten image did not start the shim",
    procfile.EXEC_PLAIN: "ran a dynamic program that has no rewritten image yet",
    procfile.EXEC_SETUID: "set-user-ID, set-group-ID or file-capability program: never enabled",
    procfile.EXEC_STATIC: "statically linked program without a rewritten image",
    procfile.EXEC_STATIC_PIE: "statically linked (static-pie) program without a rewritten image",
    procfile.EXEC_UNKNOWN: "not an ELF program the shim could read",
    procfile.EXEC_FOREIGN: "an ELF program for another machine: the shim cannot be loaded into it",
    procfile.EXEC_ELF32: f"{elfkind.KINDS['elf32']}: the shim cannot be loaded into it",
    procfile.EXEC_LOADER: ("uses a dynamic loader other than glibc's x86-64 ld.so{loader}: the shim "
                           "(built for glibc) cannot be loaded into it"),
    procfile.EXEC_PACKED: elfkind.KINDS["packed"],
    procfile.EXEC_UNREADABLE: ("the process could run the file but not read it, and it has no "
                               "rewritten image: the exec hook could not tell what it is"),
    procfile.EXEC_NO_ROOM: ("its environment or arguments did not fit the exec hook's tables (more "
                            "than 1024 variables or 512 arguments, or memory it could not read), so "
                            "the hook could not add the run's settings to them"),
    procfile.EXEC_SANDBOXED: ("the process that ran it had confined its system calls (a seccomp "
                              "filter, which stays in force in the program it runs): the shim, "
                              "which would start there not knowing the filter, is left out"),
    procfile.EXEC_WINDOWS: "wine, started on a Windows program with ferry.dll: the program and "
                           "its children are the Windows processes of this run",
}
# Kinds `ferry run` rewrites after the run (runner.learn), and where it says what it
# could not rewrite
LEARNABLE = (procfile.EXEC_PLAIN, procfile.EXEC_STATIC, procfile.EXEC_STATIC_PIE)
LEARNED = "learned.json"
LEARN_PROMISE = " (`ferry run` rewrites it after this run; the next run enables it)"
PREINIT_NOTE = ("calls made before the shim initialized (the dynamic loader mapping the "
                "program's libraries) are not seen and not counted")


def is_run_dir(path):
    return (Path(path) / "info.json").is_file() and (Path(path) / "proc").is_dir()


def read_info(run_dir):
    p = Path(run_dir) / "info.json"
    try:
        info = json.loads(p.read_text())
    except FileNotFoundError:
        raise FerryError(run_dir, "not a run directory (no info.json; make one with `ferry run`)") from None
    except (OSError, ValueError) as e:
        raise FerryError(p, f"corrupt run information: {e}") from None
    if not isinstance(info, dict) or info.get("format") != "ferry-run-info":
        raise FerryError(p, "corrupt run information: not written by `ferry run`")
    return info


def _module_tables(run_dir):
    """{module file name: [site dict by index]} from the run's module tables."""
    tables = {}
    for p in sorted((Path(run_dir) / "modules").glob("*.json")):
        try:
            record = json.loads(p.read_text())
            tables[record["name"]] = record["sites"]
        except (OSError, ValueError, KeyError, TypeError):
            raise FerryError(p, "corrupt module table") from None
    return tables


def _signal_name(sig):
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _exit_from_status(status):
    """An exit dict from a wait status."""
    if os.WIFSIGNALED(status):
        return {"code": None, "signal": _signal_name(os.WTERMSIG(status))}
    return {"code": os.WEXITSTATUS(status), "signal": None}


def _iso(real_ns):
    if not real_ns:
        return None
    import datetime
    return datetime.datetime.fromtimestamp(real_ns / 1e9).astimezone().isoformat(timespec="milliseconds")


def load_processes(proc_dir):
    """The process files of a run's proc/, oldest image of each pid first."""
    try:
        return procfile.read_dir(proc_dir)  # records never filled in left out
    except procfile.ProcFileError as e:
        raise FerryError(e.path, e.problem) from None


def bare_proc_dir(path):
    """The proc/ directory that `path`, a directory without info.json, stands for:
    itself or its proc/, whichever holds process files (a proc/ copied out of a
    run, or a program run with FERRY_RUN_DIR and no `ferry run`); else None."""
    for d in (Path(path), Path(path) / "proc"):
        if d.is_dir() and any(d.glob("*.ferry")):
            return d
    return None


# The model this process last loaded, and the state of the files it was made of.
_last_load = (None, None)


def _inputs(run_dir):
    """Name, size and mtime of every file a run model of `run_dir` is made of."""
    found = []
    for d in (run_dir, run_dir / "proc", run_dir / "modules"):
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    if e.is_file(follow_symlinks=False):
                        s = e.stat(follow_symlinks=False)
                        found.append((e.path, s.st_size, s.st_mtime_ns))
        except OSError:
            found.append((str(d), None, None))
    return sorted(found)


def load_run(run_dir, reuse=False):
    """The run model of `run_dir` (docs/run.md), or of a bare proc/ directory:
    what its process files say, without what only `ferry run` knows (the
    command, its exit, the profile).  With `reuse`, the model this process
    loaded last, if it was of `run_dir` and none of the files it was made of
    changed since: `ferry run` needs its run twice (to index it, then to
    learn from it), and a run of a thousand processes takes a second to read."""
    global _last_load
    run_dir = Path(run_dir)
    # by its absolute name: the files' names are part of the key, and a run
    # asked for as `ferry.data` and then as /abs/ferry.data (`ferry run`
    # indexes the run by one, learns from it by the other) was read twice
    absolute = run_dir.absolute()
    key = (str(absolute), _inputs(absolute))
    if reuse and _last_load[0] == key:
        return _last_load[1]
    with procfile.collector_paused():
        model = _load_run(run_dir)
    _last_load = (key, model)
    return model


def _load_run(run_dir):
    if not run_dir.is_dir():
        raise FerryError(run_dir, "no such run directory" if not run_dir.exists() else "not a directory")
    if not (run_dir / "info.json").exists():
        proc = bare_proc_dir(run_dir)
        if proc is not None:
            return _model(proc.parent, proc, {}, os.stat(proc).st_uid)
    info = read_info(run_dir)
    _finish_staging(run_dir)
    if not (run_dir / "proc").is_dir():
        if (run_dir / "proc").is_symlink():
            raise FerryError(run_dir / "proc", f"the records were kept in memory ({os.readlink(run_dir / 'proc')}) "
                                               "and are gone: the machine restarted before they were moved")
        raise FerryError(run_dir, "not a run directory (no proc/ directory)")
    return _model(run_dir, run_dir / "proc", info, os.stat(run_dir).st_uid)


def _finish_staging(run_dir):
    """Records of a run still in memory (its `ferry run` was killed, or some
    of its processes outlived it) move into the run once no process of it is
    left; whoever reads the run first then does it (staging.py)."""
    from . import runlock, staging
    if staging.staged_dir(run_dir) is None or runlock.is_live(run_dir):
        return
    try:
        staging.finish(run_dir)
    except OSError:
        pass    # not ours to move (another user's run): read where they are


def _model(run_dir, proc_dir, info, owner):
    """The run model of the process files in `proc_dir`, with the run's `info`;
    `owner` started the run."""
    files = load_processes(proc_dir)
    tables = _module_tables(run_dir)
    images = info.get("images", {})
    t0_mono = min([f.start_mono_ns for f in files] or [0])
    waited, terminated = {}, {}
    for f in files:
        for pid, status, _ in f.waits:
            if f.windows:   # ferry.dll: a process this one ended with TerminateProcess, and its code
                terminated[pid] = (status, f.pid)
            else:
                waited[pid] = status

    programs = _programs(files, images)
    processes = _processes(files, info, programs, waited, _Creators(proc_dir, owner), terminated)
    _say_what_learning_did(processes, _learn_failures(run_dir))
    program = info.get("program") or {}
    if program.get("enabled") is False and not any(p["pid"] == info.get("pid") and not p.get("windows")
                                                   for p in processes):
        # The command itself ran without the shim: it wrote nothing, `ferry
        # run` knows why.
        processes.insert(0, _not_enabled_row(info.get("pid"), None, program.get("original"),
                                             info.get("exit"), program.get("reason") or
                                             "not enabled", None))
    if runlock.cut_off(run_dir, info):
        info = dict(info, state="cut off")
    syscalls, sites, events = {}, {}, []
    for f in files:
        _add_syscalls(syscalls, f)
        _add_sites(sites, f, tables)
        events.extend(_events(f, t0_mono, tables))
    total_calls = sum(s["calls"] for s in syscalls.values())
    shim_calls = {}
    for f in files:
        for nr, c in f.internal.items():
            shim_calls[f.name_of(nr)] = shim_calls.get(f.name_of(nr), 0) + c
    events.sort(key=lambda e: e["start_ns"])
    return {
        "format": "ferry-run",
        "version": 1,
        "info": {k: v for k, v in info.items() if k not in ("format", "images")},
        "processes": processes,
        "syscalls": sorted(syscalls.values(), key=lambda s: (-s["time_ns"], -s["calls"], s["nr"])),
        "sites": sorted(sites.values(), key=lambda s: (-s["calls"], s["id"])),
        "preinit": {"calls": None, "by_syscall": {}, "note": PREINIT_NOTE},
        "shim_calls": dict(sorted(shim_calls.items())),
        "totals": {"calls": total_calls,
                   "errors": sum(s["errors"] for s in syscalls.values()),
                   "time_ns": sum(s["time_ns"] for s in syscalls.values()),
                   "processes": len(processes)},
        "events": events,
        "threads": [t for f in files for t in _threads(f, programs[id(f)])],
        "catch_all": catchdata.summarize([f.caught for f in files]),
        "aggregation": aggdata.summarize([(f.pid, f.aggregation) for f in files],
                                         aggdata.profile_pools(_run_profile(run_dir, info))),
    }


def _run_profile(run_dir, info):
    """The profile the run used (profile.toml), or None when it cannot be read: it only
    names the pools in the report."""
    if (info.get("profile") or {}).get("mode") != "aggregate":
        return None
    from .profiles import loads
    try:
        return loads((Path(run_dir) / "profile.toml").read_text(), run_dir / "profile.toml")
    except (OSError, UnicodeDecodeError, FerryError):
        return None


def _original_of(exe, images, memo={}):
    """The program a rewritten image was made from: recorded by `ferry run`
    for the command itself, else in the manifest beside the image."""
    if exe in images:
        return images[exe]
    if exe not in memo:
        memo[exe] = exe
        try:
            m = json.loads((Path(exe).parent / "manifest.json").read_text())
            if m.get("format") == "ferry-manifest" and m.get("entry") == Path(exe).name:
                memo[exe] = m["input"]
        except (OSError, ValueError):
            pass
    return memo[exe]


def _programs(files, images):
    """{id(record): the program it is of}: a rewritten image is named as the
    file it was made from.  The cache keeps one image of identical files,
    named after the first it was made from; an image whose process exec'd
    it by another file's path (a static program's image, which names itself
    by its place in the cache) is named as that path, when it is an ELF
    program still (not a script the image interprets) and not a name in
    /proc (`/proc/self/exe` is the exec'ing process's file, not the reader's)."""
    execd = {(f.windows, f.pid, f.seq): f.exec_path for f in files
             if f.state == procfile.STATE_EXEC and f.exec_path}
    out = {}
    for f in files:
        exe = _original_of(f.exe, images)
        given = execd.get((f.windows, f.pid, f.seq - 1))
        if (exe != f.exe and f.exe not in images and given and given != exe and
                not given.startswith("/proc/") and _is_elf(given)):
            exe = given
        out[id(f)] = exe
    return out


def _is_elf(path, memo={}):
    if path not in memo:
        try:
            with open(path, "rb") as f:
                memo[path] = os.path.isabs(path) and f.read(4) == b"\x7fELF"
        except OSError:
            memo[path] = False
    return memo[path]


class _Creators:
    """Who can create a process file in the run's proc/: every directory
    above it searchable, proc/ itself writable and searchable (by owner,
    group or other bits; ACLs aside).  A process that changed user and left
    no file is explained by this, not by a guess."""

    def __init__(self, proc_dir, owner):
        self.proc = Path(os.path.abspath(proc_dir))
        self.owner = owner
        self.memo = {}

    @staticmethod
    def _groups(uid):
        import pwd
        try:
            pw = pwd.getpwuid(uid)
            return set(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except (KeyError, OSError):
            return set()

    def _allows(self, uid, groups, path, bits):
        st = os.stat(path)
        if st.st_uid == uid:
            mode = (st.st_mode >> 6) & 7
        elif st.st_gid in groups:
            mode = (st.st_mode >> 3) & 7
        else:
            mode = st.st_mode & 7
        return mode & bits == bits

    def can_create(self, uid):
        if uid == 0:
            return True
        if uid not in self.memo:
            groups = self._groups(uid)
            try:
                ok = all(self._allows(uid, groups, d, 1) for d in reversed(self.proc.parents)) and \
                    self._allows(uid, groups, self.proc, 3)
            except OSError:
                ok = False
            self.memo[uid] = ok
        return self.memo[uid]

    def why_not(self, uid):
        import pwd
        try:
            who = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            who = f"uid {uid}"
        if not self.proc.stat().st_mode & 0o002:
            where = (f"{self.proc} is writable only by its owner (runs started by root open it "
                     "to the users a process switches to)")
        else:
            where = (f"a directory above {self.proc} is not searchable by that user; "
                     "record into a directory every user can reach (ferry run -o DIR)")
        return f"switched to {who} before this exec and could not create its process file: {where}"


def _not_enabled_reason(f, exit_, creators):
    """Why the image `f` exec'd left no process file of its own."""
    if f.exec_kind in (procfile.EXEC_REWRITTEN, procfile.EXEC_PLAIN) and f.exec_uid is not None \
            and f.exec_uid != creators.owner and not creators.can_create(f.exec_uid):
        return creators.why_not(f.exec_uid)
    if exit_ and exit_.get("signal") and f.exec_kind in (procfile.EXEC_REWRITTEN, procfile.EXEC_PLAIN):
        return f"killed by {exit_['signal']} right after its exec, before the shim started in it"
    reason = NOT_ENABLED.get(f.exec_kind, NOT_ENABLED[procfile.EXEC_UNKNOWN])
    return reason.format(loader=_loader_named(f.exec_path)) if f.exec_kind == procfile.EXEC_LOADER \
        else reason


def _learn_failures(run_dir):
    """{program: why it could not be rewritten} after the run (learned.json), or {}."""
    try:
        failed = json.loads((Path(run_dir) / LEARNED).read_text()).get("failed")
    except (OSError, ValueError, AttributeError):
        return {}
    return failed if isinstance(failed, dict) else {}


def _say_what_learning_did(processes, failed):
    """A process that ran without the shim for want of a rewritten image: whether the
    next run enables it (`ferry run` rewrites it after the run) or why not."""
    for p in processes:
        if p["enabled"] or p.get("exec_kind") not in LEARNABLE or not p["exe"] or \
                p["reason"] != NOT_ENABLED[p["exec_kind"]]:     # another cause said (a user switch, ...)
            continue
        if p["exe"] in failed:
            p["reason"] += f"; rewriting it after the run failed: {failed[p['exe']]}"
        elif p.get("exec_kind") == procfile.EXEC_PLAIN:
            p["reason"] += LEARN_PROMISE


def _loader_named(path):
    """' (NAME)': the loader the program at `path` names, if it still does."""
    try:
        name = elfkind.classify(path).interpreter
    except InputError:
        return ""
    return f" ({name})" if name else ""


def _enabled_by(f):
    if not f.modules:
        return None
    if f.windows:
        return "ferry.dll (ntdll patched in memory)"
    return "load-time patch" if f.load_patched else "rewritten image"


def _processes(files, info, programs, waited, creators, terminated):
    out = []
    later_images = {}
    # Windows pids (wine's) and Linux pids are two numberings that a mixed run
    # (a script running wine) holds side by side: a number means a process
    # only with the side it is on.  wait4 statuses and the run's own exit are
    # of Linux processes; TerminateProcess records of Windows ones.
    for f in files:
        later_images.setdefault((f.windows, f.pid), set()).add(f.seq)
    root_pid = info.get("pid")
    for f in files:
        calls = sum(sum(b.calls) + b.invalid for b in f.blocks)
        errors = sum(s.errors for b in f.blocks for s in b.nr.values())
        ticks = sum(s.ticks for b in f.blocks for s in b.nr.values())
        exe = programs[id(f)]
        entry = {
            "pid": f.pid, "ppid": f.ppid, "exe": exe, "image": f.exe, "argv": f.argv,
            "start": _iso(f.start_real_ns), "end": _iso(f.end_real_ns),
            "duration_s": round((f.end_mono_ns - f.start_mono_ns) / 1e9, 6) if f.end_mono_ns else None,
            "exit": None, "state": "unfinished", "exec": None,
            "enabled": bool(f.modules), "reason": None, "mode": f.mode, "uid": f.uid,
            "enabled_by": _enabled_by(f),
            "windows": f.windows,
            "threads": len(f.blocks), "calls": calls, "errors": errors,
            "time_ns": round(f.ticks_to_ns(ticks)),
            "aggregation": f.aggregation,
            "caught": f.caught["caught"] if f.caught else None,
            "start_retries": f.start_retries,
        }
        if not f.modules:
            entry["reason"] = ("the shim was preloaded, but none of the program's libraries has a "
                               "patch plan yet")
        if f.overflow:
            who = "ferry.dll" if f.windows else "the shim"
            # the shim's threads take a block once one is given back; ferry.dll's never do
            entry["reason"] = (f"{f.overflow} threads beyond {who}'s {f.max_blocks}-block table "
                               "were not counted" + ("" if f.windows else " while every block was taken"))
        if f.state == procfile.STATE_EXITED:
            entry["state"] = "exited"
            entry["exit"] = {"code": f.exit_code & 0xFF, "signal": None}
        elif f.state == procfile.STATE_EXEC:
            entry["state"] = "exec"
            entry["exec"] = f.exec_path
        elif f.state == procfile.STATE_DETACHED:
            entry["state"] = "detached"
        if f.state == procfile.STATE_RUNNING and f.windows and f.pid in terminated:
            # a Windows process never hears of its end by TerminateProcess: its killer tells
            code, killer = terminated[f.pid]
            entry["state"], entry["exit"] = "killed", {"code": code & 0xFF, "signal": None}
            entry["reason"] = f"ended by TerminateProcess in process {killer}"
        elif f.state == procfile.STATE_RUNNING and not f.windows:
            status = waited.get(f.pid)
            if status is None and f.pid == root_pid and info.get("exit"):
                entry["exit"] = info["exit"]
                entry["state"] = "killed" if info["exit"].get("signal") else "exited"
            elif status is not None:
                entry["exit"] = _exit_from_status(status)
                entry["state"] = "killed" if entry["exit"]["signal"] else "exited"
        out.append(entry)
        # A name another user took first makes the next image's seq skip one.
        if f.state == procfile.STATE_EXEC and not any(s > f.seq for s in later_images[(f.windows, f.pid)]):
            # The exec replaced an enabled image with one that carries no shim.
            status = waited.get(f.pid)
            if status is None and f.pid == root_pid:
                exit_ = info.get("exit")
            else:
                exit_ = _exit_from_status(status) if status is not None else None
            out.append(_not_enabled_row(f.pid, f.ppid, f.exec_path, exit_,
                                        _not_enabled_reason(f, exit_, creators), f.exec_kind,
                                        start=_iso(f.end_real_ns), uid=f.exec_uid))
    return out


def _not_enabled_row(pid, ppid, exe, exit_, reason, exec_kind, start=None, uid=None):
    """The row of a process that ran without the shim."""
    return {
        "pid": pid, "ppid": ppid, "exe": exe, "argv": None,
        "start": start, "end": None, "duration_s": None,
        "exit": exit_, "state": ("killed" if exit_ and exit_.get("signal") else "exited") if exit_
        else "unfinished",
        "exec": None, "enabled": False, "enabled_by": None,
        "reason": reason, "exec_kind": exec_kind,
        "mode": None, "uid": uid, "threads": None, "calls": None, "errors": None, "time_ns": None,
        "aggregation": None, "caught": None,
    }


def _threads(f, exe):
    """One entry per thread of a process file: its counts, and its calls by syscall, most
    first (the file keeps a block per thread)."""
    out = []
    for b in f.blocks:
        by_name = {}
        for nr, c in procfile.nonzero(b.calls).items():
            name = f.name_of(nr)
            by_name[name] = by_name.get(name, 0) + c
        out.append({"pid": f.pid, "tid": b.tid, "exe": exe,
                    "calls": sum(b.calls) + b.invalid,
                    "errors": sum(s.errors for s in b.nr.values()),
                    "time_ns": round(f.ticks_to_ns(sum(s.ticks for s in b.nr.values()))),
                    "syscalls": dict(sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0])))})
    return out


def _add_syscalls(acc, f):
    # Called for every block of every record: a run of thousands of
    # processes spent a sixth of its model here when each call made the
    # entry it might add and summed whole histograms, mostly zeros.
    to_ns = f.ticks_to_ns
    buckets = range(procfile.HIST_BUCKETS)
    for b in f.blocks:
        figures = b.nr
        for nr, c in procfile.nonzero(b.calls).items():
            # a Windows process's numbers are its own (ferry.dll's name table)
            key = f.name_of(nr) if f.windows else nr
            s = acc.get(key)
            if s is None:
                s = acc[key] = {"nr": nr, "name": f.name_of(nr), "calls": 0, "errors": 0, "errnos": {},
                                "time_ns": 0, "min_ns": None, "max_ns": None,
                                "hist": [0] * procfile.HIST_BUCKETS}
            s["calls"] += c
            st = figures.get(nr)
            if st is None:
                continue
            s["errors"] += st.errors
            s["time_ns"] += round(to_ns(st.ticks))
            if st.min_ticks:
                mn = round(to_ns(st.min_ticks))
                s["min_ns"] = mn if s["min_ns"] is None else min(s["min_ns"], mn)
            if st.max_ticks:
                mx = round(to_ns(st.max_ticks))
                s["max_ns"] = mx if s["max_ns"] is None else max(s["max_ns"], mx)
            hist, add = s["hist"], st.hist
            for i in compress(buckets, add):
                hist[i] += add[i]
            if st.errnos:
                errnos = s["errnos"]
                for name, n in st.errnos.items():
                    errnos[name] = errnos.get(name, 0) + n


def _cached_table(path, tables):
    """The site table of a module the run's tables lack (a child's library, a
    module loaded with dlopen): from its record in the image cache."""
    key = f"path:{path}"
    if key not in tables:
        tables[key] = []
        try:
            from .rewriter import cache
            record = cache.load_module(cache.sha256_file(path))
            if record:
                tables[key] = record["sites"]
        except OSError:
            pass
    return tables[key]


def _site_info(f, g, tables):
    """(id, module, site dict or None) of global site index `g` in process `f`."""
    for name, nsites, base in f.modules:
        if base <= g < base + nsites:
            module = os.path.basename(name)
            table = tables.get(module) or _cached_table(name, tables)
            index = g - base
            return f"{module}#{index}", module, table[index] if index < len(table) else None
    return f"?#{g}", None, None


def _windows_sites(f):
    """(site id, module, name, calls, errors, ticks) of a Windows process:
    ferry.dll patches one stub per call number, so its calls are its sites."""
    for b in f.blocks:
        for nr, calls in enumerate(b.calls):
            if not calls:
                continue
            module, index = next(((name, nr - base) for name, n, base in f.modules
                                  if base <= nr < base + n), (None, nr))
            st = b.nr.get(nr)
            yield (f"{module}#{index}", module, f.name_of(nr), calls, st.errors if st else 0,
                   st.ticks if st else 0)


def _add_sites(acc, f, tables):
    if f.windows:
        for sid, module, name, calls, errors, ticks in _windows_sites(f):
            s = acc.setdefault(sid, {"id": sid, "module": module, "function": name, "address": None,
                                     "nr": None, "name": name, "calls": 0, "errors": 0, "time_ns": 0})
            s["calls"] += calls
            s["errors"] += errors
            s["time_ns"] += round(f.ticks_to_ns(ticks))
        return
    for b in f.blocks:
        for g, (calls, errors, ticks) in b.sites.items():
            sid, module, site = _site_info(f, g, tables)
            s = acc.get(sid)
            if s is None:
                s = acc[sid] = {"id": sid, "module": module,
                                "function": site.get("function") if site else None,
                                "address": site.get("address") if site else None,
                                "nr": site.get("nr") if site else None,
                                "name": site.get("syscall") if site else None,
                                "calls": 0, "errors": 0, "time_ns": 0}
            s["calls"] += calls
            s["errors"] += errors
            s["time_ns"] += round(f.ticks_to_ns(ticks))


def _events(f, t0_mono, tables):
    out = []
    base_ns = f.start_mono_ns - t0_mono
    for b in f.blocks:
        for enter, leave, result, nr, site in b.events:
            out.append({"pid": f.pid, "tid": b.tid, "nr": nr, "name": f.name_of(nr),
                        "start_ns": round(base_ns + f.ticks_to_ns(enter - f.start_tsc)),
                        "dur_ns": round(f.ticks_to_ns(leave - enter)), "result": result,
                        "site": _site_info(f, site - 1, tables)[0] if site else None})
    return out
