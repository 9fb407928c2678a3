"""Write a rewritten module: two new segments, patched windows, dynamic fixes.

The program header table has no room for two more entries, so LIEF moves it
first.  Moving it into a gap between segments (or after .bss) keeps every
existing address where it was; LIEF's other strategy shifts the whole image
by a page, which we refuse, because trampolines and windows are computed
from the original addresses.
"""
import os
import signal
import struct
from dataclasses import dataclass

import keystone
import lief

from . import atomic, layout, plan, trampoline
from .errors import FerryError

_PHDR_STRATEGIES = ("SEGMENT_GAP", "BSS_END")
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
    header = bytearray(layout.CTL_HEADER_SIZE)
    header[0:len(layout.CTL_MAGIC)] = layout.CTL_MAGIC
    struct.pack_into("<QII", header, layout.CTL_VECTOR_OFFSET, 0, len(patched), layout.CTL_VERSION)
    records = b"".join(struct.pack("<IiQ", s.id, -1 if s.nr is None else s.nr, 0) for s in patched)
    return bytes(header) + records


def _load_layout(binary):
    """Where the loader maps each PT_LOAD, with what permissions.  (The table
    may grow a segment into its own page padding; that moves nothing.)"""
    return sorted((s.virtual_address, int(s.flags)) for s in binary.segments
                  if s.type == lief.ELF.Segment.TYPE.LOAD)


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


def rewrite(image, sites, cmap, out_path, changes):
    """Write `image` with its patched `sites` to `out_path` (atomically)."""
    binary = image.binary
    patched = [s for s in sites if s.patched]
    offsets, tramp_size = _layout_trampolines(patched)
    ctl = _control_block(sites, patched)
    before = _load_layout(binary)

    moved = False
    for name in _PHDR_STRATEGIES:
        if binary.relocate_phdr_table(getattr(lief.ELF.Binary.PHDR_RELOC, name)):
            moved = True
            break
    if not moved:
        raise FerryError(image.path, "no room to add segments without moving the image")
    F = lief.ELF.Segment.FLAGS
    tramp_seg = binary.add(_new_segment(F.R | F.X, tramp_size, 0xCC))
    ctl_seg = binary.add(_new_segment(F.R | F.W, len(ctl), 0))
    if tramp_seg is None or ctl_seg is None:
        raise FerryError(image.path, "corrupt ELF file: LIEF could not add a segment to it")
    after = _load_layout(binary)
    if [seg for seg in after if seg[0] not in (tramp_seg.virtual_address, ctl_seg.virtual_address)] != before:
        raise FerryError(image.path, "adding segments would move the image")

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

    _apply_dynamic(binary, changes)
    atomic.write_with(out_path, lambda tmp: _write_isolated(binary, tmp, image.path),
                      os.stat(image.path).st_mode & 0o777)
    return plan.encode(tramp_base, bytes(code), ctl_base, ctl, module_refs, windows)
