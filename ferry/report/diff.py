"""Two runs side by side: per syscall (or site) the calls, errors and time of run A and run
B and how they changed (B - A), biggest change in time first."""
import shlex

from rich import box
from rich.text import Text

BY = ("syscall", "site")


def _key(by):
    return (lambda e: e["name"]) if by == "syscall" else (lambda e: e["id"])


def _pct(a, b):
    """Change from a to b in percent of a; None when a is 0 (new in B, or 0 both ways)."""
    if a == 0:
        return 0.0 if b == 0 else None
    return round(100.0 * (b - a) / a, 2)


def _side(model, label):
    info = model.get("info") or {}
    return {"run": str(label),
            "command": shlex.join(info["command"]) if info.get("command") else None,
            "start": info.get("start")}


def _numbers(a, b):
    row = {}
    for k in ("calls", "errors", "time_ns"):
        va, vb = (a or {}).get(k, 0), (b or {}).get(k, 0)
        row[f"{k}_a"], row[f"{k}_b"], row[f"{k}_delta"] = va, vb, vb - va
    row["time_delta_pct"] = _pct(row["time_ns_a"], row["time_ns_b"])
    return row


def diff(model_a, model_b, by="syscall", label_a="A", label_b="B"):
    """The diff of two run models as a JSON-ready dict (format "ferry-diff")."""
    if by not in BY:
        raise ValueError(f"cannot diff by {by!r}")
    key = _key(by)
    entries = "syscalls" if by == "syscall" else "sites"
    a = {key(e): e for e in model_a[entries]}
    b = {key(e): e for e in model_b[entries]}
    rows = []
    for k in list(a) + [k for k in b if k not in a]:
        row = {by: k}
        if by == "site":
            e = b.get(k) or a[k]
            row.update(module=e.get("module"), function=e.get("function"), syscall=e.get("name"))
        row.update(_numbers(a.get(k), b.get(k)))
        row["only_in"] = "A" if k not in b else "B" if k not in a else None
        rows.append(row)
    rows.sort(key=lambda r: (-abs(r["time_ns_delta"]), -abs(r["calls_delta"]), r[by]))
    total = _numbers({n: sum(e[n] for e in model_a[entries]) for n in ("calls", "errors", "time_ns")},
                     {n: sum(e[n] for e in model_b[entries]) for n in ("calls", "errors", "time_ns")})
    return {"format": "ferry-diff", "version": 1, "by": by,
            "a": _side(model_a, label_a), "b": _side(model_b, label_b),
            "rows": rows, "total": total}


NUMBERS = ("calls_a", "calls_b", "calls_delta", "errors_a", "errors_b", "errors_delta",
           "time_ns_a", "time_ns_b", "time_ns_delta", "time_delta_pct")


def csv_rows(d):
    """(header, rows) for CSV: one row per syscall or site, as in the dict."""
    header = [d["by"]] + (["module", "function", "syscall"] if d["by"] == "site" else [])
    header += list(NUMBERS) + ["only_in"]
    return header, ([r.get(h) for h in header] for r in d["rows"])


def _signed(n):
    return f"{n:+d}" if n else "0"


def _signed_pct(p):
    if p is None:
        return "new"
    return f"{p:+.1f}%" if p else "0.0%"


def table(d):
    """The diff as a rich table, with a legend saying which run is A and which B."""
    from .table import PlainTable      # names and paths are not markup
    t = PlainTable(title=Text(f"A: {d['a']['run']}   B: {d['b']['run']}   (delta = B - A)"),
              title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False, collapse_padding=True)
    name = d["by"]
    t.add_column(name, overflow="fold")
    if name == "site":
        t.add_column("function", overflow="fold")
    for col in ("calls A", "calls B", "delta", "seconds A", "seconds B", "delta %"):
        t.add_column(col, justify="right", no_wrap=True)

    def add(label, r, extra=()):
        t.add_row(label, *extra, str(r["calls_a"]), str(r["calls_b"]), _signed(r["calls_delta"]),
                  f"{r['time_ns_a'] / 1e9:.6f}", f"{r['time_ns_b'] / 1e9:.6f}",
                  _signed_pct(r["time_delta_pct"]))

    for r in d["rows"]:
        add(r[name], r, (r.get("function") or "?",) if name == "site" else ())
    t.add_section()
    add("total", d["total"], ("",) if name == "site" else ())
    return t


def render(d):
    out = []
    for side in ("a", "b"):
        s = d[side]
        if s["command"]:
            out.append(Text.assemble((f"{side.upper()}: ", "bold"), f"{s['run']}: {s['command']}"
                                     + (f" ({s['start']})" if s["start"] else "")))
    out.append(table(d))
    return out
