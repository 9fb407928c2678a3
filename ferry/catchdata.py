"""The catch-all's record in a process file (struct ferry_catch_area, the
`catchall` member of shim/src/procfile.h's header, laid out as the header
says through ferry.base.layouts): the sites outside the patched code whose
calls Syscall User Dispatch caught."""
from .base.layouts import constant, layout
from .base.syscall_table import name_of

AREA = layout("ferry_catch_area")
SITE = layout("ferry_catch_site")
HEADER = layout("ferry_proc_header")
OFFSET = HEADER.offset("catchall")
ON = HEADER.offset("catchall_on")
MAGIC = constant("FERRY_CATCH_MAGIC")
OFFSET_VALID = constant("FERRY_CATCH_OFFSET_VALID")


def parse(data):
    """The area of one process file as a dict, or None when the catch-all was
    not on in that process.  The area is written from the first call caught:
    until then only the header says that the catch-all ran."""
    if data[OFFSET:OFFSET + len(MAGIC)] != MAGIC:
        if int.from_bytes(data[ON:ON + 4], "little"):
            return {"enabled": True, "caught": 0, "overflow": 0, "sites": []}
        return None
    area = AREA.unpack(data, OFFSET)
    sites = []
    for s in AREA.rows(data, OFFSET, "sites", SITE, area["nsites"]):
        if not s["count"]:
            continue  # a slot claimed by a thread that had not filled it yet
        path = s["path"].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        sites.append({"address": s["addr"], "path": path,
                      "offset": s["offset"] if s["flags"] & OFFSET_VALID else None,
                      "calls": s["count"], "nr": s["nr"], "name": name_of(s["nr"])})
    return {"enabled": bool(area["enabled"]), "caught": area["caught"], "overflow": area["overflow"],
            "sites": sites}


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
