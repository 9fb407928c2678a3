"""The rows every renderer shows: the model's syscalls, sites or processes with derived
numbers (avg_ns, pct_time) added, sorted by a --sort key. The model is not modified."""
import os

BY = ("syscall", "site", "process", "thread")
SORT_KEYS = ("time", "calls", "errors", "name", "avg")


def secs(ns):
    return f"{ns / 1e9:.6f}"


def usecs(ns):
    return f"{ns / 1e3:.2f}"


def num(entry, key):
    """A count or time of an entry; 0 for null (a process that ran without the shim)."""
    return entry.get(key) or 0


def timed_calls(entry):
    """The calls of a syscall entry whose errors and times were recorded (every recorded
    call lands in one bucket of its histogram); its calls for an entry without one."""
    hist = entry.get("hist")
    return sum(hist) if hist and any(hist) else num(entry, "calls")


def avg_ns(entry):
    calls = timed_calls(entry)
    return num(entry, "time_ns") / calls if calls else 0.0


def program(process):
    """Short name of a process's program: the exe's file name, else argv[0]."""
    if process.get("exe"):
        return os.path.basename(process["exe"])
    if process.get("argv"):
        return process["argv"][0]
    return "?"


def _name_key(by):
    if by == "syscall":
        return lambda e: (e["name"], e.get("nr") or 0)
    if by == "site":
        return lambda e: (e.get("name") or "", e.get("module") or "", e.get("function") or "",
                          e["id"])
    if by == "thread":
        return lambda e: (program(e), e["pid"], e["tid"])
    return lambda e: (program(e), e["pid"])


_NUMERIC = {"time": lambda e: num(e, "time_ns"), "calls": lambda e: num(e, "calls"),
            "errors": lambda e: num(e, "errors"), "avg": avg_ns}


def sort(entries, by, key="time"):
    """Entries sorted by `key`: numbers most first, names alphabetically; ties by name."""
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort key {key!r}")
    name = _name_key(by)
    if key == "name":
        return sorted(entries, key=name)
    value = _NUMERIC[key]
    return sorted(entries, key=lambda e: (-value(e), name(e)))


def entries(model, by):
    if by == "thread":
        return model.get("threads") or []   # models written before threads were listed
    return {"syscall": model["syscalls"], "site": model["sites"], "process": model["processes"]}[by]


def total_time(model, by):
    return sum(num(e, "time_ns") for e in entries(model, by))


def rows(model, by="syscall", key="time"):
    """Copies of the model's entries for `by`, sorted, each with avg_ns and pct_time added."""
    if by not in BY:
        raise ValueError(f"unknown grouping {by!r}")
    whole = total_time(model, by)
    out = []
    for e in entries(model, by):
        row = dict(e)
        row["avg_ns"] = avg_ns(e)
        row["pct_time"] = 100.0 * num(e, "time_ns") / whole if whole else 0.0
        out.append(row)
    return sort(out, by, key)


def _modes(model):
    """The modes the shim ran in, over the processes that ran it; the profile's mode for a
    model whose processes do not say."""
    modes = {p.get("mode") for p in model["processes"] if p.get("enabled") is not False}
    modes.discard(None)
    if not modes:
        mode = ((model.get("info") or {}).get("profile") or {}).get("mode")
        modes = {mode} if mode else set()
    return modes


# What the aggregate mode records errors and times of (docs/aggregate.md).
PARTIAL_WHY = ("the aggregate mode records the calls that reach the shim: those the engine "
               "ran, and the others of the syscalls it routes")


def recorded(model):
    """What the run recorded beyond counting calls: {"times": bool, "errors": bool, "why":
    text, "partial": bool}. The trace mode records errors and times of every call it
    traces; the aggregate mode of some calls only ("partial": a syscall whose histogram is
    empty had none recorded); the others none. `why` says which mode left them out ("" when
    all were recorded)."""
    modes = _modes(model)
    timed = any(num(s, "time_ns") or any(s.get("hist") or ()) for s in model["syscalls"])
    failed = any(num(s, "errors") for s in model["syscalls"])
    if not modes or "trace" in modes:
        return {"times": True, "errors": True, "why": "", "partial": False}
    if timed and modes == {"aggregate"}:
        return {"times": True, "errors": True, "why": PARTIAL_WHY, "partial": True}
    if timed:
        return {"times": True, "errors": True, "why": "", "partial": False}
    why = f"not recorded in {' and '.join(sorted(modes))} mode"
    return {"times": False, "errors": failed, "why": why, "partial": False}


def none_recorded(rec, entry):
    """True for a syscall entry none of whose calls had errors and times recorded, in a run
    that recorded some calls only (`rec`: recorded(model)); shown as `-`."""
    return rec["partial"] and not any(entry.get("hist") or ())


def recorded_calls(model):
    """Calls whose errors and times were recorded, over all syscalls."""
    return sum(sum(s.get("hist") or ()) for s in model["syscalls"])


def totals(model):
    """Calls, errors, time and the histogram of recorded calls over all syscalls."""
    hists = [s.get("hist") for s in model["syscalls"] if s.get("hist")]
    return {"calls": sum(s["calls"] for s in model["syscalls"]),
            "errors": sum(s["errors"] for s in model["syscalls"]),
            "time_ns": sum(s["time_ns"] for s in model["syscalls"]),
            "hist": [sum(b) for b in zip(*hists)]}


def exit_text(exit):
    """'0', 'signal 9' or '?' for an exit dict {"code", "signal"} (or None)."""
    if not exit:
        return "?"
    if exit.get("signal") is not None:
        return f"signal {exit['signal']}"
    if exit.get("code") is not None:
        return str(exit["code"])
    return "?"


def state_text(p):
    """How a process ended, in a few words."""
    if p.get("enabled") is False:
        return "no shim"
    state = p.get("state") or "?"
    if state == "exited":
        return f"exited {exit_text(p.get('exit'))}"
    if state == "killed":
        if not (p.get("exit") or {}).get("signal"):     # a Windows process: TerminateProcess
            return f"terminated, exit {exit_text(p.get('exit'))}"
        return f"killed by {exit_text(p.get('exit'))}"
    if state == "exec":
        return f"exec {p.get('exec') or '?'}"
    return state
