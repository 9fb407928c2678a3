"""What kind of program a file is, from its ELF and program headers alone.

`classify` answers before anything heavy is imported (no LIEF, capstone or
keystone) and reads a KiB or two: `ferry run` asks it whether a
command can be rewritten at all, so that a program the shim cannot serve
(32-bit, musl, packed) starts at once, with the reason.  `header_problem` is
the check of the raw header that comes before LIEF is trusted with a file.
"""
import os
import stat
import struct
from dataclasses import dataclass

from ..base.errors import InputError

EM_X86_64 = 62
ET_EXEC, ET_DYN = 2, 3
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_FLAGS_1 = 0, 0x6FFFFFFB
DF_1_PIE = 0x08000000
_PHDR = struct.Struct("<IIQQQQQQ")

STATIC_REASON = "statically linked: it carries the shim only once rewritten"
# rewritten with the shim inside them (static_instrument.py)
STATIC_KINDS = frozenset({"static", "static-pie"})

# name -> why Ferry cannot rewrite such a file ("" if it can try)
KINDS = {
    "dynamic": "",
    "shared-object": "",
    "static": "",
    "static-pie": "",
    "elf32": "not a 64-bit ELF file (only x86-64 is supported)",
    "musl": "uses musl's dynamic loader ({interp}); the shim is built for glibc",
    "packed": ("packed with UPX (a self-extracting program: its code exists only once it "
               "has unpacked itself); unpack it first (upx -d)"),
    "bad": "",        # reason: what is wrong with its program headers
    "foreign": "",    # reason: the header check's own words
    "not-elf": "",    # idem
}
REFUSED = frozenset({"elf32", "musl", "packed", "bad"})
# Files nothing can be done with: `ferry run` refuses them too instead of
# running them without the shim.
UNUSABLE = frozenset({"packed", "bad"})

# Where the rewriter puts what it adds (trampolines, control block, the shim
# in a static program): above the whole image (rewriter/room.py).  Fixed
# segments must stay clear of where the kernel puts the stack and mmap area
# (up to 1 TiB below the top of user space, with randomization), and a
# generous bound of what is added must fit below that.
ADDED_ROOM = 64 << 20
FIXED_CEILING = 0x7E00_0000_0000
# UPX's l_info follows the program headers of a packed ELF file (a checksum,
# then this magic: in the first KiB); a packed file has no section headers.
UPX_MAGIC = b"UPX!"


@dataclass(frozen=True)
class Kind:
    name: str               # a key of KINDS
    reason: str             # why it cannot be rewritten; "" for dynamic/shared-object
    interpreter: str = None  # PT_INTERP, if any

    @property
    def refused(self):
        """Whether the rewriter refuses such a file whatever is in it."""
        return self.name in REFUSED

    @property
    def unusable(self):
        """Whether Ferry can do nothing with it at all (not even run it without the shim)."""
        return self.name in UNUSABLE


PE_FILE = ("a Windows PE file: `ferry instrument` rewrites ELF files; `ferry run` runs it "
           "with ntdll patched in memory, `ferry sites` lists its sites")


SEGMENT_NAMES = {1: "LOAD", 2: "DYNAMIC", 3: "INTERP", 4: "NOTE", 6: "PHDR", 7: "TLS",
                 0x6474E550: "GNU_EH_FRAME", 0x6474E551: "GNU_STACK", 0x6474E552: "GNU_RELRO",
                 0x6474E553: "GNU_PROPERTY"}


def _segment_name(p_type):
    return SEGMENT_NAMES.get(p_type, f"type {p_type:#x}")


