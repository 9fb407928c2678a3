"""The catch-all's record in a process file (shim/src/procfile.h,
struct ferry_catch_area at header offset 53248): the sites outside the
patched code whose calls Syscall User Dispatch caught."""
import struct

from .rewriter.syscall_table import name_of

OFFSET = 53248
MAGIC = b"FERRYCAT"
SITES = 31
SITE_SIZE = 128
OFFSET_VALID = 1


def parse(data):
    """The area of one process file as a dict, or None when the catch-all was
    not on in that process."""
    if data[OFFSET:OFFSET + 8] != MAGIC:
        return None
    enabled, nsites, caught, overflow = struct.unpack_from("<IIQQ", data, OFFSET + 8)
    sites = []
    for i in range(min(nsites, SITES)):
        off = OFFSET + 64 + i * SITE_SIZE
        addr, offset, count, nr, flags = struct.unpack_from("<QQQII", data, off)
        path = data[off + 32:off + SITE_SIZE].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        if not count:
            continue  # a slot claimed by a thread that had not filled it yet
        sites.append({"address": addr, "path": path, "offset": offset if flags & OFFSET_VALID else None,
                      "calls": count, "nr": nr, "name": name_of(nr)})
    return {"enabled": bool(enabled), "caught": caught, "overflow": overflow, "sites": sites}


def summarize(records):
    """The run's caught sites, merged by (file, offset), or by address for
    code that is no file's (JIT code, an anonymous mapping)."""
    merged, caught, overflow, enabled = {}, 0, 0, False
    for rec in records:
        if not rec:
            continue
        enabled = True
        caught += rec["caught"]
        overflow += rec["overflow"]
        for s in rec["sites"]:
            key = (s["path"], s["offset"]) if s["offset"] is not None else (s["path"], s["address"])
            m = merged.setdefault(key, dict(s, calls=0, syscalls={}))
            m["calls"] += s["calls"]
            m["syscalls"][s["name"]] = m["syscalls"].get(s["name"], 0) + s["calls"]
    sites = sorted(merged.values(), key=lambda s: (-s["calls"], s["path"], s["offset"] or 0))
    for s in sites:
        del s["nr"], s["name"]
        if s["offset"] is not None:
            del s["address"]  # differs from process to process; the offset does not
    return {"enabled": enabled, "caught": caught, "overflow": overflow, "sites": sites}


def modules_to_plan(summary):
    """The files whose caught sites a rewrite could patch: each once."""
    seen = []
    for s in summary["sites"]:
        if s["offset"] is not None and s["path"].startswith("/") and s["path"] not in seen:
            seen.append(s["path"])
    return seen
