"""Getting a run model (docs/run.md) from a path, and checking it before rendering.

A path is either a run directory or a bare proc/ (read by ``ferry.rundata.load_run``) or a JSON
file holding a model (what ``ferry report --json`` prints). Every problem is a
FerryError naming the path: the renderers can then trust the model's shape.
"""
import json
from pathlib import Path

from ..base.errors import FerryError

FORMAT = "ferry-run"
VERSIONS = (1,)


def load(path):
    """The run model of `path` (a run directory or a model JSON file), checked."""
    p = Path(path)
    if not p.exists():
        raise FerryError(path, "no such run directory or file (record a run with `ferry run`)")
    if p.is_dir():
        model = _load_dir(p, path)
    else:
        model = _load_json(p, path)
    check(model, path)
    return model


def _load_dir(p, path):
    from ..rundata import load_run    # raises FerryError for a directory that is not a run
    return load_run(path)


def _load_json(p, path):
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FerryError(path, "not a run directory or a run model (JSON): the file is not "
                               "text") from None
    except OSError as e:
        raise FerryError(path, f"cannot read: {e.strerror}") from None
    if not text.strip():
        raise FerryError(path, "not a run model: the file is empty")
    try:
        model = json.loads(text)
    except json.JSONDecodeError as e:
        where = "truncated" if _unclosed(text) else f"line {e.lineno} column {e.colno}"
        raise FerryError(path, f"corrupt run model: not valid JSON ({where}: {e.msg})") from None
    except RecursionError:
        raise FerryError(path, "corrupt run model: nested too deeply") from None
    return model


