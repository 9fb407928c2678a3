"""The shim inside a static program (issue 13): no loader will map
libferry.so into it, so the shim's own build for this (libferry-static.so,
shim/Makefile) becomes two more loadable segments of the program, and the
entry point becomes its start stub (shim/src/static_start.S), which sets
the shim up from the initial stack and jumps to the original entry.

That build is linked at address 0, relocates itself (its only relocations
are R_X86_64_RELATIVE) and reaches its data rip-relative: its segments only
need to keep their distance from each other.  LIEF chooses where added
segments go, so they are added with their sizes, then moved together above
everything else; their file offsets are page aligned, so any page-aligned
address keeps them mappable.
"""
from dataclasses import dataclass

import lief

from ..base.errors import FerryError
from . import shimlib

PAGE = 0x1000
NAME = "libferry-static.so"
CONFIG_MAGIC = b"FERRY-STATIC-1\n\0"   # struct ferry_static_config (shim/src/static.h)
START, CONFIG = "ferry_static_start", "ferry_static_config"


def _page_down(v):
    return v & ~(PAGE - 1)


def _page_up(v):
    return (v + PAGE - 1) & ~(PAGE - 1)


def path():
    """The static build of the shim, beside libferry.so."""
    p = shimlib.path().with_name(NAME)
    if not p.is_file():
        raise FerryError(p, "the static shim is not built (run `make shim`)")
    return p


@dataclass
class Blob:
    """The static shim, as segments to add: (offset from the shim's base,
    bytes, size in memory, flags) for each, and where its start stub and
    its settings are."""
    segments: list
    start: int
    config: int


def load(shim_path=None):
    shim_path = shim_path or path()
    data = shim_path.read_bytes()
    b = lief.ELF.parse(str(shim_path))
    if b is None:
        raise FerryError(shim_path, "the static shim cannot be parsed")
    loads = sorted((s for s in b.segments if s.type == lief.ELF.Segment.TYPE.LOAD),
                   key=lambda s: s.virtual_address)
    if not loads or loads[0].virtual_address != 0 or loads[0].file_offset != 0:
        raise FerryError(shim_path, "the static shim is not linked at address 0")
    segments, end = [], 0
    for s in loads:
        # from the start of its page: the added segment starts on a page too
        lo = _page_down(s.virtual_address)
        if lo < end:
            raise FerryError(shim_path, "the static shim's segments share a page")
        head = s.virtual_address - lo
        body = data[s.file_offset - head:s.file_offset + s.physical_size]
        segments.append((lo, body, head + s.virtual_size, int(s.flags)))
        end = _page_up(s.virtual_address + s.virtual_size)
    syms = {sym.name: sym.value for sym in b.symtab_symbols if sym.name in (START, CONFIG)}
    if set(syms) != {START, CONFIG}:
        raise FerryError(shim_path, "the static shim has no start stub or settings symbol")
    return Blob(segments, syms[START], syms[CONFIG])


def _load_end(binary):
    return max(s.virtual_address + s.virtual_size for s in binary.segments
               if s.type == lief.ELF.Segment.TYPE.LOAD)


def embed(binary, blob, source):
    """Add the shim's segments to `binary` (a LIEF static executable, its
    other new segments already added) and make its start stub the entry."""
    base = _page_up(_load_end(binary)) + 16 * PAGE   # a guard gap below the shim
    entry = binary.header.entrypoint
    added = []
    for offset, body, memsz, flags in blob.segments:
        body = bytearray(body)
        if offset <= blob.config < offset + len(body):
            at = blob.config - offset
            if bytes(body[at:at + len(CONFIG_MAGIC)]) != CONFIG_MAGIC:
                raise FerryError(source, "the static shim's settings are not where its symbols say")
            body[at + 16:at + 32] = entry.to_bytes(8, "little") + base.to_bytes(8, "little")
        seg = lief.ELF.Segment()
        seg.type = lief.ELF.Segment.TYPE.LOAD
        seg.flags = lief.ELF.Segment.FLAGS(flags)
        seg.alignment = PAGE
        seg.content = list(body)
        seg = binary.add(seg)
        if seg is None:
            raise FerryError(source, "corrupt ELF file: LIEF could not add a segment to it")
        added.append((seg, offset, memsz))
    for seg, offset, memsz in added:
        if seg.file_offset % PAGE:
            raise FerryError(source, "LIEF put the shim's segments off a page boundary")
        seg.virtual_address = seg.physical_address = base + offset
        # LIEF may pad the content to a page: memory covers at least that
        seg.virtual_size = max(memsz, seg.physical_size)
    binary.header.entrypoint = base + blob.start
    return base
