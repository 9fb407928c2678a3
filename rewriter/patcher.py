"""Write a rewritten module: two new segments, patched windows, dynamic fixes.

The program header table has no room for two more entries, so LIEF moves it
first.  Moving it into a gap between segments (or after .bss) keeps every
existing address where it was; a file without such a gap gets one appended
first (`room`).  LIEF's other strategy shifts the whole image by a page,
which we refuse, because trampolines and windows are computed from the
original addresses.
"""
import faulthandler
import os
import signal
import tempfile
from dataclasses import dataclass

import keystone
import lief

from ..base import atomic, folios
from . import cache, layout, plan, room, trampoline
from ..base.errors import FerryError

_TRAMP_ALIGN = 16


@dataclass
class DynamicChanges:
    """How the dynamic section of a rewritten module changes."""
    add_needed: list          # names appended to DT_NEEDED, in order
    search_first: str = None  # directory searched before any other (e.g. "$ORIGIN")
    origin_dir: str = None    # replaces $ORIGIN in the original RPATH/RUNPATH


def _new_segment(flags, size, fill):
    seg = lief.ELF.Segment()
    seg.type = lief.ELF.Segment.TYPE.LOAD
    seg.flags = flags
    seg.alignment = 0x1000
    seg.content = [fill] * size
    return seg


def _layout_trampolines(sites):
    offsets, pos = {}, 0
    for site in sites:
        offsets[site.id] = pos
        pos += trampoline.size(site)
        pos = (pos + _TRAMP_ALIGN - 1) & ~(_TRAMP_ALIGN - 1)
    return offsets, max(pos, _TRAMP_ALIGN)


def _control_block(sites, patched):
    block = bytearray(layout.CTL_HEADER_SIZE + len(patched) * layout.SITE_RECORD_SIZE)
    layout.CTL.pack_into(block, 0, magic=layout.CTL_MAGIC, nsites=len(patched), version=layout.CTL_VERSION)
    # `global` as the shim numbers the sites of a process's first module: it
    # then writes none of them (shim.c, describe_module)
    for n, s in enumerate(patched):
        layout.SITE_RECORD.pack_into(block, layout.CTL_HEADER_SIZE + n * layout.SITE_RECORD_SIZE, id=s.id,
                                     nr=-1 if s.nr is None else s.nr,
                                     **{"global": n + 1 if n < layout.MAX_SITES else 0})
    return bytes(block)


def _load_layout(binary):
    """Where the loader maps each PT_LOAD, with what permissions.  (The table
    may grow a segment into its own page padding; that moves nothing.)"""
    return sorted((s.virtual_address, int(s.flags)) for s in binary.segments
                  if s.type == lief.ELF.Segment.TYPE.LOAD)


def uses_origin(binary):
    """Whether the library search of `binary` depends on where it lies."""
    TAG = lief.ELF.DynamicEntry.TAG
    runpath, rpath = binary.get(TAG.RUNPATH), binary.get(TAG.RPATH)
    values = ([runpath.runpath] if runpath is not None else []) + \
        ([rpath.rpath] if rpath is not None else [])
    return any("$ORIGIN" in v or "${ORIGIN}" in v for v in values)


def _apply_dynamic(binary, changes):
    """DT_NEEDED names stay as they are (symbol version requirements refer to
    them); the rewritten libraries are found by searching `search_first`
    before anything else: DT_RPATH, which ld.so consults before
    LD_LIBRARY_PATH and for the libraries' own dependencies too, unless the
    program has DT_RUNPATH, which then gets it instead."""
    TAG = lief.ELF.DynamicEntry.TAG
    runpath, rpath = binary.get(TAG.RUNPATH), binary.get(TAG.RPATH)

    def fix(value):
        if changes.origin_dir:
            value = value.replace("${ORIGIN}", changes.origin_dir).replace("$ORIGIN", changes.origin_dir)
        if changes.search_first:
            value = ":".join([changes.search_first] + [v for v in value.split(":") if v])
        return value

    if runpath is not None:
        runpath.runpath = fix(runpath.runpath)
    if rpath is not None:
        rpath.rpath = fix(rpath.rpath)
    if runpath is None and rpath is None and changes.search_first:
        binary.add(lief.ELF.DynamicEntryRpath(changes.search_first))
    for name in changes.add_needed:
        binary.add_library(name)
    _order_needed(binary, changes.add_needed)


def _write_isolated(binary, tmp, source):
    """LIEF writes the file in a child process: on a damaged input its writer
    can die of a signal (a division by zero, say), which must end as one line
    naming the file, with nothing left behind, not as a dead `ferry`."""
    pid = os.fork()
    if pid == 0:
        # the crash is reported as that one line: Python's fault handler
        # (PYTHONFAULTHANDLER, -X faulthandler) would dump the child's stack
        # before it
        faulthandler.disable()
        try:
            binary.write(tmp)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise FerryError(source, f"corrupt ELF file: LIEF crashed writing its rewritten copy "
                                 f"({signal.Signals(os.WTERMSIG(status)).name})")
    if os.WEXITSTATUS(status):
        raise FerryError(source, "corrupt ELF file: LIEF could not write its rewritten copy")


def _order_needed(binary, appended):
    """LIEF inserts new DT_NEEDED entries first; move ours last so the order in
    which the program's own libraries are searched for symbols is unchanged."""
    names = [e.name for e in binary.dynamic_entries if e.tag == lief.ELF.DynamicEntry.TAG.NEEDED]
    wanted = [n for n in names if n not in appended] + [n for n in appended if n in names]
    if names == wanted:
        return
    for n in names:
        binary.remove_library(n)
    for n in reversed(wanted):
        binary.add_library(n)


