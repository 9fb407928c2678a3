"""What the code of a module looks like: functions, instructions, branch targets.

Every executable section is decoded linearly, restarting at every known
function boundary (symbols and .eh_frame FDEs), so one bad byte cannot
desynchronize more than one function.  While decoding we collect every
address that control can reach other than by falling through:

- direct branch and call targets (from anywhere in the module, so that a
  `.cold` fragment jumping back into its parent function is seen);
- addresses taken by code (`lea reg, [rip + f]`, immediates in non-PIE code);
- symbol values, relocation targets, FDE starts, `endbr64` landing pads;
- in non-PIE executables, pointers stored in data without relocations;
- jump-table entries of the functions that contain syscall sites.

A patch window may start at such an address but never cover one.
"""
import bisect
import re
import struct
from dataclasses import dataclass, field

import capstone
import lief

from .ehframe import fde_ranges

SHF_EXECINSTR = 0x4

_HEX = re.compile(r"0x[0-9a-f]+")
_RIP = re.compile(r"\[rip ([+-]) (0x[0-9a-f]+)\]")
_BRANCH_PREFIXES = ("j", "call", "loop", "xbegin")


@dataclass
class Insn:
    address: int
    size: int
    mnemonic: str
    op_str: str

    @property
    def end(self):
        return self.address + self.size


@dataclass
class Region:
    """A stretch of code between two consecutive known boundaries."""
    start: int
    end: int
    section: str
    insns: list = field(default_factory=list)
    clean: bool = True  # decoded to its end without an invalid instruction


@dataclass
class Section:
    name: str
    address: int
    data: bytes

    @property
    def end(self):
        return self.address + len(self.data)


@dataclass
class CodeMap:
    sections: list
    symbols: list            # [(start, end, name)] functions with a size, sorted
    fdes: list               # [(start, end)]
    targets: set
    regions: list            # regions that contain a `syscall` instruction
    sites: list              # [(address, Region)]
    undecoded: list          # addresses of `0f 05` that decoding never reached

    def section_of(self, addr):
        for s in self.sections:
            if s.address <= addr < s.end:
                return s
        return None

    def read(self, addr, size):
        s = self.section_of(addr)
        if s is None:
            return None
        off = addr - s.address
        return s.data[off:off + size]

    def function_of(self, addr):
        """(name, start, end) of the function containing `addr`: its symbol if
        it has one, else its FDE range, else None."""
        best = None
        for start, end, name in self.symbols:
            if start <= addr < end and (best is None or end - start < best[2] - best[1]):
                best = (name, start, end)
        if best:
            return best
        for start, end in self.fdes:
            if start <= addr < end:
                return (f"fde@{start:#x}", start, end)
        return None


def _exec_sections(binary):
    sections = []
    for s in binary.sections:
        if int(s.flags) & SHF_EXECINSTR and s.type != lief.ELF.Section.TYPE.NOBITS and s.size:
            sections.append(Section(s.name, s.virtual_address, bytes(s.content)))
    if not sections:  # no section headers: fall back to executable segments
        for i, seg in enumerate(binary.segments):
            if seg.type == lief.ELF.Segment.TYPE.LOAD and int(seg.flags) & 1 and seg.physical_size:
                sections.append(Section(f"<segment {i}>", seg.virtual_address, bytes(seg.content)))
    return sections


def _symbol_info(binary, in_code):
    functions, values = [], set()
    seen = set()
    for sym in list(binary.symtab_symbols) + list(binary.dynamic_symbols):
        if not sym.value or not in_code(sym.value):
            continue
        values.add(sym.value)
        if sym.type == lief.ELF.Symbol.TYPE.FUNC and sym.size:
            key = (sym.value, sym.size)
            if key not in seen:
                seen.add(key)
                functions.append((sym.value, sym.value + sym.size, sym.name))
    functions.sort()
    return functions, values


def _fdes(binary, in_code):
    sec = binary.get_section(".eh_frame")
    if sec is None or sec.type == lief.ELF.Section.TYPE.NOBITS:
        return []
    return [r for r in fde_ranges(bytes(sec.content), sec.virtual_address) if in_code(r[0])]


def _relocation_targets(binary, in_code):
    targets = set()
    for rel in binary.relocations:
        value = rel.addend
        if rel.has_symbol and rel.symbol is not None and rel.symbol.value:
            value += rel.symbol.value
        if in_code(value):
            targets.add(value)
    return targets


