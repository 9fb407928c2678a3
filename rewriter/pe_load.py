"""Open a PE32+ x86-64 image with LIEF once its raw headers are known sound.

What the code analysis needs from a PE file, all in RVAs (the image is
relocatable: RVAs are what both the file and a loaded copy agree on):
executable sections, exported names, the `.pdata` function ranges
(RUNTIME_FUNCTION, PE's `.eh_frame`), and the code addresses stored in data
that base relocations point at.
"""
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import lief

from .code import Section
from .elfload import read_input
from ..base.errors import InputError
from .pe_kind import DIR_EXCEPTION, parse_headers, refusal

lief.logging.disable()

SCN_MEM_EXECUTE = 0x20000000


@dataclass
class PeImage:
    path: Path
    data: bytes
    binary: "lief.PE.Binary"
    headers: object         # pe_kind.Headers
    sha256: str

    @property
    def is_dll(self):
        return self.headers.is_dll

    def code_sections(self):
        out = []
        for name, va, vsize, raw, rsize, flags in self.headers.sections:
            if flags & SCN_MEM_EXECUTE and rsize:
                size = min(vsize or rsize, rsize)
                out.append(Section(name, va, self.data[raw:raw + size]))
        return out

    def exports(self):
        """{RVA: [names]} of the functions this image exports (forwarders left out)."""
        out = {}
        if not self.binary.has_exports:
            return out
        for entry in self.binary.get_export().entries:
            if entry.is_forwarded or not entry.name:
                continue
            out.setdefault(entry.address, []).append(entry.name)
        return out

    def pdata(self):
        """[(begin, end)] RVAs of every RUNTIME_FUNCTION."""
        rva, size = self.headers.directory(DIR_EXCEPTION)
        off = self.headers.file_offset(rva)
        raw = self.data[off:off + size - size % 12]
        return [(b, e) for b, e, _unwind in struct.iter_unpack("<III", raw) if b < e]

    def relocated_pointers(self):
        """The RVAs that absolute pointers under base relocations hold."""
        out = set()
        base = self.headers.image_base
        for block in self.binary.relocations:
            for entry in block.entries:
                if entry.type != lief.PE.RelocationEntry.BASE_TYPES.DIR64:
                    continue
                off = self.headers.file_offset(entry.address)
                if off is not None and off + 8 <= len(self.data):
                    value, = struct.unpack_from("<Q", self.data, off)
                    out.add(value - base)
        return out


def load(path):
    """Parse `path` as a PE32+ x86-64 image, or raise an InputError saying why not."""
    path = Path(path)
    data = read_input(path)
    problem = refusal(data)
    if problem:
        raise InputError(path, problem)
    headers, _ = parse_headers(data)
    binary = lief.PE.parse(str(path))
    if binary is None:
        raise InputError(path, "corrupt PE file (LIEF could not parse it)")
    return PeImage(path, data, binary, headers, hashlib.sha256(data).hexdigest())
