"""The HTML report: one self-contained page (inline CSS, plots as data: PNG images, no
scripts, nothing fetched) with the run summary, the plots and the tables."""
import base64
import shlex
from html import escape

from . import aggregation, plots
from . import rows as R
from .table import (counts, process_notes, shim_calls_text, top_syscalls, totals_text,
                    untimed_note)

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
code { font: 13px ui-monospace, monospace; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dt { color: #666; } dd { margin: 0; }
table { border-collapse: collapse; font: 13px ui-monospace, monospace; }
th, td { padding: .15em .7em; border-bottom: 1px solid #ddd; }
th { text-align: left; border-bottom: 2px solid #999; }
td.n, th.n { text-align: right; } tr.total td { font-weight: bold; border-top: 2px solid #999; }
.warn { color: #a15c00; } img { max-width: 100%; }
"""


def _img(png, alt):
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<p><img alt="{escape(alt)}" src="data:image/png;base64,{data}"></p>'


def _table(columns, rows, total=None):
    """columns: [(title, numeric)]; rows: lists of already formatted text."""
    head = "".join(f'<th class="n">{escape(c)}</th>' if num else f"<th>{escape(c)}</th>"
                   for c, num in columns)
    body = []
    for row, cls in [(r, "") for r in rows] + ([(total, ' class="total"')] if total else []):
        cells = "".join(f'<td class="n">{escape(str(v))}</td>' if num else f"<td>{escape(str(v))}</td>"
                        for v, (_, num) in zip(row, columns))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _summary(model):
    info = model.get("info") or {}
    facts = []
    if info.get("command"):
        facts.append(("command", f"<code>{escape(shlex.join(info['command']))}</code>"))
    for key, label in (("cwd", "directory"), ("start", "start"), ("end", "end")):
        if info.get(key):
            facts.append((label, escape(str(info[key]))))
    if info.get("duration_s") is not None:
        facts.append(("duration", f"{info['duration_s']:.3f} s"))
    if info.get("exit") is not None:
        facts.append(("exit", escape(R.exit_text(info["exit"]))))
    facts.append(("processes", str(len(model["processes"]))))
    facts.append(("system calls", escape(totals_text(model))))
    shim = model.get("shim_calls") or {}
    if shim:
        facts.append(("the shim's own calls", escape(shim_calls_text(model) + "; all: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(shim.items())))))
    for key, label in (("host", "host"), ("kernel", "kernel"), ("ferry_version", "ferry")):
        if info.get(key):
            facts.append((label, escape(str(info[key]))))
    profile = info.get("profile") or {}
    if profile.get("name"):
        facts.append(("profile", escape(str(profile["name"]))))
    # what ran without the shim first, as in the text report
    out = [f'<p class="warn">{escape(text)}</p>' for text in process_notes(model)]
    out += ["<dl>"] + [f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts] + ["</dl>"]
    pre = model.get("preinit") or {}
    if pre.get("calls"):
        out.append(f'<p class="warn">{pre["calls"]} calls made before the shim started are '
                   "not in the tables.</p>")
    unused = aggregation.unused_note(model)
    if unused:
        out.append(f'<p class="warn">{escape(unused)}</p>')
    return "\n".join(out)


def _syscalls(model, key):
    rec = R.recorded(model)
    if not rec["times"]:       # count mode: the calls only (the note below says why)
        cols = [("calls", True)] + ([("errors", True)] if rec["errors"] else []) + [("syscall", False)]
        rows = [[r["calls"], *([r["errors"] or ""] if rec["errors"] else []), r["name"]]
                for r in R.rows(model, "syscall", key)]
        tot = R.totals(model)
        return _table(cols, rows, [tot["calls"], *([tot["errors"] or ""] if rec["errors"] else []),
                                   "total"])
    cols = [("% time", True), ("seconds", True), ("usecs/call", True), ("min µs", True),
            ("max µs", True), ("calls", True), ("errors", True), ("syscall", False),
            ("errno", False)]
    rows = []
    for r in R.rows(model, "syscall", key):
        if R.none_recorded(rec, r):
            rows.append(["-"] * 5 + [r["calls"], "-", r["name"], ""])
            continue
        errnos = sorted((r.get("errnos") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
        rows.append([f"{r['pct_time']:.2f}", R.secs(r["time_ns"]), R.usecs(r["avg_ns"]),
                     "" if r.get("min_ns") is None else R.usecs(r["min_ns"]),
                     "" if r.get("max_ns") is None else R.usecs(r["max_ns"]),
                     r["calls"], r["errors"] or "", r["name"],
                     ", ".join(f"{e} {n}" for e, n in errnos)])
    tot = R.totals(model)
    total = ["100.00" if tot["time_ns"] else "0.00", R.secs(tot["time_ns"]), R.usecs(R.avg_ns(tot)),
             "", "", tot["calls"], tot["errors"] or "", "total", ""]
    return _table(cols, rows, total)


def _sites(model, key, limit):
    cols = [("% time", True), ("seconds", True), ("usecs/call", True), ("calls", True),
            ("errors", True), ("syscall", False), ("function", False), ("module", False),
            ("address", True), ("site", False)]
    rows = [[f"{r['pct_time']:.2f}", R.secs(r["time_ns"]), R.usecs(r["avg_ns"]), r["calls"],
             r["errors"] or "", r.get("name") or "?", r.get("function") or "?",
             r.get("module") or "?", r.get("address") or "", r["id"]]
            for r in R.rows(model, "site", key)[:limit]]
    return _table(cols, rows)


def _processes(model, key):
    rec = R.recorded(model)
    cols = [("pid", True), ("ppid", True), ("command", False), ("state", False),
            ("seconds", True), ("threads", True), ("calls", True), ("errors", True),
            ("syscall s", True), ("% time", True)]
    rows = []
    for r in R.rows(model, "process", key):
        argv = shlex.join(r["argv"]) if r.get("argv") else R.program(r)
        dur = r.get("duration_s")
        rows.append([r["pid"], "" if r.get("ppid") is None else r["ppid"], argv, R.state_text(r),
                     "" if dur is None else f"{dur:.3f}",
                     "" if r.get("threads") is None else r["threads"], *counts(r, rec),
                     f"{r['pct_time']:.2f}" if rec["times"] else "-"])
    return _table(cols, rows)


def _threads(model, key):
    """A row per thread, or "" for a model written before threads were listed."""
    if not model.get("threads"):
        return ""
    rec = R.recorded(model)
    cols = [("pid", True), ("tid", True), ("program", False), ("calls", True), ("errors", True),
            ("syscall s", True), ("% time", True), ("top syscalls", False)]
    rows = [[r["pid"], r["tid"], R.program(r), *counts(r, rec),
             f"{r['pct_time']:.2f}" if rec["times"] else "-", top_syscalls(r)]
            for r in R.rows(model, "thread", key)]
    return "<h2>Threads</h2>\n" + _table(cols, rows)


def _aggregation(model):
    """The Aggregation section, or "" when the run aggregated no calls."""
    agg = aggregation.of(model)
    if not agg:
        return ""
    parts = ["<h2>Aggregation</h2>", f"<p>{escape(aggregation.summary(agg))}</p>"]
    if aggregation.several_carriers(agg):
        parts.append(_table([(title, True) for title, _ in aggregation.carrier_columns(agg)],
                            aggregation.carrier_rows(agg)))
        parts.append(_img(plots.carriers(model), "fibers and switches per carrier"))
    if agg["pools"]:
        cols = [("pool", False), ("submitted", True), ("completed", True), ("enters", True),
                ("mean depth", True), ("max depth", True), ("wait s", True), ("settings", False)]
        parts.append(_table(cols, [[aggregation.pool_label(p), p["submitted"], p["completed"],
                                    p["enters"], aggregation.depth(p), p["max_depth"],
                                    f"{p['wait_ns'] / 1e9:.6f}", aggregation.settings_text(p)]
                                   for p in agg["pools"]]))
        parts += [f'<p class="warn">{escape(n)}</p>' for n in aggregation.unfinished_notes(agg)]
        parts.append(_img(plots.batch_sizes(model), "batch sizes")
                     or "<p>No batches submitted.</p>")
        buckets = aggregation.used_buckets(agg)
        parts.append(_table([("pool", False)] + [(aggregation.bucket_label(i), True)
                                                 for i in buckets],
                            [[aggregation.pool_label(p)] + [p["batches"][i] for i in buckets]
                             for p in agg["pools"]]))
    return "\n".join(parts)


def to_html(model, key="time", sites=50):
    """The page as text; tables sorted by `key`, at most `sites` sites listed."""
    info = model.get("info") or {}
    title = "ferry report"
    if info.get("command"):
        title += ": " + shlex.join(info["command"])
    n_sites = len(model["sites"])
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>", _summary(model),
        "<h2>Calls per syscall</h2>", _img(plots.calls_per_syscall(model), "calls per syscall")
        or "<p>No system calls recorded.</p>",
        "<h2>Latency</h2>", _img(plots.latency(model), "latency distributions")
        or "<p>No latency histograms recorded.</p>",
        "<h2>Timeline</h2>", _img(plots.timeline(model), "timeline") or "<p>Nothing to show.</p>",
        "<h2>System calls</h2>", _syscalls(model, key),
        f"<p>{escape(untimed_note(model))}</p>" if untimed_note(model) else "",
        f"<h2>{'Sites' if n_sites <= sites else f'The {sites} hottest sites (of {n_sites})'}</h2>",
        _sites(model, key, sites),
        "<h2>Processes</h2>", _processes(model, key), _threads(model, key),
        _aggregation(model),
        "</body></html>", "",
    ]
    return "\n".join(parts)