def header_problem(data):
    """Why the raw header cannot be trusted, or None."""
    if data[:2] == b"MZ":
        return PE_FILE
    if len(data) < 64:
        return "truncated ELF header" if data[:4] == b"\x7fELF" else "not an ELF file"
    if data[:4] != b"\x7fELF":
        return "not an ELF file"
    if data[4] != 2:
        return KINDS["elf32"]
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
        # The kernel reads only PT_LOAD's bytes, but LIEF reads every
        # segment's when it rewrites, and lays the file out up to where each
        # one starts, empty or not: one claiming or placed a gigabyte away is
        # refused here.
        if p_offset > len(data) or (p_filesz and p_offset + p_filesz > len(data)):
            return (f"corrupt program header: segment {i} ({_segment_name(p_type)}) "
                    f"extends past the end of the file")
        if p_type == PT_LOAD and (p_align == 0 or p_align & (p_align - 1)):
            return f"corrupt program header: a loadable segment's alignment is {p_align:#x}"
    for i in range(e_shnum):
        sh_type, = struct.unpack_from("<I", data, e_shoff + i * 64 + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", data, e_shoff + i * 64 + 24)
        if sh_type not in (0, 8) and sh_offset + sh_size > len(data):  # not NULL/NOBITS
            return "truncated: a section extends past the end of the file"
    return None


def open_input(path):
    """A read-only descriptor of regular file `path`, or an InputError
    saying why there is none."""
    try:
        # O_NONBLOCK: a FIFO must be refused, not waited on
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not an ELF file") from None
    except OSError as e:
        raise InputError(path, e.strerror.lower()) from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise InputError(path, "is a directory, not an ELF file")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(path, "not a regular file")
    return fd


def _kind(name, interp=None, **fmt):
    return Kind(name, KINDS[name].format(interp=interp, **fmt), interp)


def classify(path):
    """The Kind of the file at `path`; an InputError if it cannot be read."""
    fd = open_input(path)
    try:
        return _classify(fd, os.fstat(fd).st_size)
    except OSError as e:
        raise InputError(path, e.strerror.lower()) from None
    finally:
        os.close(fd)


def _classify(fd, size):
    head = os.pread(fd, 64, 0)
    if head[:4] != b"\x7fELF" or len(head) < 64:
        return Kind("not-elf", header_problem(head))
    if head[4] == 1:
        return _kind("elf32")
    problem = header_problem(head)  # its checks of the first 64 bytes say "not ..."
    if problem and problem.startswith("not "):
        return Kind("foreign", problem)
    e_type, = struct.unpack_from("<H", head, 16)
    e_phoff, = struct.unpack_from("<Q", head, 32)
    e_phentsize, e_phnum = struct.unpack_from("<HH", head, 54)
    if e_phentsize != _PHDR.size or not e_phnum or e_phoff + e_phnum * _PHDR.size > size:
        return Kind("not-elf", "corrupt or truncated program header table")
    table = os.pread(fd, e_phnum * _PHDR.size, e_phoff)
    phdrs = [_PHDR.unpack_from(table, i * _PHDR.size) for i in range(e_phnum)]
    interp = next((p for p in phdrs if p[0] == PT_INTERP), None)
    dynamic = next((p for p in phdrs if p[0] == PT_DYNAMIC), None)
    # What no kind of program survives comes first: it stays true whatever
    # the rewriter learns to do with static ones.
    e_shnum, = struct.unpack_from("<H", head, 60)
    if not e_shnum and UPX_MAGIC in os.pread(fd, 1024, 0):
        return _kind("packed")
    problem = _interp_problem(fd, interp, size) or _room_problem(phdrs)
    if problem:
        return Kind("bad", problem)
    if interp is not None:
        name = _read(fd, min(interp[5], 4096), interp[2], size).split(b"\0", 1)[0]
        name = name.decode("utf-8", "replace")
        if os.path.basename(name).startswith("ld-musl-"):
            return _kind("musl", name)
        if not os.path.exists(name):
            return Kind("bad", f"its program interpreter {name} does not exist (the kernel cannot "
                               "start it)", name)
        return _kind("dynamic", name)
    if dynamic is None:
        e_entry, = struct.unpack_from("<Q", head, 24)
        if e_type == ET_DYN and not e_entry:
            return Kind("not-elf", "corrupt shared object: no dynamic segment")
        return _kind("static")
    return _kind("static-pie" if e_type == ET_DYN and _is_pie(fd, dynamic, size) else "shared-object")


def _interp_problem(fd, interp, size):
    """Why the PT_INTERP entry names no loader the kernel could start, or None."""
    if interp is None:
        return None
    _, _, offset, _, _, filesz, _, _ = interp
    if offset >= size or offset + filesz > size:
        return "corrupt program header: its program interpreter (PT_INTERP) lies past the end of the file"
    raw = os.pread(fd, min(filesz, 4096), offset)
    name = raw.split(b"\0", 1)[0]
    if not name or b"\0" not in raw:
        return "corrupt program header: its program interpreter (PT_INTERP) is not a file name"
    return None


def _room_problem(phdrs):
    """Why the loadable segments leave no room above them for what the
    rewriter adds, or None."""
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    if not loads:
        return "corrupt ELF file: no loadable segment"
    end = max(vaddr + memsz for _, _, _, vaddr, _, _, memsz, _ in loads)
    if end + ADDED_ROOM > FIXED_CEILING:
        return (f"its loadable segments reach {end:#x}, which leaves no room above them for the "
                "shim's segments")
    return None


def _read(fd, n, offset, size):
    """Up to `n` bytes at `offset`; none past the end (a damaged header can
    hold any offset)."""
    return os.pread(fd, n, offset) if offset < size else b""


def _is_pie(fd, dynamic, size):
    """DF_1_PIE in the dynamic section: a program that relocates itself, as
    opposed to a library (neither has an interpreter)."""
    data = _read(fd, min(dynamic[5], 1 << 16), dynamic[2], size)
    for off in range(0, len(data) - 15, 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == DT_NULL:
            break
        if tag == DT_FLAGS_1:
            return bool(value & DF_1_PIE)
    return False
