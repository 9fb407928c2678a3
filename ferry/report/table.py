"""The text report: a run summary, a table like `strace -c`, the hottest sites, and the
processes (rich renderables; the command prints them)."""
import shlex

from rich import box
from rich.table import Table
from rich.text import Text

from . import aggregation
from . import rows as R

HOT_SITES = 10


def _errors(n):
    return str(n) if n else ""


class PlainTable(Table):
    """A table whose text is shown as it is: names such as `[vdso]`, a function or a command
    line are not rich markup (rich would drop what looks like a tag)."""

    def add_row(self, *cells, **kwargs):
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)


def _table(title, columns):
    """A table in the look of `strace -c`: a ruled header, right-aligned numbers."""
    t = PlainTable(title=Text(title) if isinstance(title, str) else title, title_justify="left",
                   title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                   collapse_padding=True)
    for name, justify in columns:
        # On a narrow terminal text folds; numbers never do (rich would cut them short).
        t.add_column(name, justify=justify, no_wrap=justify == "right",
                     overflow="fold" if justify == "left" else None)
    return t


def summary(model):
    """A few lines about the run: command, exit, duration, totals, what is not counted."""
    info = model.get("info") or {}
    lines = []
    if info.get("command"):
        lines.append(Text.assemble(("run: ", "bold"), shlex.join(info["command"])))
    facts = []
    ran = []
    if info.get("exit") is not None:
        ran.append(f"exit {R.exit_text(info['exit'])}")
    if info.get("duration_s") is not None:
        ran.append(f"after {info['duration_s']:.3f} s")
    if ran:
        facts.append(" ".join(ran))
    n = len(model["processes"])
    facts.append(f"{n} process{'es' if n != 1 else ''}")
    facts.append(totals_text(model))
    profile = info.get("profile") or {}
    if profile.get("name"):
        facts.append(f"profile {profile['name']}")
    lines.append(Text("; ".join(facts)))
    if info.get("state") == "cut off":
        lines.append(Text("the run was cut off: `ferry run` ended before the program did (it was "
                          "killed?); the program was killed with it and the counts stop there",
                          style="yellow"))
    elif info.get("state") == "running":
        lines.append(Text("the run is still going on: these are the counts so far", style="yellow"))
    # Processes that ran without the shim come first: a run that looks empty
    # or small must say at once what it did not see.
    for text in process_notes(model):
        lines.append(Text(text, style="yellow"))
    program = info.get("program") or {}
    if program.get("note"):
        lines.append(Text(f"note: {program['note']}", style="yellow"))
    shim = shim_calls_text(model)
    if shim:
        lines.append(Text(shim, style="dim"))
    pre = model.get("preinit") or {}
    if pre.get("calls"):
        lines.append(Text(f"{pre['calls']} calls made before the shim started are not in "
                          "the tables", style="yellow"))
    unused = aggregation.unused_note(model)
    if unused:
        lines.append(Text(unused, style="yellow"))
    return lines


def totals_text(model):
    """'120 calls, 3 errors, 0.000051 s in system calls', or without what the run did not
    record: '120 calls (errors and times not recorded in count mode)'."""
    tot, rec = R.totals(model), R.recorded(model)
    if rec["partial"]:
        return (f"{tot['calls']} calls; in the {R.recorded_calls(model)} whose errors and times "
                f"were recorded, {tot['errors']} errors, {R.secs(tot['time_ns'])} s")
    if rec["times"]:
        return f"{tot['calls']} calls, {tot['errors']} errors, {R.secs(tot['time_ns'])} s in system calls"
    if rec["errors"]:
        return f"{tot['calls']} calls, {tot['errors']} errors (times {rec['why']})"
    return f"{tot['calls']} calls (errors and times {rec['why']})"


SHIM_CALLS_SHOWN = 3


def shim_calls_text(model):
    """What the shim's own calls are, how many, the most frequent first; None without any."""
    shim = model.get("shim_calls") or {}
    if not shim:
        return None
    top = sorted(shim.items(), key=lambda kv: (-kv[1], kv[0]))
    named = ", ".join(f"{name} {n}" for name, n in top[:SHIM_CALLS_SHOWN])
    more = ", ..." if len(top) > SHIM_CALLS_SHOWN else ""
    return (f"the shim's own calls, not in the tables: {sum(shim.values())} ({named}{more}): "
            "calls the shim makes itself, not the program (creating the process file, "
            "calibrating the clock, patching code)")


def nothing_recorded_text(model):
    """Why the tables are empty: no process ran with the shim, or those that did made no call."""
    procs = model["processes"]
    if procs and not any(p.get("enabled") is not False for p in procs):
        return ("no system calls recorded: no process of this run ran with the shim "
                "(the reasons are above)")
    return "no system calls recorded"


