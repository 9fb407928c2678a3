"""Open an ELF file with LIEF, refusing what the rewriter cannot handle.

LIEF parses leniently (it returns a half-filled object for a damaged file and
can be slow or worse on absurd header values), so the few header fields that
decide whether the rest can be trusted are checked first, from the raw bytes:
identity, class, machine, and that the program and section header tables lie
inside the file.  Everything beyond that is LIEF's job.
"""
import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import lief

from .elfkind import header_problem, open_input
from ..base.errors import InputError
from .layout import CTL_MAGIC

lief.logging.disable()
# LIEF warns when a damaged file holds a value outside one of its enums; the
# damage is reported (or harmless), the warning would only add noise.
warnings.filterwarnings("ignore", message=r".* is not a valid ", category=RuntimeWarning)

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


def read_input(path):
    """The bytes of `path`, or an InputError saying why it cannot be read."""
    fd = open_input(path)
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            return f.read()
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
