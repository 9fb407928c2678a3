"""Make room for more program headers in a file whose segments leave none.

LIEF grows the program header table into a file gap between two loadable
segments (the widest one that follows a segment without .bss).  Linkers that
pack segments back to back (lld, which rustc uses; GNU ld with `-z
noseparate-code -z norelro`) leave no such gap, and LIEF's other strategies
either shift the whole image (every code address moves, which the
trampolines cannot allow) or assume that file offsets equal addresses.

So the gap is made here, without changing any existing address: right after
the last loadable byte of the file, and at an address above the whole image,
come a copy of the program header table in a new read-only segment P, then
a gap, then a tiny segment Q.  LIEF then moves the table into the gap
between P and Q and adds its segments after everything.  What followed the
loadable bytes (section contents that are never loaded, the section header
table) moves down the file past Q; nothing refers to file offsets at run
time.  Only the raw fields needed for that are read here; the file has
already passed `elfload.header_problem`.
"""
import struct

from ..base.errors import FerryError

PAGE = 0x1000
PT_LOAD, PT_PHDR = 1, 6
PF_R = 4
SHT_NOBITS = 8
SHF_ALLOC = 2
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
# LIEF takes a gap only if it holds the table twice (the entries there are
# and as many new ones); it adds its own segments from the rest (ours, and
# new .dynstr/.dynamic ones), so leave some beyond that.
_SPARE_ENTRIES = 16
_Q_SIZE = 16
# P's file offset must equal its address less the image's base (see make_room),
# and its address lies above the whole image: memory past the file's contents
# (.bss) becomes file bytes.  Beyond this the file would be absurd (a damaged
# p_memsz asks for gigabytes); a real program with that much .bss and no gap is
# refused with the reason.
_MAX_SHIFT = 256 << 20


def _align_up(value, align):
    return (value + align - 1) & ~(align - 1)


def _file_gaps(loads, p_off):
    """The file gaps LIEF weighs against ours: after each segment without
    .bss, up to the next segment in the table (the last one: up to P)."""
    gaps = []
    for cur, nxt_off in zip(loads, [p[2] for p in loads[1:]] + [p_off]):
        if cur[5] == cur[6]:
            gaps.append(nxt_off - (cur[2] + cur[5]))
    return gaps


def make_room(data, path):
    """(`data` with P and Q in it, the addresses of P and Q)."""
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phnum, _shentsize, e_shnum = struct.unpack_from("<HHH", data, 56)
    phdrs = [list(_PHDR.unpack_from(data, e_phoff + i * _PHDR.size)) for i in range(e_phnum)]
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    first = min(loads, key=lambda p: p[3])
    # Kernels before Linux 5.18 tell the program its table is at
    # first.vaddr - first.offset + e_phoff: P keeps that relation.
    base = first[3] - first[2]
    if base < 0 or base % PAGE:
        raise FerryError(path, "no room to add segments without moving the image "
                               "(its first segment is not mapped at a page boundary)")
    cut = max(p[2] + p[5] for p in loads)
    end_vaddr = max(p[3] + p[6] for p in loads)
    p_off = _align_up(max(cut, end_vaddr - base), PAGE)
    entries = e_phnum + 2
    table = entries * _PHDR.size
    # LIEF picks the widest gap: ours must be wider than any other.
    widest = max(_file_gaps(loads, p_off), default=0)
    gap = max((2 * entries + _SPARE_ENTRIES) * _PHDR.size, widest + _PHDR.size)
    q_off = _align_up(p_off + table + gap, PAGE)
    shift = _align_up(q_off + _Q_SIZE - cut, PAGE)
    if shift > _MAX_SHIFT:
        raise FerryError(path, f"no room to add segments: its segments reach {end_vaddr - base:#x} bytes "
                               f"past its base but its file ends at {cut:#x} (a p_memsz too large?), and "
                               f"the new segments would need {shift >> 20} MiB of file")

    new = []
    last_load = max(i for i, p in enumerate(phdrs) if p[0] == PT_LOAD)
    for i, p in enumerate(phdrs):
        if p[0] == PT_PHDR:
            p = [PT_PHDR, PF_R, p_off, base + p_off, base + p_off, table, table, p[7]]
        elif p[0] != PT_LOAD and p[2] >= cut and p[5]:
            p = p[:2] + [p[2] + shift] + p[3:]
        new.append(p)
        if i == last_load:
            new.append([PT_LOAD, PF_R, p_off, base + p_off, base + p_off, table, table, PAGE])
            new.append([PT_LOAD, PF_R, q_off, base + q_off, base + q_off, _Q_SIZE, _Q_SIZE, PAGE])

    region = bytearray(shift)
    region[p_off - cut:p_off - cut + table] = b"".join(_PHDR.pack(*p) for p in new)
    out = bytearray(data[:cut]) + region + data[cut:]
    struct.pack_into("<QQ", out, 32, p_off, e_shoff + shift if e_shoff >= cut else e_shoff)
    struct.pack_into("<H", out, 56, entries)
    shoff = e_shoff + shift if e_shoff >= cut else e_shoff
    for i in range(e_shnum):
        at = shoff + i * _SHDR.size
        sh = list(_SHDR.unpack_from(out, at))
        if sh[1] != SHT_NOBITS and not sh[2] & SHF_ALLOC and sh[4] >= cut:
            sh[4] += shift
            _SHDR.pack_into(out, at, *sh)
    return bytes(out), {base + p_off, base + q_off}
