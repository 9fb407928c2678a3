"""Whether a file is a PE image Ferry can read, from its raw headers alone.

Like `elfkind`, this runs before LIEF is trusted with a file: the DOS and PE
signatures, the machine, the optional header's magic, and that the section
table and every section's raw data lie inside the file.  Then what makes an
image one Ferry cannot serve: 32-bit, .NET-only (no native code), or no
`.pdata` (x64 code without a function table: functions cannot be found).
"""
import struct
from dataclasses import dataclass

MACHINE_AMD64 = 0x8664
MACHINE_I386 = 0x14C
MAGIC_PE32, MAGIC_PE32_PLUS = 0x10B, 0x20B
DIR_EXCEPTION, DIR_BASERELOC, DIR_CLR = 3, 5, 14
COMIMAGE_FLAGS_ILONLY = 0x1
IMAGE_FILE_DLL = 0x2000
SECTION_SIZE = 40

THIRTY_TWO_BIT = "a 32-bit PE file (only x86-64 PE32+ is supported)"


def is_pe(head):
    """Whether `head` (the first bytes of a file) is meant as a PE image: it
    starts with an MZ header (a bad one is then refused as PE, not as ELF)."""
    return head[:2] == b"MZ"


@dataclass(frozen=True)
class Headers:
    machine: int
    characteristics: int
    magic: int
    image_base: int
    entry: int                  # RVA
    size_of_image: int
    directories: list           # [(rva, size)]
    sections: list              # [(name, rva, virtual_size, raw_offset, raw_size, flags)]

    @property
    def is_dll(self):
        return bool(self.characteristics & IMAGE_FILE_DLL)

    def directory(self, index):
        return self.directories[index] if index < len(self.directories) else (0, 0)

    def file_offset(self, rva):
        """The file offset of `rva`, or None when no section holds it in the file."""
        for _name, va, vsize, raw, rsize, _flags in self.sections:
            if va <= rva < va + max(vsize, rsize) and rva - va < rsize:
                return raw + rva - va
        return None


def parse_headers(data):
    """(Headers, None), or (None, why the headers cannot be trusted)."""
    if len(data) < 64 or data[:2] != b"MZ":
        return None, "truncated PE file (no complete DOS header)" if data[:2] == b"MZ" else "not a PE file"
    lfanew, = struct.unpack_from("<I", data, 0x3C)
    if lfanew + 24 > len(data):
        return None, "truncated PE header"
    if data[lfanew:lfanew + 4] != b"PE\0\0":
        return None, "corrupt PE header: no PE signature where the DOS header points"
    machine, nsections, _t, _p, _n, opt_size, characteristics = struct.unpack_from("<HHIIIHH", data, lfanew + 4)
    opt = lfanew + 24
    if opt + 2 > len(data):
        return None, "truncated PE header"
    magic, = struct.unpack_from("<H", data, opt)
    if magic not in (MAGIC_PE32, MAGIC_PE32_PLUS):
        return None, f"corrupt PE header: optional header magic {magic:#x}"
    dirs_at, min_size = (opt + 112, 112) if magic == MAGIC_PE32_PLUS else (opt + 96, 96)
    if opt_size < min_size or opt + opt_size > len(data):
        return None, "corrupt or truncated PE optional header"
    entry, = struct.unpack_from("<I", data, opt + 16)
    if magic == MAGIC_PE32_PLUS:
        image_base, = struct.unpack_from("<Q", data, opt + 24)
    else:
        image_base, = struct.unpack_from("<I", data, opt + 28)
    size_of_image, = struct.unpack_from("<I", data, opt + 56)
    ndirs, = struct.unpack_from("<I", data, dirs_at - 4)
    ndirs = min(ndirs, (opt + opt_size - dirs_at) // 8, 16)
    directories = [struct.unpack_from("<II", data, dirs_at + 8 * i) for i in range(ndirs)]
    table = opt + opt_size
    if nsections == 0:
        return None, "corrupt PE header: no sections"
    if table + nsections * SECTION_SIZE > len(data):
        return None, "corrupt or truncated PE section table"
    sections = []
    for i in range(nsections):
        off = table + i * SECTION_SIZE
        name = data[off:off + 8].split(b"\0", 1)[0].decode("latin-1")
        vsize, va, rsize, raw = struct.unpack_from("<IIII", data, off + 8)
        flags, = struct.unpack_from("<I", data, off + 36)
        if rsize and raw + rsize > len(data):
            return None, "truncated: a section extends past the end of the file"
        sections.append((name, va, vsize, raw, rsize, flags))
    return Headers(machine, characteristics, magic, image_base, entry, size_of_image,
                   directories, sections), None


def refusal(data):
    """Why Ferry cannot analyze this PE image (one phrase), or None."""
    headers, problem = parse_headers(data)
    if problem:
        return problem
    clr_rva, clr_size = headers.directory(DIR_CLR)
    if clr_rva and clr_size >= 20:
        off = headers.file_offset(clr_rva)
        if off is not None and off + 20 <= len(data):
            flags, = struct.unpack_from("<I", data, off + 16)
            if flags & COMIMAGE_FLAGS_ILONLY:
                return "a .NET assembly with no native code (IL only): nothing to rewrite"
    if headers.machine == MACHINE_I386 or headers.magic == MAGIC_PE32:
        return THIRTY_TWO_BIT
    if headers.machine != MACHINE_AMD64:
        return f"not an x86-64 PE file (machine {headers.machine:#x})"
    rva, size = headers.directory(DIR_EXCEPTION)
    if not rva or size < 12:
        return "no .pdata function table: its functions cannot be found"
    if headers.file_offset(rva) is None or headers.file_offset(rva) + size > len(data):
        return "corrupt PE file: the .pdata function table lies outside the file"
    return None