def _data_pointer_targets(binary, in_code):
    """Pointers to code stored in data: in a non-PIE executable they carry no
    relocation, so every aligned 8-byte value that lands in code counts."""
    targets = set()
    for s in binary.sections:
        if int(s.flags) & SHF_EXECINSTR or s.type == lief.ELF.Section.TYPE.NOBITS or not s.size:
            continue
        if not int(s.flags) & 0x2:  # SHF_ALLOC
            continue
        data = bytes(s.content)
        for (value,) in struct.iter_unpack("<Q", data[: len(data) & ~7]):
            if in_code(value):
                targets.add(value)
    return targets


def _jump_table_targets(region, code_map_read, is_code, in_region):
    """Entries of jump tables used by `region`: gcc's PIC tables hold int32
    offsets from the table (`lea r, [rip + T]` ... `movsxd` ... `add` ... `jmp r`),
    non-PIC ones absolute pointers (`jmp qword ptr [r*8 + T]`)."""
    targets = set()
    for insn in region.insns:
        if insn.mnemonic == "lea":
            m = _RIP.search(insn.op_str)
            if not m:
                continue
            disp = int(m.group(2), 16) * (1 if m.group(1) == "+" else -1)
            table = insn.end + disp
            if is_code(table):
                continue
            for i in range(4096):
                raw = code_map_read(table + 4 * i, 4)
                if raw is None or len(raw) < 4:
                    break
                target = (table + struct.unpack("<i", raw)[0]) & 0xFFFFFFFFFFFFFFFF
                if not in_region(target):
                    break
                targets.add(target)
        elif insn.mnemonic in ("jmp", "notrack jmp") and "*8 +" in insn.op_str:
            m = re.search(r"\*8 \+ (0x[0-9a-f]+)\]", insn.op_str)
            if not m:
                continue
            table = int(m.group(1), 16)
            for i in range(4096):
                raw = code_map_read(table + 8 * i, 8)
                if raw is None or len(raw) < 8:
                    break
                target = struct.unpack("<Q", raw)[0]
                if not in_region(target):
                    break
                targets.add(target)
    return targets


SWEEP_REPORTS = 50   # progress reports per module at most: a caller may draw each one


def analyze(image, progress=None):
    """Build the CodeMap of an ElfImage; `progress(done, whole)` is told how many bytes of
    code were decoded so far (the long part for a large program)."""
    binary = image.binary
    sections = _exec_sections(binary)
    bounds = [(s.address, s.end) for s in sections]

    def in_code(addr):
        for lo, hi in bounds:
            if lo <= addr < hi:
                return True
        return False

    symbols, symbol_values = _symbol_info(binary, in_code)
    fdes = _fdes(binary, in_code)
    targets = set(symbol_values)
    targets.update(start for start, _ in fdes)
    targets.update(_relocation_targets(binary, in_code))
    entry = binary.entrypoint
    if in_code(entry):
        targets.add(entry)
    if not image.is_pie:
        targets.update(_data_pointer_targets(binary, in_code))

    return decode(sections, symbols, fdes, targets, in_code,
                  not image.is_pie and image.is_executable, progress)