def _unclosed(text):
    """True if the JSON text ends inside a string or with brackets still open: cut short."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return in_string or depth > 0


# -- checking ------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v  # not NaN


class _Field:
    """One key of an entry: a test, what the test wants (for the message), whether null is
    allowed and whether the key may be missing."""

    def __init__(self, test, what, null=False, needed=True):
        self.test, self.what, self.null, self.needed = test, what, null, needed

    def ok(self, value):
        return (self.null and value is None) or self.test(value)

    def wants(self):
        return self.what + (" or null" if self.null else "")


_COUNT = (lambda v: _is_int(v) and v >= 0, "a count (integer >= 0)")
_AMOUNT = (lambda v: _is_num(v) and v >= 0, "a number >= 0")
_INT = (_is_int, "an integer")
_TEXT = (lambda v: isinstance(v, str), "text")
_TEXTS = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of text")
_COUNTS_BY_NAME = (lambda v: isinstance(v, dict) and all(_is_int(n) and n >= 0 for n in v.values()),
                   "an object of counts")
_HIST = (lambda v: isinstance(v, list) and len(v) <= 64 and all(_is_int(n) and n >= 0 for n in v),
         "a list of at most 64 counts")


def _need(kind):
    return _Field(*kind)


def _null(kind):
    """Needed key; null allowed (a process that ran without the shim has no counts)."""
    return _Field(*kind, null=True)


def _may(kind):
    """Optional key; null allowed."""
    return _Field(*kind, null=True, needed=False)


# Keys the renderers use, per entry; keys not listed are passed through as they are.
_SCHEMA = {
    "processes": {"pid": _need(_INT), "ppid": _may(_INT), "exe": _may(_TEXT),
                  "argv": _may(_TEXTS), "start": _may(_TEXT), "end": _may(_TEXT),
                  "duration_s": _may(_AMOUNT), "state": _may(_TEXT), "threads": _may(_COUNT),
                  "calls": _null(_COUNT), "errors": _null(_COUNT), "time_ns": _null(_AMOUNT),
                  "reason": _may(_TEXT)},
    "syscalls": {"nr": _may(_INT), "name": _need(_TEXT), "calls": _need(_COUNT),
                 "errors": _need(_COUNT), "errnos": _may(_COUNTS_BY_NAME),
                 "time_ns": _need(_AMOUNT), "min_ns": _may(_AMOUNT), "max_ns": _may(_AMOUNT),
                 "hist": _may(_HIST)},
    "sites": {"id": _need(_TEXT), "module": _may(_TEXT), "function": _may(_TEXT),
              "address": _may(_TEXT), "nr": _may(_INT), "name": _may(_TEXT),
              "calls": _need(_COUNT), "errors": _need(_COUNT), "time_ns": _need(_AMOUNT)},
    "events": {"pid": _need(_INT), "tid": _need(_INT), "nr": _may(_INT), "name": _need(_TEXT),
               "start_ns": _need(_AMOUNT), "dur_ns": _need(_AMOUNT), "result": _may(_INT),
               "site": _may(_TEXT)},
    "threads": {"pid": _need(_INT), "tid": _need(_INT), "exe": _may(_TEXT),
                "calls": _need(_COUNT), "errors": _need(_COUNT), "time_ns": _need(_AMOUNT),
                "syscalls": _may(_COUNTS_BY_NAME)},
}


_INTS = (lambda v: isinstance(v, list) and all(_is_int(n) for n in v), "a list of integers")
_BATCHES = (lambda v: isinstance(v, list) and len(v) == 12 and all(_is_int(n) and n >= 0 for n in v),
            "a list of 12 counts")
_AGGREGATION = {name: _need(_COUNT) for name in (
    "aggregated", "native", "worker", "calls", "crossings", "fibers", "switches", "carriers",
    "groups", "processes")}
_AGGREGATION["crossings_saved"] = _null((_is_num, "a number"))
_POOL = {name: _need(_COUNT) for name in (
    "index", "entries", "concurrency", "wait_limit", "wait_timeout_ns", "submitted", "completed",
    "enters", "max_depth", "wait_ns")}
_POOL.update({"name": _may(_TEXT), "wait": _need(_TEXT), "cpus": _need(_INTS),
              "sqpoll_cpu": _need(_INT), "priority": _need(_INT),
              "mean_depth": _null(_AMOUNT), "batches": _need(_BATCHES)})
_CARRIER = {name: _need(_COUNT) for name in (
    "index", "fibers", "switches", "crossings", "completed", "peak")}
_CARRIER["pid"] = _need(_INT)


def _short(v):
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_entries(model, key, path):
    entries = model.get(key, [])   # only events and threads may be missing: check() saw the others
    if not isinstance(entries, list):
        raise FerryError(path, f"not a valid run model: {key} should be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FerryError(path, f"not a valid run model: {key}[{i}] should be an object")
        _check_fields(entry, _SCHEMA[key], f"{key}[{i}]", path)


def _check_fields(entry, fields, where, path):
    for name, field in fields.items():
        if name not in entry:
            if field.needed:
                raise FerryError(path, f"not a valid run model: {where} has no {name!r}")
        elif not field.ok(entry[name]):
            raise FerryError(path, f"not a valid run model: {where}.{name} should be "
                                   f"{field.wants()}, not {_short(entry[name])}")


def _check_aggregation(model, path):
    agg = model.get("aggregation")
    if agg is None:
        return
    if not isinstance(agg, dict):
        raise FerryError(path, "not a valid run model: aggregation should be an object or null")
    _check_fields(agg, _AGGREGATION, "aggregation", path)
    _check_objects(agg.get("pools"), _POOL, "aggregation.pools", path)
    # models written before the carrier table have none
    _check_objects(agg.get("carrier_list", []), _CARRIER, "aggregation.carrier_list", path)


def _check_objects(entries, fields, where, path):
    if not isinstance(entries, list):
        raise FerryError(path, f"not a valid run model: {where} should be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FerryError(path, f"not a valid run model: {where}[{i}] should be an object")
        _check_fields(entry, fields, f"{where}[{i}]", path)


def check(model, path):
    """Raise FerryError(path, ...) unless `model` is a run model the renderers can use."""
    if not isinstance(model, dict):
        raise FerryError(path, "not a run model: the JSON is not an object")
    fmt = model.get("format")
    if fmt != FORMAT:
        raise FerryError(path, f"not a run model: format is {_short(fmt)}, not {FORMAT!r}")
    if model.get("version") not in VERSIONS:
        raise FerryError(path, f"run model version {_short(model.get('version'))} is not "
                               f"supported (this Ferry reads version {VERSIONS[-1]})")
    for key in ("processes", "syscalls", "sites"):
        if key not in model:
            raise FerryError(path, f"not a valid run model: no {key!r}")
    for key in ("info", "preinit"):
        if model.get(key) is not None and not isinstance(model[key], dict):
            raise FerryError(path, f"not a valid run model: {key} should be an object")
    for key in _SCHEMA:
        _check_entries(model, key, path)
    _check_aggregation(model, path)
