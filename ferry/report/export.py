"""Machine-readable output: the model as JSON, and CSV with one row per syscall, site,
process or thread (columns: docs/report.md)."""
import csv
import io
import json
import shlex

from . import aggregation
from . import rows as R

HIST_BUCKETS = 32

# column -> value of a row (rows.rows() entries: model entry + avg_ns, pct_time)
_COLUMNS = {
    "syscall": {
        "syscall": lambda r: r["name"], "nr": lambda r: r.get("nr"),
        "calls": lambda r: r["calls"], "errors": lambda r: r["errors"],
        "time_ns": lambda r: r["time_ns"], "avg_ns": lambda r: _round(r["avg_ns"]),
        "min_ns": lambda r: r.get("min_ns"), "max_ns": lambda r: r.get("max_ns"),
        "pct_time": lambda r: _round(r["pct_time"], 2),
        "errnos": lambda r: _errnos(r.get("errnos")),
        **{f"hist_{i}": (lambda i: lambda r: _bucket(r.get("hist"), i))(i)
           for i in range(HIST_BUCKETS)},
    },
    "site": {
        "site": lambda r: r["id"], "module": lambda r: r.get("module"),
        "function": lambda r: r.get("function"), "address": lambda r: r.get("address"),
        "syscall": lambda r: r.get("name"), "nr": lambda r: r.get("nr"),
        "calls": lambda r: r["calls"], "errors": lambda r: r["errors"],
        "time_ns": lambda r: r["time_ns"], "avg_ns": lambda r: _round(r["avg_ns"]),
        "pct_time": lambda r: _round(r["pct_time"], 2),
    },
    "process": {
        "pid": lambda r: r["pid"], "ppid": lambda r: r.get("ppid"),
        "exe": lambda r: r.get("exe"),
        "argv": lambda r: shlex.join(r["argv"]) if r.get("argv") is not None else None,
        "state": lambda r: r.get("state"),
        "exit_code": lambda r: (r.get("exit") or {}).get("code"),
        "exit_signal": lambda r: (r.get("exit") or {}).get("signal"),
        "exec": lambda r: r.get("exec"),
        "enabled": lambda r: r.get("enabled"), "reason": lambda r: r.get("reason"),
        "start": lambda r: r.get("start"), "end": lambda r: r.get("end"),
        "duration_s": lambda r: r.get("duration_s"), "threads": lambda r: r.get("threads"),
        "calls": lambda r: r["calls"], "errors": lambda r: r["errors"],
        "time_ns": lambda r: r["time_ns"], "avg_ns": lambda r: _round(r["avg_ns"]),
        "pct_time": lambda r: _round(r["pct_time"], 2),
    },
    "thread": {
        "pid": lambda r: r["pid"], "tid": lambda r: r["tid"], "exe": lambda r: r.get("exe"),
        "calls": lambda r: r["calls"], "errors": lambda r: r["errors"],
        "time_ns": lambda r: r["time_ns"], "avg_ns": lambda r: _round(r["avg_ns"]),
        "pct_time": lambda r: _round(r["pct_time"], 2),
        "syscalls": lambda r: _errnos(r.get("syscalls")),
    },
}


def _round(x, digits=1):
    return round(x, digits)


def _bucket(hist, i):
    return hist[i] if hist and i < len(hist) else 0


def _errnos(errnos):
    """'ENOENT=41;EACCES=1', most first (also a thread's calls: 'read=120;write=40')."""
    items = sorted((errnos or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    return ";".join(f"{name}={n}" for name, n in items)


def columns(by):
    return list(_COLUMNS[by])


def to_json(model):
    """The model exactly as it is."""
    return json.dumps(model, indent=1, ensure_ascii=False) + "\n"


def csv_text(header, table):
    """CSV (RFC 4180, \\r\\n line ends as the csv module writes them) of a header row and rows;
    None becomes an empty field, booleans true/false."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(header)
    for row in table:
        w.writerow(["" if v is None else ("true" if v is True else "false" if v is False else v)
                    for v in row])
    return out.getvalue()


def to_csv(model, by="syscall", key="time"):
    """One row per syscall, site, process or thread (`by`), sorted by `key`, after a header row;
    `by` "pool": the aggregation totals, then one row per pool; "carrier": a row per carrier."""
    if by == "pool":
        return csv_text(aggregation.csv_header(), aggregation.csv_rows(model))
    if by == "carrier":
        return csv_text(aggregation.CARRIER_CSV_HEADER, aggregation.carrier_csv_rows(model))
    cols = _COLUMNS[by]
    return csv_text(list(cols), ([get(r) for get in cols.values()] for r in R.rows(model, by, key)))
