"""Load-time patch plans: the same patch as a rewritten file, for the shim to
apply to a module already in memory (the planner thinks, the shim applies).

A preloaded shim cannot put the trampolines where the rewritten file has them
(that address may be taken), so it places them wherever there is room within
reach and moves the rel32 fields that refer into the module by the
difference; the control block keeps its distance from the trampolines, so
the fields that refer to it never change.  Layout (little endian; mirrored in
shim/src/plan.c):

    magic "FERRYPLAN\\0v1\\0\\0\\0\\0"     16
    u64 tramp_vaddr, ctl_vaddr           where the rewritten file has them
    u32 tramp_size, ctl_size, nrefs, nwindows
    tramp bytes, ctl bytes (each padded to 8)
    u32 refs[nrefs] (padded to 8)        offsets in the trampolines of rel32
                                         fields that refer into the module
    windows: u64 vaddr, u32 size, u32 0, bytes (padded to 8); each starts
             with `jmp rel32` to the trampolines
"""
import struct

MAGIC = b"FERRYPLAN\0v1\0\0\0\0"


def _pad(b):
    return b + b"\0" * (-len(b) % 8)


def encode(tramp_vaddr, tramp, ctl_vaddr, ctl, refs, windows):
    out = bytearray(MAGIC)
    out += struct.pack("<QQIIII", tramp_vaddr, ctl_vaddr, len(tramp), len(ctl), len(refs), len(windows))
    out += _pad(tramp) + _pad(ctl)
    out += _pad(struct.pack(f"<{len(refs)}I", *refs))
    for vaddr, patch in windows:
        out += struct.pack("<QII", vaddr, len(patch), 0) + _pad(patch)
    return bytes(out)


def decode(data):
    """(tramp_vaddr, tramp, ctl_vaddr, ctl, refs, windows) from plan bytes."""
    if data[:16] != MAGIC:
        raise ValueError("not a Ferry patch plan")
    tv, cv, ts, cs, nr, nw = struct.unpack_from("<QQIIII", data, 16)
    pos = 48
    tramp = data[pos:pos + ts]
    pos += ts + (-ts % 8)
    ctl = data[pos:pos + cs]
    pos += cs + (-cs % 8)
    refs = list(struct.unpack_from(f"<{nr}I", data, pos))
    pos += 4 * nr + (-4 * nr % 8)
    windows = []
    for _ in range(nw):
        va, size, _z = struct.unpack_from("<QII", data, pos)
        pos += 16
        windows.append((va, data[pos:pos + size]))
        pos += size + (-size % 8)
    return tv, tramp, cv, ctl, refs, windows
