"""Sites and modules as JSON (schema: docs/manifest.md)."""
import json

from ..base import atomic
from ..base.syscall_table import name_of


def _hex(v):
    return None if v is None else f"{v:#x}"


def site_to_dict(site, module_name, read):
    d = {
        "id": f"{module_name}#{site.id}",
        "index": site.id,
        "address": _hex(site.address),
        "section": site.section,
        "function": site.function,
        "function_start": _hex(site.function_start),
        "nr": site.nr,
        "syscall": name_of(site.nr) if site.nr is not None else None,
        "status": site.status,
        "reason": site.reason,
        "window": None,
        "window_bytes": None,
        "window_insns": None,
        "trampoline": _hex(site.trampoline),
    }
    if site.window:
        start, end = site.window
        d["window"] = [_hex(start), _hex(end)]
        raw = read(start, end - start) if read else None
        d["window_bytes"] = raw.hex(" ") if raw is not None else None
        d["window_insns"] = [f"{i.mnemonic} {i.op_str}".strip() for i in site.before] + \
            ["syscall"] + [f"{i.mnemonic} {i.op_str}".strip() for i in site.after]
    return d


def site_from_dict(d):
    """A Site with the fields a report needs (not the displaced instructions)."""
    from .planner import Site  # the planner loads capstone: only when needed
    def num(v):
        return None if v is None else int(v, 16)
    window = tuple(num(v) for v in d["window"]) if d.get("window") else None
    return Site(id=d["index"], address=num(d["address"]), section=d["section"],
                function=d["function"], function_start=num(d.get("function_start")),
                nr=d["nr"], window=window, status=d["status"], reason=d["reason"],
                trampoline=num(d.get("trampoline")))


def write_json(path, obj):
    """Write `obj` to `path` under a temporary name, then rename."""
    atomic.write_bytes(path, json.dumps(obj, indent=1) + "\n")
