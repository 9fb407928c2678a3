"""A PE image rewritten so that ferry.dll counts its own system-call stubs.

What changes in the file (LIEF builds it):

- `.ferryt` (read, execute): per stub, a 32-byte piece of code the stub's
  entry now jumps to:

      mov rax, [rip + slot]     ; ferry.dll's trampoline for this stub, or 0
      test rax, rax
      jz own
      jmp rax                   ; counted (rax is dead: the stub sets eax next)
  own:
      <the entry's 8 original bytes: mov r10, rcx; mov eax, SSN>
      jmp entry + 8             ; the rest of the stub, as it was

- `.ferryc` (read, write): the control block ferry.dll finds in every module
  it loads with (shim/win/modules.c): "FERRYPE1", version, the number of
  stubs, then per stub its entry's RVA, its SSN, its code's RVA and the slot.
  A slot left 0 (ferry.dll off, or not found) runs the stub as it was, so
  the file needs no base relocation and runs anywhere.
- each stub's entry: `jmp rel32` to its code (5 of its 8 bytes).
- an import of ferry.dll (its export `ferry_version`), so that the loader
  maps ferry.dll, and runs its DllMain, before any of the module's code.

Inline `syscall` instructions of other shapes are left as they are: their
numbers mean something only to the Windows build they were written for, and
ferry.dll counts calls by the Nt function of the ntdll actually loaded.
"""
import struct

import lief

CODE_SECTION, CONTROL_SECTION = ".ferryt", ".ferryc"
CONTROL_MAGIC = b"FERRYPE1"
CONTROL_VERSION = 1
CONTROL_HEADER = 16
CONTROL_ENTRY = 32
PIECE = 32
FERRY_DLL = "ferry.dll"
FERRY_EXPORT = "ferry_version"


class RewriteError(Exception):
    pass


def is_rewritten(binary):
    return binary.get_section(CONTROL_SECTION) is not None


def _strip(binary):
    """The COFF symbol table and the debug sections that live by it (their
    long names are in its string table): LIEF would write them mangled."""
    for sec in [s for s in binary.sections if s.name.startswith("/")]:
        binary.remove_section(sec.name, clear=False)
    binary.header.pointerto_symbol_table = 0
    binary.header.numberof_symbols = 0


def _piece(code_rva, slot_rva, entry_rva, original):
    """The code an entry at `entry_rva` jumps to, at `code_rva`."""
    out = bytearray(b"\x48\x8b\x05") + struct.pack("<i", slot_rva - (code_rva + 7))
    out += b"\x48\x85\xc0\x74\x02\xff\xe0"
    out += original
    out += b"\xe9" + struct.pack("<i", entry_rva + 8 - (code_rva + len(out) + 5))
    return bytes(out) + b"\xcc" * (PIECE - len(out))


def checksum(data):
    """The PE image checksum of `data` (its CheckSum field counted as 0)."""
    off = struct.unpack_from("<I", data, 0x3C)[0] + 24 + 64
    padded = data + b"\0" * (len(data) % 2)
    total = 0
    for i, (word,) in enumerate(struct.iter_unpack("<H", padded)):
        if i * 2 in (off, off + 2):
            continue
        total += word
        total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return (total + len(data)) & 0xFFFFFFFF


def rewrite(path, stubs, out_path):
    """Write `path` rewritten to `out_path`; `stubs` are pe_sites.Stub of its
    sites to patch (entries 8-byte windows of `mov r10, rcx; mov eax, SSN`)."""
    binary = lief.PE.parse(str(path))
    if binary is None:
        raise RewriteError("LIEF could not parse it")
    _strip(binary)
    stubs = sorted(stubs, key=lambda s: s.entry)
    originals = []
    for stub in stubs:
        raw = bytes(binary.get_content_from_virtual_address(stub.entry, 8, lief.Binary.VA_TYPES.RVA))
        if len(raw) != 8:
            raise RewriteError(f"stub at {stub.entry:#x} is not in the file")
        originals.append(raw)
    n = len(stubs)
    chars = lief.PE.Section.CHARACTERISTICS
    control = lief.PE.Section(CONTROL_SECTION)
    control.content = list(bytes(CONTROL_HEADER + CONTROL_ENTRY * n))
    control.characteristics = int(chars.CNT_INITIALIZED_DATA | chars.MEM_READ | chars.MEM_WRITE)
    control = binary.add_section(control)
    code = lief.PE.Section(CODE_SECTION)
    code.content = list(b"\xcc" * (PIECE * n))
    code.characteristics = int(chars.CNT_CODE | chars.MEM_READ | chars.MEM_EXECUTE)
    code = binary.add_section(code)
    block = bytearray(CONTROL_MAGIC + struct.pack("<II", CONTROL_VERSION, n))
    pieces = bytearray()
    for i, (stub, original) in enumerate(zip(stubs, originals)):
        code_rva = code.virtual_address + PIECE * i
        slot_rva = control.virtual_address + CONTROL_HEADER + CONTROL_ENTRY * i + 16
        block += struct.pack("<IIIIQQ", stub.entry, stub.ssn, code_rva, 0, 0, 0)
        pieces += _piece(code_rva, slot_rva, stub.entry, original)
        jmp = b"\xe9" + struct.pack("<i", code_rva - (stub.entry + 5))
        binary.patch_address(stub.entry, list(jmp), lief.Binary.VA_TYPES.RVA)
    control.content = list(block)
    code.content = list(pieces)
    imp = binary.add_import(FERRY_DLL)
    imp.add_entry(FERRY_EXPORT)
    config = lief.PE.Builder.config_t()
    config.imports = True      # without it the added import is silently dropped
    builder = lief.PE.Builder(binary, config)
    builder.build()
    data = bytearray(builder.raw_bytes())
    off = struct.unpack_from("<I", data, 0x3C)[0] + 24 + 64
    struct.pack_into("<I", data, off, checksum(bytes(data)))
    with open(out_path, "wb") as f:
        f.write(data)