def process_notes(model):
    """Processes whose counts are missing or partial, one line per reason."""
    groups = {}
    for p in model["processes"]:
        whys = []
        if p.get("enabled") is False:
            whys.append(f"ran without the shim: {p.get('reason') or 'reason unknown'}")
        elif p.get("state") == "unfinished":
            whys.append("never finished: the counts stop where it was killed")
        elif p.get("reason"):
            whys.append(p["reason"])
        retries = p.get("start_retries") or 0
        if retries:
            whys.append(f"started a child again {retries} time{'s' if retries > 1 else ''}: "
                        "wine's new process ended before any of its code ran")
        for why in whys:
            groups.setdefault(why, []).append(f"{R.program(p)} {p['pid']}")
    notes = []
    for why, who in groups.items():
        many = len(who) > 1
        notes.append(f"{len(who) if many else ''}{' processes' if many else 'process'} "
                     f"({', '.join(who)}) {why}".strip())
    return notes


def _usecs_or_dash(ns):
    return "-" if ns is None else R.usecs(ns)


def syscall_table(model, key="time"):
    """The `strace -c` table: % time, seconds, usecs/call, the shortest and longest call,
    calls, errors, syscall; a total. Without recorded times (count mode): calls and syscall."""
    rec = R.recorded(model)
    timed = [("% time", "right"), ("seconds", "right"), ("usecs/call", "right"),
             ("min usecs", "right"), ("max usecs", "right")] if rec["times"] else []
    errors = [("errors", "right")] if rec["errors"] else []
    t = _table("system calls", timed + [("calls", "right")] + errors + [("syscall", "left")])

    def row(r, pct, mn, mx):
        times = [pct, R.secs(r["time_ns"]), R.usecs(R.avg_ns(r)), mn, mx] if timed else []
        err = [_errors(r["errors"])] if errors else []
        if r["name"] != "total" and R.none_recorded(rec, r):
            times, err = ["-"] * len(times), ["-"] * len(err)   # none of its calls recorded
        t.add_row(*times, str(r["calls"]), *err, r["name"])

    for r in R.rows(model, "syscall", key):
        row(r, f"{r['pct_time']:.2f}", _usecs_or_dash(r.get("min_ns")),
            _usecs_or_dash(r.get("max_ns")))
    tot = R.totals(model)
    t.add_section()
    known = [s for s in model["syscalls"] if s.get("min_ns") is not None]
    row(dict(tot, name="total"), "100.00" if tot["time_ns"] else "0.00",
        _usecs_or_dash(min((s["min_ns"] for s in known), default=None)),
        _usecs_or_dash(max((s["max_ns"] for s in known if s.get("max_ns") is not None),
                           default=None)))
    return t


def untimed(model):
    """Names of the syscalls counted but not timed (they do not return through the shim)."""
    return [s["name"] for s in model["syscalls"]
            if s["calls"] and not s["time_ns"] and not any(s.get("hist") or ())]


def untimed_note(model):
    """Which calls are counted but never timed, or what the run did not record at all."""
    rec = R.recorded(model)
    if not rec["times"]:
        what = "times" if rec["errors"] else "errors and times"
        return f"{what} {rec['why']}: the tables count calls only (profile trace records them)"
    names = untimed(model)
    if not names:
        return None
    if rec["partial"]:
        return (f"errors and times recorded for {R.recorded_calls(model)} of "
                f"{R.totals(model)['calls']} calls ({rec['why']}); `-`: none recorded "
                "(profile trace records them all)")
    return (f"not timed: {', '.join(sorted(names))} (counted, but these calls do not return "
            "through the shim)")


