"""Load-time patch plans: the same patch as a rewritten file, for the shim to
apply to a module already in memory (the planner thinks, the shim applies).

A preloaded shim cannot put the trampolines where the rewritten file has them
(that address may be taken), so it places them wherever there is room within
reach and moves the rel32 fields that refer into the module by the
difference; the control block keeps its distance from the trampolines, so
the fields that refer to it never change.  The layout is shim/src/plan.h's
(struct ferry_plan_header, struct ferry_plan_window), through
ferry.base.layouts; little endian:

    header                               magic, where the rewritten file has the
                                         trampolines and the control block, sizes
    tramp bytes, ctl bytes (each padded to 8)
    u32 refs[nrefs] (padded to 8)        offsets in the trampolines of rel32
                                         fields that refer into the module
    windows: header, bytes (padded to 8); each starts with `jmp rel32` to the
             trampolines
"""
import struct

from ..base.layouts import constant, layout

HEADER = layout("ferry_plan_header")
WINDOW = layout("ferry_plan_window")
MAGIC = constant("FERRY_PLAN_MAGIC")


def _pad(b):
    return b + b"\0" * (-len(b) % 8)


def encode(tramp_vaddr, tramp, ctl_vaddr, ctl, refs, windows):
    out = bytearray(HEADER.size)
    HEADER.pack_into(out, 0, magic=MAGIC, tramp_vaddr=tramp_vaddr, ctl_vaddr=ctl_vaddr, tramp_size=len(tramp),
                     ctl_size=len(ctl), nrefs=len(refs), nwindows=len(windows))
    out += _pad(tramp) + _pad(ctl)
    out += _pad(struct.pack(f"<{len(refs)}I", *refs))
    for vaddr, patch in windows:
        head = bytearray(WINDOW.size)
        WINDOW.pack_into(head, 0, vaddr=vaddr, size=len(patch))
        out += head + _pad(patch)
    return bytes(out)


def decode(data):
    """(tramp_vaddr, tramp, ctl_vaddr, ctl, refs, windows) from plan bytes."""
    if data[:len(MAGIC)] != MAGIC:
        raise ValueError("not a Ferry patch plan")
    h = HEADER.unpack(data)
    tv, cv, ts, cs, nr, nw = (h[k] for k in ("tramp_vaddr", "ctl_vaddr", "tramp_size", "ctl_size", "nrefs",
                                             "nwindows"))
    pos = HEADER.size
    tramp = data[pos:pos + ts]
    pos += ts + (-ts % 8)
    ctl = data[pos:pos + cs]
    pos += cs + (-cs % 8)
    refs = list(struct.unpack_from(f"<{nr}I", data, pos))
    pos += 4 * nr + (-4 * nr % 8)
    windows = []
    for _ in range(nw):
        w = WINDOW.unpack(data, pos)
        va, size = w["vaddr"], w["size"]
        pos += WINDOW.size
        windows.append((va, data[pos:pos + size]))
        pos += size + (-size % 8)
    return tv, tramp, cv, ctl, refs, windows
