"""The system-call sites of a PE image.

Two kinds.  A **stub** is a function shaped like ntdll's:
`mov r10, rcx; mov eax, SSN; ... syscall; ret` within its first 32 bytes
(Windows adds a `test`/`jne` to `int 2e`, wine a `call [0x7ffe1000]` into its
dispatcher, which is the path taken under wine: the stub's `syscall` never
runs there).  A stub is intercepted at its **entry**: the 8 bytes of its first
two instructions, one aligned-enough atomic write, on Windows and wine alike.
Its name (NtWriteFile, NtUserGetMessage, ...) comes from the export table of
the file (SSNs differ between Windows builds).  Stubs are found by shape, in
exported and unexported functions alike.  Any other `syscall` is an
**inline** site, planned exactly as an ELF site (rewriter/planner.py).
"""
import re
from dataclasses import dataclass

import capstone

from . import code, planner
from .manifest import site_to_dict as elf_site_to_dict

# mov r10, rcx (either encoding: compilers emit 4c 8b d1, assemblers 49 89 ca);
# mov eax, imm32
STUB_PREFIXES = (b"\x4c\x8b\xd1\xb8", b"\x49\x89\xca\xb8")
STUB_ENTRY_SIZE = 8
STUB_SCAN = 32
# what may lie between a stub's entry and its `syscall`
_STUB_BODY = ("test", "jne", "je", "jmp", "nop", "ret", "int", "call")
_PREFERRED = re.compile(r"^Nt[A-Z]")

_md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


@dataclass
class Stub:
    entry: int          # RVA of `mov r10, rcx`
    ssn: int
    syscall: int        # RVA of its `syscall`
    name: str | None = None  # exported name (Nt* preferred over Zw*)


def _stub_at(sec, off):
    """The Stub whose entry is at offset `off` of `sec`, or None."""
    if sec.data[off:off + 4] not in STUB_PREFIXES or off + STUB_ENTRY_SIZE > len(sec.data):
        return None
    ssn = int.from_bytes(sec.data[off + 4:off + 8], "little")
    for address, _size, mnemonic, _ops in _md.disasm_lite(
            sec.data[off + STUB_ENTRY_SIZE:off + STUB_SCAN], sec.address + off + STUB_ENTRY_SIZE):
        if mnemonic == "syscall":
            return Stub(sec.address + off, ssn, address)
        if not mnemonic.startswith(_STUB_BODY):
            return None
    return None


def find_stubs(sections, exports):
    """{syscall RVA: Stub} of every stub in `sections`."""
    stubs = {}
    for sec in sections:
        for prefix in STUB_PREFIXES:
            pos = sec.data.find(prefix)
            while pos >= 0:
                stub = _stub_at(sec, pos)
                if stub is not None:
                    names = exports.get(stub.entry)
                    stub.name = _preferred_name(names) if names else None
                    stubs[stub.syscall] = stub
                pos = sec.data.find(prefix, pos + 1)
    return stubs


def _preferred_name(names):
    return next((n for n in names if _PREFERRED.match(n)), names[0])


def analyze(image):
    """(CodeMap, [Site], {syscall RVA: Stub}) of a PeImage."""
    sections = image.code_sections()
    bounds = [(s.address, s.end) for s in sections]

    def in_code(addr):
        return any(lo <= addr < hi for lo, hi in bounds)

    exports = {rva: names for rva, names in image.exports().items() if in_code(rva)}
    stubs = find_stubs(sections, exports)
    functions = {}
    for begin, end in image.pdata():
        if in_code(begin):
            functions[begin] = (begin, end, _preferred_name(exports[begin]) if begin in exports
                                else f"pdata@{begin:#x}")
    for stub in stubs.values():   # stubs are leaf functions: often no .pdata entry
        if stub.entry not in functions:
            functions[stub.entry] = (stub.entry, stub.entry + STUB_SCAN,
                                     stub.name or f"stub@{stub.entry:#x}")
    symbols = sorted(functions.values())
    targets = set(exports) | set(functions)
    targets.update(p for p in image.relocated_pointers() if in_code(p))
    if in_code(image.headers.entry):
        targets.add(image.headers.entry)
    cmap = code.decode(sections, symbols, [], targets, in_code, False)
    sites = planner.plan(cmap)
    starts = {insn.address for region in cmap.regions for insn in region.insns}
    # a stub's shape found inside another instruction's bytes is no stub
    stubs = {a: stub for a, stub in stubs.items() if stub.entry in starts}
    for site in sites:
        stub = stubs.get(site.address)
        if stub is None:
            continue
        # intercepted at its entry, whatever the planner found around the syscall
        site.nr = stub.ssn
        site.window = (stub.entry, stub.entry + STUB_ENTRY_SIZE)
        site.before, site.after = [], []
        site.status, site.reason = "patched", None
    return cmap, sites, stubs


def site_to_dict(site, module_name, read, stubs):
    """A site in the ELF schema (docs/manifest.md) plus `kind` ("stub" or
    "inline"); a stub's `syscall` is its exported name, `nr` its SSN."""
    stub = stubs.get(site.address)
    d = elf_site_to_dict(site, module_name, read if stub is None else None)
    d["kind"] = "stub" if stub else "inline"
    if stub is None:
        d["syscall"] = None   # an SSN means nothing without the ntdll it belongs to
        return d
    d["syscall"] = stub.name
    d["entry"] = f"{stub.entry:#x}"
    raw = read(stub.entry, STUB_ENTRY_SIZE)
    d["window_bytes"] = raw.hex(" ") if raw is not None else None
    d["window_insns"] = ["mov r10, rcx", f"mov eax, {stub.ssn:#x}"]
    return d


def sites_report(path):
    """`ferry sites --json` of a PE file (schema: docs/manifest.md, "format": "pe")."""
    from . import pe_load
    image = pe_load.load(path)
    cmap, sites, stubs = analyze(image)
    name = image.path.name
    patched = sum(s.patched for s in sites)
    return {
        "format": "pe",
        "file": str(path),
        "sha256": image.sha256,
        "pie": False,
        "dll": image.is_dll,
        "image_base": f"{image.headers.image_base:#x}",
        "summary": {"sites": len(sites), "patched": patched, "unpatched": len(sites) - patched,
                    "stubs": len(stubs)},
        "sites": [site_to_dict(s, name, cmap.read, stubs) for s in sites],
    }
