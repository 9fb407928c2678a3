"""The run's event trace in the Trace Event Format (chrome://tracing, ui.perfetto.dev):
one complete ("X") event per recorded call, names for the processes and threads
(mapping: docs/report.md)."""
import errno
import json
import shlex

from . import rows as R


def _process_names(model):
    """pid -> "python3.11" or, for a pid that exec'd, "sh → gzip"."""
    names = {}
    for p in model["processes"]:
        seq = names.setdefault(p["pid"], [])
        name = R.program(p)
        if not seq or seq[-1] != name:
            seq.append(name)
    return {pid: " → ".join(seq) for pid, seq in names.items()}


def _args(e):
    args = {"result": e.get("result"), "site": e.get("site")}
    if e.get("nr") is not None:
        args["nr"] = e["nr"]
    res = e.get("result")
    if res is not None and -4095 <= res < 0:
        args["errno"] = errno.errorcode.get(-res, str(-res))
    return args


def trace(model):
    """The Trace Event Format dict of the model's events (empty trace if none)."""
    events = sorted(model.get("events") or [], key=lambda e: (e["start_ns"], e["pid"], e["tid"]))
    names = _process_names(model)
    meta = []
    pids = sorted(set(names) | {e["pid"] for e in events})
    for pid in pids:
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": pid,
                     "args": {"name": names.get(pid, "?")}})
    for pid, tid in sorted({(e["pid"], e["tid"]) for e in events}):
        label = names.get(pid, "?").rsplit(" → ", 1)[-1] if tid == pid else f"thread {tid}"
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                     "args": {"name": label}})
    calls = [{"name": e["name"], "cat": "syscall", "ph": "X",
              "ts": e["start_ns"] / 1000.0, "dur": e["dur_ns"] / 1000.0,
              "pid": e["pid"], "tid": e["tid"], "args": _args(e)} for e in events]
    info = model.get("info") or {}
    other = {"generator": f"ferry {info.get('ferry_version') or ''}".strip()}
    if info.get("command"):
        other["command"] = shlex.join(info["command"])
    if info.get("start"):
        other["start"] = info["start"]
    return {"traceEvents": meta + calls, "displayTimeUnit": "ns", "otherData": other}


def to_chrome(model):
    return json.dumps(trace(model), separators=(",", ":"), ensure_ascii=False) + "\n"