def _parse_bytes(data, path):
    """LIEF parses from a file; the bytes are written beside nothing else of
    the user's, and LIEF keeps its own copy, so the file goes at once."""
    with tempfile.NamedTemporaryFile(prefix="ferry-room-", suffix=".elf") as f:
        f.write(data)
        f.flush()
        binary = lief.ELF.parse(f.name)
    if binary is None:
        raise FerryError(path, "corrupt ELF file: LIEF could not parse it with room added")
    return binary


def _with_room(image):
    """A LIEF binary of `image` whose program header table has room for new
    entries, and the addresses of the segments added to make that room.
    Each way is meant to keep every existing segment where it was; that is
    checked after the segments are added.  (LIEF's BSS_END way is not
    offered: it adds a segment of its own below nothing we can check, and
    assumes file offsets equal addresses.)"""
    if _relocate_table(image.binary):
        yield image.binary, set()
    data, added = room.make_room(image.data, image.path)
    binary = _parse_bytes(data, image.path)
    if _relocate_table(binary):
        yield binary, added


def _relocate_table(binary):
    """Move the program header table into a file gap between two segments,
    the one after the first segment if it has room: LIEF takes the widest
    gap, which in libc follows the text, and ld.so, which reads the table
    from the mapped file, then faulted in the text's last page (a file
    fault, ~5 us, in every process that loads it) besides the first page,
    where the notes it reads lie.  After the first segment (the ELF header,
    the symbols, the relocations) the table lies on a page the relocations
    bring in anyway.  LIEF skips a segment with more memory than file
    (.bss) as the start of a gap: the others are made to look so for the
    moment it chooses."""
    PHDR = lief.ELF.Binary.PHDR_RELOC
    loads = [s for s in binary.segments if s.type == lief.ELF.Segment.TYPE.LOAD]
    if len(loads) > 2 and loads[0].file_offset == 0:
        others = [s for s in loads[1:] if s.virtual_size == s.physical_size]
        for s in others:
            s.virtual_size += 1
        try:
            moved = binary.relocate_phdr_table(PHDR.SEGMENT_GAP)
        finally:
            for s in others:
                s.virtual_size -= 1
        if moved:
            return moved
    return binary.relocate_phdr_table(PHDR.SEGMENT_GAP)


def _add_segments(image, tramp_size, ctl_size):
    """(binary, trampoline segment, control segment), every original segment
    at its address and with its permissions."""
    before = _load_layout(image.binary)
    end = max(s.virtual_address + s.virtual_size for s in image.binary.segments
              if s.type == lief.ELF.Segment.TYPE.LOAD)
    F = lief.ELF.Segment.FLAGS
    for binary, added in _with_room(image):
        tramp_seg = binary.add(_new_segment(F.R | F.X, tramp_size, 0xCC))
        ctl_seg = binary.add(_new_segment(F.R | F.W, ctl_size, 0))
        if tramp_seg is None or ctl_seg is None:
            raise FerryError(image.path, "corrupt ELF file: LIEF could not add a segment to it")
        added = added | {tramp_seg.virtual_address, ctl_seg.virtual_address}
        after = _load_layout(binary)
        if [seg for seg in after if seg[0] not in added] == before \
                and all(v >= end for v, _ in after if v in added):
            return binary, tramp_seg, ctl_seg
    raise FerryError(image.path, "no room to add segments without moving the image")


def rewrite(image, sites, cmap, out_path, changes, embed=None):
    """Write `image` with its patched `sites` to `out_path` (atomically).
    `changes`: to its dynamic section (None: a static program has none);
    `embed(binary)`: last, with every other segment added (static_embed)."""
    patched = [s for s in sites if s.patched]
    offsets, tramp_size = _layout_trampolines(patched)
    ctl = _control_block(sites, patched)
    binary, tramp_seg, ctl_seg = _add_segments(image, tramp_size, len(ctl))

    tramp_base, ctl_base = tramp_seg.virtual_address, ctl_seg.virtual_address
    vector = ctl_base + layout.CTL_VECTOR_OFFSET
    code = bytearray([0xCC]) * tramp_size
    module_refs = []
    for n, site in enumerate(patched):
        addr = tramp_base + offsets[site.id]
        record = ctl_base + layout.CTL_HEADER_SIZE + n * layout.SITE_RECORD_SIZE
        refs = []
        try:
            body = trampoline.build(site, addr, vector, record, cmap.read, refs)
        except (trampoline.TrampolineError, keystone.KsError) as e:
            # Only a damaged file puts the new segments out of reach of the code.
            raise FerryError(image.path, f"corrupt ELF file: trampolines cannot be placed ({e})") from None
        code[offsets[site.id]:offsets[site.id] + len(body)] = body
        module_refs.extend(offsets[site.id] + r for r in refs)
        site.trampoline = addr
    tramp_seg.content = list(code)
    ctl_seg.content = list(ctl)
    windows = []
    for site in patched:
        patch = trampoline.window_patch(site, site.trampoline)
        binary.patch_address(site.window[0], list(patch))
        windows.append((site.window[0], patch))

    if changes is not None:
        _apply_dynamic(binary, changes)
    if embed is not None:
        embed(binary)
    atomic.write_with(out_path, lambda tmp: (_write_isolated(binary, tmp, image.path),
                                             folios.settle(tmp, cache.root())),
                      os.stat(image.path).st_mode & 0o777)
    return plan.encode(tramp_base, bytes(code), ctl_base, ctl, module_refs, windows)
