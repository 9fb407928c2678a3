"""Where libferry.so is: $FERRY_SHIM, else the copy installed with the package
(setup.py builds it into ferry/_shim/), else the shim built in this source tree."""
import os
import struct
from functools import lru_cache
from pathlib import Path

from ..base.errors import FerryError

_TOP = Path(__file__).resolve().parent.parent
# In an installed package this file is ferry/rewriter/shimlib.py; in the
# source tree it is rewriter/shimlib.py, beside ferry/ and shim/.
PACKAGED_SHIM = _TOP / "_shim" / "libferry.so"
SOURCE_TREE_SHIM = _TOP / "shim" / "build" / "libferry.so"
PT_NOTE = 4
NT_GNU_BUILD_ID = 3


def path():
    env = os.environ.get("FERRY_SHIM")
    if env:
        p = Path(env)
    else:
        p = PACKAGED_SHIM if PACKAGED_SHIM.is_file() else SOURCE_TREE_SHIM
    if not p.is_file():
        raise FerryError(p, "the shim is not built (run `make shim`, or set FERRY_SHIM)")
    return p


def build_id(shim=None):
    """The GNU build id of the shim at `shim` (default: path()), as hex: the
    shim's identity.  The image cache keys what carries a copy of the shim by
    it, and the shim's exec hook looks those up by its own (shim/src/exec.c),
    so a child never runs a shim other than the one of its run."""
    p = Path(shim) if shim is not None else path()
    st = p.stat()
    found = _build_id(str(p), st.st_size, st.st_mtime_ns, st.st_ino)
    if found is None:
        raise FerryError(p, "the shim has no build id (rebuild it with `make shim`)")
    return found


@lru_cache(maxsize=8)
def _build_id(p, _size, _mtime_ns, _ino):
    with open(p, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        kind, _flags, offset, _va, _pa, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if kind != PT_NOTE:
            continue
        at, end = offset, offset + filesz
        while at + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, at)
            name_at = at + 12
            desc_at = name_at + _align4(namesz)
            if ntype == NT_GNU_BUILD_ID and data[name_at:name_at + namesz] == b"GNU\0":
                return data[desc_at:desc_at + descsz].hex()
            at = desc_at + _align4(descsz)
    return None


def _align4(n):
    return (n + 3) & ~3