def errno_table(model):
    """Which errors the failing syscalls returned (most errors first), or None."""
    failing = [r for r in R.rows(model, "syscall", "errors") if r["errors"]]
    if not failing:
        return None
    t = _table("errors", [("syscall", "left"), ("errors", "right"), ("errno", "left")])
    for r in failing:
        errnos = sorted((r.get("errnos") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
        t.add_row(r["name"], str(r["errors"]), ", ".join(f"{e} {n}" for e, n in errnos) or "?")
    return t


def site_table(model, key="time", limit=None):
    """Sites (all, or the first `limit` by `key`) with their syscall, module and function."""
    rows = R.rows(model, "site", key)
    title = "sites" if limit is None or len(rows) <= limit else f"hottest {limit} sites"
    t = _table(title, [("% time", "right"), ("seconds", "right"), ("usecs/call", "right"),
                       ("calls", "right"), ("errors", "right"), ("syscall", "left"),
                       ("function", "left"), ("module", "left"), ("address", "right")])
    for r in rows[:limit]:
        t.add_row(f"{r['pct_time']:.2f}", R.secs(r["time_ns"]), R.usecs(r["avg_ns"]),
                  str(r["calls"]), _errors(r["errors"]), r.get("name") or "?",
                  r.get("function") or "?", r.get("module") or "?", r.get("address") or "")
    return t


def caught_section(model):
    """The sites whose calls only the catch-all saw (code no rewrite patched): they are in
    the tables above too; here is where they are, for the next rewrite."""
    c = model.get("catch_all") or {}
    if not c.get("sites"):
        return []
    n = len(c["sites"])
    t = _table(f"caught by the catch-all: {c['caught']} calls at {n} unpatched site{'s' * (n != 1)}",
               [("calls", "right"), ("syscalls", "left"), ("module", "left"), ("offset", "right")])
    for s in c["sites"]:
        where = hex(s["offset"]) if s["offset"] is not None else hex(s["address"])
        names = ", ".join(f"{n} {k}" if len(s["syscalls"]) > 1 else n for n, k in s["syscalls"].items())
        t.add_row(str(s["calls"]), names, s["path"] or "(anonymous memory)", where)
    out = [t]
    if c.get("overflow"):
        out.append(Text(f"{c['overflow']} more calls at sites beyond the catch-all's table", style="dim"))
    return out


def counts(p, rec=None):
    """calls, errors, syscall seconds of a process; '-' for one that ran without the shim,
    and for what its mode did not record."""
    if p.get("calls") is None:
        return "-", "", "-"
    rec = rec or {"times": True, "errors": True}
    return (str(p["calls"]), _errors(p.get("errors") or 0) if rec["errors"] else "-",
            R.secs(p.get("time_ns") or 0) if rec["times"] else "-")


def process_table(model, key="time"):
    rec = R.recorded(model)
    t = _table("processes", [("pid", "right"), ("ppid", "right"), ("program", "left"),
                             ("state", "left"), ("seconds", "right"), ("threads", "right"),
                             ("calls", "right"), ("errors", "right"), ("syscall s", "right"),
                             ("% time", "right")])
    for r in R.rows(model, "process", key):
        dur = r.get("duration_s")
        t.add_row(str(r["pid"]), str(r.get("ppid") if r.get("ppid") is not None else "?"),
                  R.program(r), R.state_text(r), "?" if dur is None else f"{dur:.3f}",
                  str(r.get("threads") if r.get("threads") is not None else "?"),
                  *counts(r, rec), f"{r['pct_time']:.2f}" if rec["times"] else "-")
    return t


TOP_SYSCALLS = 3


def top_syscalls(thread, n=TOP_SYSCALLS):
    """'read 120, write 40, futex 3, ...': a thread's most frequent calls."""
    calls = sorted((thread.get("syscalls") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{name} {c}" for name, c in calls[:n]) + (", ..." if len(calls) > n else "")


def thread_table(model, key="time"):
    """One row per thread of every process: calls, errors, seconds in system calls and its
    most frequent calls (a process file keeps a block per thread)."""
    rec = R.recorded(model)
    t = _table("threads", [("pid", "right"), ("tid", "right"), ("program", "left"),
                           ("calls", "right"), ("errors", "right"), ("syscall s", "right"),
                           ("% time", "right"), ("top syscalls", "left")])
    for r in R.rows(model, "thread", key):
        t.add_row(str(r["pid"]), str(r["tid"]), R.program(r), *counts(r, rec),
                  f"{r['pct_time']:.2f}" if rec["times"] else "-", top_syscalls(r))
    return t


def render(model, by="syscall", key="time"):
    """Everything the text report prints, in order; the aggregation section last when the
    run aggregated calls (`by` "pool": only that section; "carrier": only its carriers;
    "thread": a row per thread)."""
    out = summary(model)
    if by == "pool":
        return out + (aggregation.text(model, _table)
                      or [Text("no aggregation data: no process of this run created a group")])
    if by == "carrier":
        return out + (aggregation.carrier_text(model, _table)
                      or [Text("no carrier data: no process of this run recorded its carriers")])
    rec = R.recorded(model)
    if by == "process":
        out.append(process_table(model, key))
    elif by == "thread":
        out.append(thread_table(model, key) if model.get("threads")
                   else Text("no thread data: the run model was written before threads were "
                             "listed"))
    elif not model["syscalls"] and not model["sites"]:
        out.append(Text(nothing_recorded_text(model)))
    elif by == "site":
        out.append(site_table(model, key) if model["sites"] or rec["times"]
                   else Text(f"sites {rec['why']}: profile trace records them"))
    else:
        out.append(syscall_table(model, key))
        note = untimed_note(model)
        if note:
            out.append(Text(note, style="dim"))
        errs = errno_table(model)
        if errs is not None:
            out.append(errs)
        if model["sites"]:
            out.append(site_table(model, key, HOT_SITES))
    return out + caught_section(model) + aggregation.text(model, _table)
