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


def _table(title, columns):
    """A table in the look of `strace -c`: a ruled header, right-aligned numbers."""
    t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False, collapse_padding=True)
    for name, justify in columns:
        # On a narrow terminal text folds; numbers never do (rich would cut them short).
        t.add_column(name, justify=justify, no_wrap=justify == "right",
                     overflow="fold" if justify == "left" else None)
    return t


def summary(model):
    """A few lines about the run: command, exit, duration, totals, what is not counted."""
    info = model.get("info") or {}
    tot = R.totals(model)
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
    facts.append(f"{tot['calls']} calls, {tot['errors']} errors, "
                 f"{R.secs(tot['time_ns'])} s in system calls")
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
    program = info.get("program") or {}
    if program.get("note"):
        lines.append(Text(f"note: {program['note']}", style="yellow"))
    shim = model.get("shim_calls") or {}
    if shim:
        lines.append(Text(f"the shim's own calls, not in the tables: {sum(shim.values())}",
                          style="dim"))
    pre = model.get("preinit") or {}
    if pre.get("calls"):
        lines.append(Text(f"{pre['calls']} calls made before the shim started are not in "
                          "the tables", style="yellow"))
    for text in process_notes(model):
        lines.append(Text(text, style="yellow"))
    return lines


def process_notes(model):
    """Processes whose counts are missing or partial, one line per reason."""
    groups = {}
    for p in model["processes"]:
        if p.get("enabled") is False:
            why = f"ran without the shim: {p.get('reason') or 'reason unknown'}"
        elif p.get("state") == "unfinished":
            why = "never finished: the counts stop where it was killed"
        elif p.get("reason"):
            why = p["reason"]
        else:
            continue
        groups.setdefault(why, []).append(f"{R.program(p)} {p['pid']}")
    notes = []
    for why, who in groups.items():
        many = len(who) > 1
        notes.append(f"{len(who) if many else ''}{' processes' if many else 'process'} "
                     f"({', '.join(who)}) {why}".strip())
    return notes


def syscall_table(model, key="time"):
    """The `strace -c` table: % time, seconds, usecs/call, calls, errors, syscall; a total."""
    t = _table("system calls", [("% time", "right"), ("seconds", "right"),
                                ("usecs/call", "right"), ("calls", "right"),
                                ("errors", "right"), ("syscall", "left")])
    for r in R.rows(model, "syscall", key):
        t.add_row(f"{r['pct_time']:.2f}", R.secs(r["time_ns"]), R.usecs(r["avg_ns"]),
                  str(r["calls"]), _errors(r["errors"]), r["name"])
    tot = R.totals(model)
    t.add_section()
    t.add_row("100.00" if tot["time_ns"] else "0.00", R.secs(tot["time_ns"]),
              R.usecs(R.avg_ns(tot)), str(tot["calls"]), _errors(tot["errors"]), "total")
    return t


def untimed(model):
    """Names of the syscalls counted but not timed (they do not return through the shim)."""
    return [s["name"] for s in model["syscalls"]
            if s["calls"] and not s["time_ns"] and not any(s.get("hist") or ())]


def untimed_note(model):
    names = untimed(model)
    if not names:
        return None
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


def counts(p):
    """calls, errors, syscall seconds of a process; '-' for one that ran without the shim."""
    if p.get("calls") is None:
        return "-", "", "-"
    return str(p["calls"]), _errors(p.get("errors") or 0), R.secs(p.get("time_ns") or 0)


def process_table(model, key="time"):
    t = _table("processes", [("pid", "right"), ("ppid", "right"), ("program", "left"),
                             ("state", "left"), ("seconds", "right"), ("threads", "right"),
                             ("calls", "right"), ("errors", "right"), ("syscall s", "right"),
                             ("% time", "right")])
    for r in R.rows(model, "process", key):
        dur = r.get("duration_s")
        t.add_row(str(r["pid"]), str(r.get("ppid") if r.get("ppid") is not None else "?"),
                  R.program(r), R.state_text(r), "?" if dur is None else f"{dur:.3f}",
                  str(r.get("threads") if r.get("threads") is not None else "?"),
                  *counts(r), f"{r['pct_time']:.2f}")
    return t


def render(model, by="syscall", key="time"):
    """Everything the text report prints, in order; the aggregation section last when the
    run aggregated calls (`by` "pool": only that section; "carrier": only its carriers)."""
    out = summary(model)
    if by == "pool":
        return out + (aggregation.text(model, _table)
                      or [Text("no aggregation data: no process of this run created a group")])
    if by == "carrier":
        return out + (aggregation.carrier_text(model, _table)
                      or [Text("no carrier data: no process of this run recorded its carriers")])
    if by == "process":
        out.append(process_table(model, key))
    elif not model["syscalls"] and not model["sites"]:
        out.append(Text("no system calls recorded"))
    elif by == "site":
        out.append(site_table(model, key))
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
