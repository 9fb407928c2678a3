"""Open an ELF file with LIEF, refusing what the rewriter cannot handle.

LIEF parses leniently (it returns a half-filled object for a damaged file and
can be slow or worse on absurd header values), so the few header fields that
decide whether the rest can be trusted are checked first, from the raw bytes:
identity, class, machine, and that the program and section header tables lie
inside the file.  Everything beyond that is LIEF's job.
"""
import hashlib
import os
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import lief

from .errors import InputError
from .layout import CTL_MAGIC

lief.logging.disable()
# LIEF warns when a damaged file holds a value outside one of its enums; the
# damage is reported (or harmless), the warning would only add noise.
warnings.filterwarnings("ignore", message=r".* is not a valid ", category=RuntimeWarning)

EM_X86_64 = 62
ET_EXEC, ET_DYN = 2, 3
PT_LOAD = 1
PF_W = 2


@dataclass
class ElfImage:
    path: Path
    data: bytes
    binary: "lief.ELF.Binary"
    sha256: str

    @property
    def is_executable(self):
        """A program, as opposed to a library.  libc.so.6 has an interpreter
        too (it runs and prints its version), so that alone does not tell."""
        b = self.binary
        if b.header.file_type == lief.ELF.Header.FILE_TYPE.EXEC:
            return True
        flags1 = b.get(lief.ELF.DynamicEntry.TAG.FLAGS_1)
        if flags1 is not None and flags1.has(lief.ELF.DynamicEntryFlags.FLAG.PIE):
            return True
        return b.has_interpreter and self.soname is None

    @property
    def is_pie(self):
        return self.is_executable and self.binary.header.file_type == lief.ELF.Header.FILE_TYPE.DYN

    @property
    def soname(self):
        entry = self.binary.get(lief.ELF.DynamicEntry.TAG.SONAME)
        return entry.name if entry is not None else None


def header_problem(data):
    """Why the raw header cannot be trusted, or None."""
    if len(data) < 64:
        return "truncated ELF header" if data[:4] == b"\x7fELF" else "not an ELF file"
    if data[:4] != b"\x7fELF":
        return "not an ELF file"
    if data[4] != 2:
        return "not a 64-bit ELF file (only x86-64 is supported)"
    if data[5] != 1:
        return "not a little-endian ELF file"
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_machine != EM_X86_64:
        return f"not an x86-64 ELF file (machine {e_machine})"
    if e_type not in (ET_EXEC, ET_DYN):
        return f"not an executable or shared object (ELF type {e_type})"
    (e_phoff, e_shoff) = struct.unpack_from("<QQ", data, 32)
    (e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from(
        "<HHHHHH", data, 52)
    if e_phnum == 0:
        return "corrupt ELF header: no program headers"
    if e_phentsize != 56 or e_phoff + e_phnum * 56 > len(data):
        return "corrupt or truncated program header table"
    if e_shnum and (e_shentsize != 64 or e_shoff + e_shnum * 64 > len(data)):
        return "corrupt or truncated section header table"
    if e_shnum and e_shstrndx >= e_shnum:
        return "corrupt ELF header: bad section name table index"
    for i in range(e_phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz, _memsz, p_align = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + i * 56)
        if p_type == PT_LOAD and p_offset + p_filesz > len(data):
            return "truncated: a loadable segment extends past the end of the file"
        if p_type == PT_LOAD and (p_align == 0 or p_align & (p_align - 1)):
            return f"corrupt program header: a loadable segment's alignment is {p_align:#x}"
    for i in range(e_shnum):
        sh_type, = struct.unpack_from("<I", data, e_shoff + i * 64 + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", data, e_shoff + i * 64 + 24)
        if sh_type not in (0, 8) and sh_offset + sh_size > len(data):  # not NULL/NOBITS
            return "truncated: a section extends past the end of the file"
    return None


def read_input(path):
    """The bytes of `path`, or an InputError saying why it cannot be read."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, e.strerror.lower()) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a directory, not an ELF file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, "not a regular file")
    try:
        return path.read_bytes()
    except OSError as e:
        raise InputError(path, e.strerror.lower()) from None


def load(path):
    """Parse `path` as an x86-64 ELF executable or shared object."""
    path = Path(path)
    data = read_input(path)
    problem = header_problem(data)
    if problem:
        raise InputError(path, problem)
    binary = lief.ELF.parse(str(path))
    if binary is None:
        raise InputError(path, "corrupt ELF file (LIEF could not parse it)")
    if not any(s.type == lief.ELF.Segment.TYPE.LOAD for s in binary.segments):
        raise InputError(path, "corrupt ELF file: no loadable segment")
    return ElfImage(path=path, data=data, binary=binary, sha256=hashlib.sha256(data).hexdigest())


def ferry_control_block(image):
    """(virtual address, file offset) of Ferry's control block if `image` was
    rewritten by Ferry, else None."""
    for seg in image.binary.segments:
        if seg.type != lief.ELF.Segment.TYPE.LOAD or not (int(seg.flags) & PF_W):
            continue
        off = seg.file_offset
        if seg.physical_size >= len(CTL_MAGIC) and image.data[off:off + len(CTL_MAGIC)] == CTL_MAGIC:
            return seg.virtual_address, off
    return None