def decode(sections, symbols, fdes, targets, in_code, immediates, progress=None):
    """The CodeMap of `sections` (whatever the file format): decoded between the
    boundaries of `symbols` [(start, end, name)] and `fdes` [(start, end)],
    `targets` (known branch targets) completed by what decoding finds.
    `immediates`: code holds code addresses as immediates (non-PIE)."""
    boundaries = set()
    for start, end, _ in symbols:
        boundaries.update((start, end))
    for start, end in fdes:
        boundaries.update((start, end))

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    if not _has_syscall_instruction(md, sections, boundaries):
        # Most programs make every call through libc: no site, nothing to plan,
        # and no need to decode (say) 30 MB of cc1 for branch targets.
        return CodeMap(sections, symbols, fdes, targets, [], [], [])
    pending = []
    whole = sum(sec.end - sec.address for sec in sections)
    done, step, told = 0, max(1, whole // SWEEP_REPORTS), 0
    if progress:
        progress(0, whole)
    for sec in sections:
        cuts = sorted(b for b in boundaries if sec.address < b < sec.end)
        for start, end in zip([sec.address] + cuts, cuts + [sec.end]):
            lo, hi = start - sec.address, end - sec.address
            has_syscall = sec.data.find(b"\x0f\x05", lo, hi) >= 0
            region = Region(start, end, sec.name)
            _sweep(md, sec.data, sec.address, lo, hi, region, targets, in_code, has_syscall, immediates)
            if has_syscall:
                pending.append((sec, region))
            done += end - start
            if progress and done - told >= step:
                told = done
                progress(done, whole)
    if progress and told != done:
        progress(done, whole)

    cmap = CodeMap(sections, symbols, fdes, targets, [], [], [])
    for sec, region in pending:
        in_region = _region_checker(cmap, region)
        targets.update(_jump_table_targets(region, cmap.read, in_code, in_region))
    for sec, region in pending:
        for piece in _consistent(md, sec, region, targets, in_code, immediates):
            _collect_sites(cmap, sec, piece)
    return cmap


def _has_syscall_instruction(md, sections, boundaries):
    """Whether decoding the functions around each `0f 05` finds a `syscall`."""
    for sec in sections:
        pos = sec.data.find(b"\x0f\x05")
        if pos < 0:
            continue
        cuts = sorted(b for b in boundaries if sec.address < b < sec.end)
        starts = [sec.address] + cuts
        ends = cuts + [sec.end]
        while pos >= 0:
            i = bisect.bisect_right(starts, sec.address + pos) - 1
            lo, hi = starts[i] - sec.address, ends[i] - sec.address
            probe = Region(starts[i], ends[i], sec.name)
            _sweep(md, sec.data, sec.address, lo, hi, probe, set(), lambda a: False, True, False)
            if any(insn.mnemonic == "syscall" for insn in probe.insns):
                return True
            pos = sec.data.find(b"\x0f\x05", hi)
    return False


def _conflicts(region, targets):
    """Targets that land strictly inside a decoded instruction of `region`."""
    return sorted(t for insn in region.insns for t in range(insn.address + 1, insn.end) if t in targets)


def _consistent(md, sec, region, targets, in_code, immediates):
    """`region`, decoded again from every target that its decoding ran over.

    An .eh_frame range may start before its function (glibc's signal return
    trampoline has an FDE one byte early, on purpose), and a linear decode
    from there reads the function's first instruction out of step.  Any
    branch target or taken address that lands inside a decoded instruction
    proves the decoding wrong there: restart at it.  Pieces still in conflict
    are marked unclean, and their sites are not patched."""
    bad = _conflicts(region, targets)
    if not bad:
        return [region]
    pieces = []
    cuts = [region.start] + bad + [region.end]
    for start, end in zip(cuts, cuts[1:]):
        piece = Region(start, end, region.section)
        _sweep(md, sec.data, sec.address, start - sec.address, end - sec.address, piece, set(), in_code,
               True, immediates)
        if _conflicts(piece, targets):
            piece.clean = False
        pieces.append(piece)
    return pieces


def _collect_sites(cmap, sec, region):
    lo, hi = region.start - sec.address, region.end - sec.address
    if sec.data.find(b"\x0f\x05", lo, hi) < 0:
        return
    cmap.regions.append(region)
    decoded = set()
    for insn in region.insns:
        decoded.add(insn.address)
        if insn.mnemonic == "syscall":
            cmap.sites.append((insn.address, region))
    pos = sec.data.find(b"\x0f\x05", lo, hi)
    while pos >= 0:
        addr = sec.address + pos
        if addr not in decoded and not _inside_decoded(region, addr):
            cmap.undecoded.append(addr)
        pos = sec.data.find(b"\x0f\x05", pos + 1, hi)


def _region_checker(cmap, region):
    func = cmap.function_of(region.start)
    lo, hi = (func[1], func[2]) if func else (region.start, region.end)
    lo, hi = min(lo, region.start), max(hi, region.end)
    return lambda addr: lo <= addr < hi


def _inside_decoded(region, addr):
    """True if `addr` falls inside (not at the start of) a decoded instruction:
    such `0f 05` bytes are part of another instruction, not a syscall."""
    for insn in region.insns:
        if insn.address < addr < insn.end:
            return True
    return False


def _sweep(md, data, base, lo, hi, region, targets, in_code, keep, immediates):
    pos = lo
    chunk = data[lo:hi]
    while pos < hi:
        last_end = pos
        for address, size, mnemonic, op_str in md.disasm_lite(chunk[pos - lo:], base + pos):
            last_end = address + size - base
            if keep:
                region.insns.append(Insn(address, size, mnemonic, op_str))
            if mnemonic.startswith(_BRANCH_PREFIXES) or mnemonic.startswith("notrack"):
                if op_str.startswith("0x"):
                    targets.add(int(op_str, 16))
                    continue
            if mnemonic == "endbr64":
                targets.add(address)
                continue
            if "0x" in op_str:
                m = _RIP.search(op_str)
                if m:
                    disp = int(m.group(2), 16)
                    t = address + size + (disp if m.group(1) == "+" else -disp)
                    if in_code(t):
                        targets.add(t)
                elif immediates:  # only non-PIE code holds code addresses as immediates
                    for tok in _HEX.findall(op_str):
                        v = int(tok, 16)
                        if in_code(v):
                            targets.add(v)
        if last_end >= hi:
            break
        # An undecodable byte: note it, then resynchronize one byte further.
        region.clean = False
        pos = last_end + 1
