"""Run models for the window: `ferry.report.source.load` (the run directory read by
ferry.rundata and checked), remembered while the run directory is unchanged. Called from
worker threads."""
import os
import threading
from collections import OrderedDict
from pathlib import Path

from ..report.source import load

KEEP = 8
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


def _stamp(run_dir):
    """Changes whenever the run is rewritten: info.json and the process files."""
    p = Path(run_dir)
    parts = []
    for f in [p / "info.json", *sorted((p / "proc").glob("*.ferry"))]:
        try:
            st = f.stat()
        except OSError:
            continue
        parts.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(parts)


def model(run_dir):
    """The run model of `run_dir` (docs/run.md); FerryError if it cannot be read."""
    key = os.path.realpath(run_dir)
    stamp = _stamp(run_dir)
    with _lock:
        hit = _cache.get(key)
        if hit and hit[0] == stamp:
            _cache.move_to_end(key)
            return hit[1]
    m = load(run_dir)
    with _lock:
        _cache[key] = (stamp, m)
        while len(_cache) > KEEP:
            _cache.popitem(last=False)
    return m


def forget(run_dir):
    with _lock:
        _cache.pop(os.path.realpath(run_dir), None)
