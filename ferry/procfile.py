"""Reading the process records written by the shim in a run's proc/: slot
files (`proc/u<uid>-<k>.ferry`, one record per slot, shared by the processes
of one user) and files of one record (`proc/<pid>-<seq>.ferry`).

The layout is shim/src/procfile.h's, taken member by member from the header
(ferry.base.layouts).  A record has room for the most blocks the shim may
claim (sparse); only its header and the blocks it says were claimed are read,
and they are checked before use: a truncated or corrupt file is a ProcFileError
naming it, never a crash.  proc/ may be writable by other users (a run whose
processes change user): only regular files are read, never through a
symlink, and never a FIFO that would block.
"""
import contextlib
import errno as errno_names
import functools
import gc
import os
import stat
import struct
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path

from . import aggdata, catchdata
from .base.layouts import constant, constants, layout
from .base.sparse import data_extents
from .base.syscall_table import name_of

HEADER = layout("ferry_proc_header")
BLOCK = layout("ferry_blk")
MODULE = layout("ferry_module_entry")
WAIT = layout("ferry_wait_entry")
NR_STATS = layout("ferry_nr_stats")
SITE_STATS = layout("ferry_site_stats")
ERRNO_SLOT = layout("ferry_errno_slot")
EVENT = layout("ferry_event")
SLOTS = layout("ferry_slots_head")

MAGIC = constant("FERRY_PROC_MAGIC")
VERSION = constant("FERRY_PROC_VERSION")
HEADER_SIZE = HEADER.size
NR_MAX = constant("FERRY_NR_MAX")
MAX_SITES = constant("FERRY_MAX_SITES")
MAX_BLOCKS = constant("FERRY_MAX_BLOCKS")
HIST_BUCKETS = constant("FERRY_HIST_BUCKETS")
# Where a block's tables lie, by the record's version: 4-6 (6 now) have the
# header's; 1 kept each number's figures at index nr of a fixed table
# (no nr_slot).  Versions 1-3 kept each site's figures at index site of a
# table of three words a row (4 looks a site up in a table of entries that
# name it, which starts a page further on).  Earlier versions are still read
# so that earlier runs can be reported.  Version 1 kept exec_path after the
# command line (a page more for each exec); versions 1 and 2 had a longer exe
# and counted all the shim's own calls in `internal`, where version 3 counts
# its first numbers in `own`, in the first page.  Versions 2-4 kept the
# command line where version 5 keeps its first module entries
# (`first_modules`), and every module entry in `modules`.  Versions 3-5 had
# an exe of 768 bytes, where version 6 keeps where a packed block lies.
HEADER_V1 = {"cmdline_len": (1280, "<I"), "cmdline": (1288, "4096s"), "exec_path": (5384, "1024s")}
HEADER_V2 = {"exe": (256, "1024s")}
HEADER_V3 = {"exe": (256, "768s")}
HEADER_V4 = {"cmdline": (2312, "4096s")}
FIRST_MODULES = constant("FERRY_FIRST_MODULES")
OWN_COUNT = (1 << 48) - 1
_SITES_V3 = {"sites_span": 4096 * 24, "errnos_span": BLOCK.span("errnos"), "sites_keyed": False}
BLOCK_TABLES = {
    1: {"nr": 4224, "sites": 151680, "errnos": 249984, "events": 266368, **_SITES_V3},
    2: {"nr_slot": 4224, "nr": 5248, "sites": 152704, "errnos": 253952, "events": 270336, **_SITES_V3},
    VERSION: {**{m: BLOCK.offset(m) for m in ("nr_slot", "nr", "sites", "errnos", "events")},
              "sites_span": BLOCK.span("sites"), "errnos_span": BLOCK.span("errnos"), "sites_keyed": True},
}
BLOCK_TABLES[3] = BLOCK_TABLES[2]
BLOCK_TABLES[4] = BLOCK_TABLES[5] = BLOCK_TABLES[VERSION]
NAME_SIZE = constant("FERRY_CALL_NAME_SIZE")     # a Windows process's call names
MAX_NAMES_SIZE = NR_MAX * NAME_SIZE
PLATFORM_LINUX = constant("FERRY_PLATFORM_LINUX")
PLATFORM_WINDOWS = constant("FERRY_PLATFORM_WINDOWS")
SLOTS_MAGIC = constant("FERRY_SLOTS_MAGIC")
SLOTS_VERSION = constant("FERRY_SLOTS_VERSION")
SLOTS_HEAD = constant("FERRY_SLOTS_HEAD")       # where a slot file's first record starts

STATE_RUNNING = constant("FERRY_STATE_RUNNING")
STATE_EXITED = constant("FERRY_STATE_EXITED")
STATE_EXEC = constant("FERRY_STATE_EXEC")
STATE_DETACHED = constant("FERRY_STATE_DETACHED")
EXEC_REWRITTEN = constant("FERRY_EXEC_REWRITTEN")
EXEC_PLAIN = constant("FERRY_EXEC_PLAIN")
EXEC_SETUID = constant("FERRY_EXEC_SETUID")
EXEC_STATIC = constant("FERRY_EXEC_STATIC")
EXEC_UNKNOWN = constant("FERRY_EXEC_UNKNOWN")
EXEC_FOREIGN = constant("FERRY_EXEC_FOREIGN")
EXEC_WINDOWS = constant("FERRY_EXEC_WINDOWS")  # wine on a Windows program, with ferry.dll
EXEC_STATIC_PIE = constant("FERRY_EXEC_STATIC_PIE")
EXEC_ELF32 = constant("FERRY_EXEC_ELF32")
EXEC_LOADER = constant("FERRY_EXEC_LOADER")
EXEC_PACKED = constant("FERRY_EXEC_PACKED")
EXEC_UNREADABLE = constant("FERRY_EXEC_UNREADABLE")
EXEC_NO_ROOM = constant("FERRY_EXEC_NO_ROOM")
EXEC_SANDBOXED = constant("FERRY_EXEC_SANDBOXED")
MODES = {v: k.lower() for k, v in constants("FERRY_MODE_").items()}
# Modes whose blocks hold errors and times: trace (the traced calls) and aggregate (the calls
# that reach the shim's slow path, the engine's among them; docs/aggregate.md).
RECORDING_MODES = (constant("FERRY_MODE_TRACE"), constant("FERRY_MODE_AGGREGATE"))
SPANS = {v: k.lower() for k, v in constants("FERRY_SPAN_").items()}
# a vfork child's record: its exec hook's steps, where an image has its start's spans
HOOK_STEPS = {v: k.lower() for k, v in constants("FERRY_HOOK_").items() if k != "STEPS"}


class ProcFileError(Exception):
    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass
class NrStats:
    calls: int = 0
    errors: int = 0
    ticks: int = 0
    min_ticks: int = 0
    max_ticks: int = 0
    hist: list = field(default_factory=lambda: [0] * HIST_BUCKETS)
    errnos: dict = field(default_factory=dict)


@dataclass
class Block:
    tid: int
    calls: list
    invalid: int
    nr: dict            # nr -> NrStats (RECORDING_MODES; calls filled from `calls`)
    sites: dict         # global site index (0-based) -> (calls, errors, ticks)
    events: list        # (enter_tsc, exit_tsc, result, nr, site)


@dataclass
class ProcFile:
    path: Path
    pid: int
    ppid: int
    seq: int
    state: int
    exit_code: int
    mode: str
    exe: str
    argv: list
    exec_path: str
    exec_kind: int
    load_patched: int
    start_real_ns: int
    start_mono_ns: int
    start_tsc: int
    end_real_ns: int
    end_mono_ns: int
    end_tsc: int
    cal_tsc: int
    cal_ns: int
    modules: list       # [(name, nsites, site_base)]
    waits: list         # [(pid, status, mono_ns)]
    overflow: int
    blocks: list
    internal: dict      # the shim's own calls: nr -> count
    uid: int = None     # effective user ID of the process when it made the file
    exec_uid: int = None  # effective user ID when the exec in exec_path began
    owner: int = None   # the file's owner
    aggregation: dict = None   # ferry.aggdata record; None: the process made no group
    caught: dict = None        # ferry.catchdata record; None: no catch-all in this process
    platform: int = PLATFORM_LINUX
    names: list = None         # a Windows process's call names, by call number
    max_blocks: int = None     # threads alive at once with a block of their own
    file: Path = None          # the file of proc/ that holds the record
    offset: int = 0            # where in it the record starts
    start_retries: int = 0     # ferry.dll: children wine failed to start, started again

    @property
    def windows(self):
        return self.platform == PLATFORM_WINDOWS

    def name_of(self, nr):
        """The name of call number `nr` in this process: a Linux syscall, or for
        a Windows process the Nt* function its name table gives."""
        if self.names is not None:
            return self.names[nr] if nr < len(self.names) and self.names[nr] else f"call_{nr}"
        return name_of(nr)

    def ticks_to_ns(self, ticks):
        """TSC ticks in ns: from the whole life of the process when it was long
        enough to measure the clock well, else from the start-up calibration."""
        if self.end_tsc > self.start_tsc and self.end_mono_ns - self.start_mono_ns > 50_000_000:
            return ticks * (self.end_mono_ns - self.start_mono_ns) / (self.end_tsc - self.start_tsc)
        if self.cal_tsc:
            return ticks * self.cal_ns / self.cal_tsc
        return float(ticks)


def _cstr(raw):
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _open(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno_names.ELOOP:
            raise ProcFileError(path, "a symbolic link, not a process file") from None
        raise ProcFileError(path, e.strerror.lower()) from None
    f = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        f.close()
        raise ProcFileError(path, "not a regular file")
    try:
        # no reading ahead: past a record's data lie its holes (_read_at)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    except OSError:
        pass
    return f, st


def _read_at(fd, off, length, size, out=None, out_at=0, written=None):
    """The `length` bytes at `off` of the open file `fd` of `size` bytes (fewer
    where the file ends sooner), read only where the file holds data: the
    rest reads as zeros.  A record is mostly holes (its blocks' tables of
    every syscall and site), and reading a hole has the kernel fill page
    cache with zeros for it: ~80 pages a process, most of what reading a run
    of a thousand processes cost.  Into `out` (zeros) from `out_at` when
    given; returns the buffer, cut where the file ends.  `written` (a list)
    gets (offset in the buffer, length) of each piece read into it."""
    length = max(0, min(length, size - off))
    if out is None:
        out = bytearray(length)
    del out[out_at + length:]
    for start, stop in data_extents(fd, off, off + length):
        chunk = os.pread(fd, stop - start, start)
        at = out_at + start - off
        out[at:at + len(chunk)] = chunk
        if written is not None:
            written.append((at, len(chunk)))
        if len(chunk) < stop - start:   # the file ends sooner than it did
            del out[at + len(chunk):]
            break
    return out


_SIZES = ("block_size", "nblocks", "max_blocks", "names_size", "names_offset")


def _read_used(f, base=0, size=None, extents=None):
    """(bytes, names bytes) of the record at `base`: its header and the blocks
    the header says were claimed, and the name table if it has one; a sparse
    record's unused room is never read.  `extents` (a list) gets (offset,
    length) of each piece of the bytes read from the file: the rest of them
    is zeros."""
    fd = f.fileno()
    size = os.fstat(fd).st_size if size is None else size
    data = _read_at(fd, base, HEADER_SIZE, size, written=extents)
    names = b""
    if len(data) == HEADER_SIZE and data[:len(MAGIC)] == MAGIC:
        h = HEADER.unpack_only(data, _SIZES)
        if h["block_size"] % 4096 == 0:
            blocks = min(h["nblocks"], h["max_blocks"], MAX_BLOCKS) * h["block_size"]
            header, data = data, bytearray(HEADER_SIZE + blocks)
            data[:HEADER_SIZE] = header
            _read_at(fd, base + HEADER_SIZE, blocks, size, data, HEADER_SIZE, extents)
        if h["names_size"]:
            names = bytes(_read_at(fd, base + h["names_offset"], min(h["names_size"], MAX_NAMES_SIZE),
                                   size))
    return data, names


class NeverStarted(ProcFileError):
    """A record the shim claimed but never filled in: its process was killed
    while the shim was starting (e.g. with a `ferry run` that was killed)."""


def read(path):
    """The record of a file of one record."""
    path = Path(path)
    f, st = _open(path)
    extents = []
    with f:
        data, names = _read_used(f, 0, st.st_size, extents)
    r = _parse(path, st, data, names, extents)
    r.file = path
    return r


def record_offsets(f, size=None, name=None):
    """Where the records of an open file of proc/ start: 0 in a file of one
    record; each slot claimed so far in a slot file: the file grows by each
    slot as it is claimed (runs of earlier versions also counted them in the
    head's `next`, and may have claimed slots the file never reached)."""
    f.seek(0)
    head = f.read(SLOTS_HEAD)
    if head[:len(SLOTS_MAGIC)] != SLOTS_MAGIC:
        return [0]
    if len(head) < SLOTS_HEAD:
        raise ProcFileError(name or f.name, "truncated process file (a slot file shorter than its head)")
    sh = SLOTS.unpack(head)
    version, capacity, stride, ready = sh["version"], sh["capacity"], sh["stride"], sh["ready"]
    if not ready:
        return []  # its first process is still making it: nothing recorded yet
    if version != SLOTS_VERSION or stride < HEADER_SIZE or stride % 4096:
        raise ProcFileError(name or f.name, "corrupt slot file head")
    size = os.fstat(f.fileno()).st_size if size is None else size
    return [SLOTS_HEAD + i * stride for i in range(min((size - SLOTS_HEAD) // stride, capacity))]


def read_all(path):
    """The records of one file of proc/, a slot file or a file of one record,
    oldest slot first; records never filled in are left out."""
    path = Path(path)
    f, st = _open(path)
    records = []
    with f:
        offsets = record_offsets(f, st.st_size, path)
        for i, base in enumerate(offsets):
            extents = []
            data, names = _read_used(f, base, st.st_size, extents)
            try:
                r = _parse(path if base == 0 else Path(f"{path}#{i}"), st, data, names, extents)
            except NeverStarted:
                continue
            r.file, r.offset = path, base
            records.append(r)
    return records


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector paused meanwhile: reading a run makes a few
    objects for each of thousands of records, none of them in a cycle, and
    each collection the allocations set off walked every object made so far
    (~30 % of reading a run of 7,000 processes, and of making its model)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_dir(proc_dir):
    """Every record of a run's proc/, each pid's images numbered (seq) in the
    order they started: a slot says nothing of the images its pid had before."""
    records = []
    with collector_paused():
        for p in sorted(Path(proc_dir).glob("*.ferry")):
            records.extend(read_all(p))
    records.sort(key=lambda r: (r.start_mono_ns, r.pid))
    images = {}
    for r in records:
        r.seq = images.get(r.pid, 0)
        images[r.pid] = r.seq + 1
    return records


def records_of(proc_dir, pid):
    """The records of process `pid` in a run's proc/, oldest image first;
    those that cannot be read are passed over (the process may be writing)."""
    found = []
    for p in sorted(Path(proc_dir).glob("*.ferry")):
        try:
            found.extend(r for r in read_all(p) if r.pid == pid)
        except ProcFileError:
            continue
    return sorted(found, key=lambda r: r.start_mono_ns)


# The exec kinds whose program records itself: the exec hook handed it the
# run's settings (a rewritten image, or the shim preloaded).
RECORDS_ITS_IMAGE = frozenset((EXEC_REWRITTEN, EXEC_PLAIN, EXEC_WINDOWS))
_EXEC_HEAD = ("state", "pid", "start_mono_ns", "exec_kind")


def pids_between_images(proc_dir):
    """The pids whose latest record in `proc_dir` says they exec'd a program
    that records itself: their new image has no record yet.  Only the heads
    of the records are read (a few hundred bytes each)."""
    latest = {}
    need = max(HEADER.offset(m) + HEADER.span(m) for m in _EXEC_HEAD)
    for path in sorted(Path(proc_dir).glob("*.ferry")):
        try:
            f, st = _open(path)
        except ProcFileError:
            continue
        with f:
            try:
                offsets = record_offsets(f, st.st_size, path)
            except ProcFileError:
                continue
            for base in offsets:
                head = os.pread(f.fileno(), need, base)
                if len(head) < need or head[:len(MAGIC)] != MAGIC:
                    continue    # a slot its process has not filled in yet
                h = {m: int.from_bytes(head[HEADER.offset(m):HEADER.offset(m) + HEADER.span(m)], "little",
                                       signed=m == "pid") for m in _EXEC_HEAD}
                if h["pid"] > 0 and h["start_mono_ns"] >= latest.get(h["pid"], (-1,))[0]:
                    latest[h["pid"]] = (h["start_mono_ns"], h["state"], h["exec_kind"])
    return sorted(pid for pid, (_, state, kind) in latest.items()
                  if state == STATE_EXEC and kind in RECORDS_ITS_IMAGE)


# What a record's reader takes of its header; its tables (modules, waits,
# the catch-all's and the engine's areas) are read apart.
_HEAD = tuple(m for m in HEADER.members
              if m not in ("modules", "first_modules", "waits", "catchall", "aggregate", "reserved2"))


def _module_rows(data, h):
    """The module entries of a record: from version 5 the first ones lie in
    the header's first page (`first_modules`), the others in `modules` at
    their own index."""
    n = h["nmodules"]
    if h["version"] < 5:
        return HEADER.rows(data, 0, "modules", MODULE, n)
    first = HEADER.rows(data, 0, "first_modules", MODULE, min(n, FIRST_MODULES))
    if n <= FIRST_MODULES:
        return first
    return first + HEADER.rows(data, 0, "modules", MODULE, n)[FIRST_MODULES:]


def _parse(path, st, data, names, extents=None):
    """The record in `data`; `extents` (as _read_used gives them), when
    known, say where it may hold anything but zeros."""
    if not any(data[:HEADER_SIZE]):
        raise NeverStarted(path, "the process was killed before the shim wrote its file")
    if len(data) < HEADER_SIZE:
        raise ProcFileError(path, "truncated process file (shorter than its header)")
    if data[:len(MAGIC)] != MAGIC:
        raise ProcFileError(path, "not a Ferry process file")
    h = HEADER.unpack_only(data, _HEAD)
    if h["version"] in (1, 2):
        h.update({m: struct.unpack_from(fmt, data, at)[0] for m, (at, fmt) in HEADER_V2.items()})
        h["own"] = ()
    if h["version"] in (2, 3, 4):
        h.update({m: struct.unpack_from(fmt, data, at)[0] for m, (at, fmt) in HEADER_V4.items()})
    if h["version"] in (3, 4, 5):
        h.update({m: struct.unpack_from(fmt, data, at)[0] for m, (at, fmt) in HEADER_V3.items()})
    if h["version"] < 6:
        h["packed_len"] = 0
    if h["version"] == 1:
        h.update({m: struct.unpack_from(fmt, data, at)[0] for m, (at, fmt) in HEADER_V1.items()})
    tables = BLOCK_TABLES.get(h["version"])
    if tables is None or h["header_size"] != HEADER_SIZE:
        raise ProcFileError(path, f"unsupported process file version {h['version']}")
    block_size = h["block_size"]
    if block_size < tables["events"] or block_size % 4096:
        raise ProcFileError(path, "corrupt process file header (block size)")
    platform = h["platform"]
    if platform not in (PLATFORM_LINUX, PLATFORM_WINDOWS):
        raise ProcFileError(path, f"corrupt process file header (platform {platform})")
    if h["packed_len"]:
        _unpack_block(path, data, h, tables["events"], extents)
    table = None
    if platform == PLATFORM_WINDOWS:
        table = [_cstr(names[i:i + NAME_SIZE]) for i in range(0, len(names) - NAME_SIZE + 1, NAME_SIZE)]
    argv = [a.decode("utf-8", "surrogateescape")
            for a in h["cmdline"][:h["cmdline_len"]].split(b"\0")[:-1]]
    modules = [(_cstr(m["name"]), m["nsites"], m["site_base"]) for m in _module_rows(data, h)]
    exe = _cstr(h["exe"])
    if h["exe_ino"]:
        # the executable's module bears the name the shim had for it (cut to fit)
        cut = _cstr(h["exe"][:MODULE.span("name") - 1])
        exe = _resolved(exe, h["exe_dev"], h["exe_ino"])
        modules = [(exe if name == cut else name, n, base) for name, n, base in modules]
    waits = [(w["pid"], w["status"], w["mono_ns"]) for w in HEADER.rows(data, 0, "waits", WAIT, h["nwaits"])]
    internal = nonzero(h["internal"])
    for entry in h["own"]:
        nr = (entry >> 48) - 1
        if 0 <= nr < NR_MAX:
            internal[nr] = internal.get(nr, 0) + (entry & OWN_COUNT)
    blocks = []
    mode, state = h["mode"], h["state"]
    count = min(h["nblocks"], h["max_blocks"])
    for b in range(count):
        off = HEADER_SIZE + b * block_size
        if off + tables["events"] > len(data):
            if b == count - 1 and state == STATE_RUNNING:
                break  # a thread was still creating its block when the process died
            raise ProcFileError(path, f"truncated process file (block {b} of {count} missing)")
        blocks.append(_block(data, off, mode, h["event_capacity"], tables, extents))
    try:
        aggregation = aggdata.parse(data)
    except aggdata.AggAreaError as e:
        raise ProcFileError(path, str(e)) from None
    return ProcFile(path, h["pid"], h["ppid"], h["seq"], state, h["exit_code"], MODES.get(mode, "?"),
                    exe, argv, _cstr(h["exec_path"]), h["exec_kind"], h["load_patched"],
                    h["start_real_ns"], h["start_mono_ns"], h["start_tsc"], h["end_real_ns"], h["end_mono_ns"],
                    h["end_tsc"], h["cal_tsc"], h["cal_ns"], modules, waits, h["overflow"], blocks, internal,
                    h["uid"], h["exec_uid"], st.st_uid, aggregation, catchdata.parse(data), platform, table,
                    h["max_blocks"], start_retries=h["start_retries"])


_RUN = struct.Struct("<II")    # struct ferry_packed_run
assert _RUN.size == layout("ferry_packed_run").size


def _unpack_block(path, data, h, tables_end, extents):
    """Lay out in `data` block 0 of a record whose figures are packed in its
    header (a vfork child's: runs of the words that are not zero, after its
    command line), as the block it was: the rest of it is zeros, whatever
    the block's room in the file holds."""
    at, end = h["packed_at"], h["packed_at"] + h["packed_len"]
    after_cmdline = HEADER.offset("cmdline") + min(h["cmdline_len"], HEADER.span("cmdline"))
    if h["nblocks"] != 1 or at % 8 or at < after_cmdline or end > HEADER.offset("modules"):
        raise ProcFileError(path, "corrupt process file header (packed block)")
    block_end = HEADER_SIZE + h["block_size"]
    if len(data) < block_end:
        data.extend(bytes(block_end - len(data)))
    if extents is not None and any(a + n > HEADER_SIZE for a, n in extents):
        data[HEADER_SIZE:block_end] = bytes(block_end - HEADER_SIZE)
        extents[:] = [(a, n) for a, n in extents if a + n <= HEADER_SIZE]
    while at < end:
        if end - at < _RUN.size:
            raise ProcFileError(path, "corrupt packed block (a run cut short)")
        off, n = _RUN.unpack_from(data, at)
        at += _RUN.size
        if off % 8 or n % 8 or not n or off + n > tables_end or at + n > end:
            raise ProcFileError(path, f"corrupt packed block (a run of {n} bytes at {off})")
        data[HEADER_SIZE + off:HEADER_SIZE + off + n] = data[at:at + n]
        if extents is not None:
            extents.append((HEADER_SIZE + off, n))
        at += n


@functools.lru_cache(maxsize=4096)
def _resolved(name, dev, ino):
    """The executable's path as /proc/self/exe gave it, from the name it was
    executed by (absolute) and the file that name led to then: the shim
    records the name and leaves its symlinks to the reader (an `lstat` of
    every component in every start).  A file gone since (a build's test
    program, removed once run) is resolved as far as its directories are;
    one that is another file now (replaced, or named in another root or
    mount namespace) keeps its name, only tidied of `.` and `//` (a `..`
    stays: after a symlink it is not the component before it)."""
    path = os.path.realpath(name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError:
        return _tidy(name)
    return path if (st.st_dev, st.st_ino) == (dev, ino) else _tidy(name)


def _tidy(name):
    return "/" + "/".join(c for c in name.split("/") if c not in ("", "."))


def nonzero(values):
    """{index: value} of the values that are not 0: a block's and the shim's
    tables hold one entry for every call number, and a process uses a
    handful (a loop over all 512 in Python, twice per record, was a third of
    reading a run of short processes)."""
    return {n: values[n] for n in compress(range(len(values)), values)}


def _figures_at(data, off, tables, n):
    """Offset of number n's figures in the block at `off`, or None when it
    was never timed: in order of first use, where nr_slot says (version 2),
    or at index n (version 1)."""
    nr_at = off + tables["nr"]
    if "nr_slot" not in tables:
        return nr_at + n * NR_STATS.size
    k = _U16.unpack_from(data, off + tables["nr_slot"] + 2 * n)[0]
    return nr_at + (k - 1) * NR_STATS.size if 0 < k <= NR_MAX else None


_U16 = struct.Struct("<H")
# The block's head, up to its tables: unpacking the whole block copied its
# tables (~260 KiB) out of every record read.
_BLOCK_HEAD = struct.Struct("<IiQQ")  # in_use, tid, next, event_head
assert [BLOCK.offset(m) for m in ("tid", "next", "event_head")] == [4, 8, 16]
_CALLS = struct.Struct(f"<{NR_MAX}Q")
_U64 = struct.Struct("<Q")


def _table_rows(layout_, data, at, span, extents, word=0):
    """(index, row) of each row of the table of `layout_` rows at [at, at +
    span) of `data` whose 64-bit word `word` is not zero (a site's calls, an
    errno slot's key), rows as the layout's codec unpacks them.  Only the
    part of the table that `extents` (as _read_used gives them) say was read
    from the file is looked at: the rest is zeros.  The rows are picked in C
    (a view of the words, itertools.compress): a block's site table spans
    hundreds of rows between the few a process used, and unpacking each
    row in between was half of reading a record."""
    lo, hi = at, at + span
    if extents is not None:
        lo, hi = at + span, at
        for a, n in extents:
            if a < at + span and a + n > at:
                lo, hi = min(lo, max(a, at)), max(hi, min(a + n, at + span))
        if lo >= hi:
            return ()
    size = layout_.size
    r0 = (lo - at) // size
    r1 = -(-(hi - at) // size)
    base = at + r0 * size
    with memoryview(data) as view, view[base:at + r1 * size] as table, table.cast("Q") as words:
        used = list(compress(range(r1 - r0), words[word::size // 8]))
    unpack = layout_.codec.unpack_from
    return [(r0 + i, unpack(data, base + i * size)) for i in used]


# A number's figures as a tuple (a dict for each was a tenth of reading a record).
_NR_FIGURES = NR_STATS.codec
_NR_ERRORS, _NR_TIME, _NR_SHORTEST, _NR_LONGEST = (
    NR_STATS.position(m) for m in ("errors", "time_total", "time_min", "time_max"))
_NR_HIST = slice(NR_STATS.position("hist"), NR_STATS.position("hist") + HIST_BUCKETS)
_SITE_AT = tuple(SITE_STATS.position(m) for m in ("site", "calls", "errors", "time_total"))
_ERRNO_AT = (ERRNO_SLOT.position("key"), ERRNO_SLOT.position("count"))
# the 64-bit word of a row that says it is used: a site's calls, an errno
# slot's key (with the reserved half beside it, zero)
_SITE_WORD = SITE_STATS.offset("calls") // 8
_ERRNO_WORD = ERRNO_SLOT.offset("key") // 8
assert SITE_STATS.size % 8 == 0 and ERRNO_SLOT.size % 8 == 0


class _SitesV3:
    """A row of the site table of versions 1-3: calls, errors, ticks, at
    the index of its site."""
    size = 24
    codec = struct.Struct("<3Q")


def _block(data, off, mode, capacity, tables, extents=None):
    _, tid, _, event_head = _BLOCK_HEAD.unpack_from(data, off)
    calls = list(_CALLS.unpack_from(data, off + BLOCK.offset("calls")))
    invalid = _U64.unpack_from(data, off + BLOCK.offset("invalid"))[0]
    nr, sites, events = {}, {}, []
    off_events = off + tables["events"]
    if mode in RECORDING_MODES:
        for n in compress(range(NR_MAX), calls):
            at = _figures_at(data, off, tables, n)
            if at is None:  # counted, never timed (exit_group): as version 1 read its zeros
                nr[n] = NrStats(calls[n])
                continue
            s = _NR_FIGURES.unpack_from(data, at)
            nr[n] = NrStats(calls[n], s[_NR_ERRORS], s[_NR_TIME], s[_NR_SHORTEST], s[_NR_LONGEST],
                            list(s[_NR_HIST]))
        if tables["sites_keyed"]:
            si, ci, ei, ti = _SITE_AT
            for _, row in _table_rows(SITE_STATS, data, off + tables["sites"], tables["sites_span"],
                                      extents, _SITE_WORD):
                if 0 < row[si] <= MAX_SITES:
                    sites[row[si] - 1] = (row[ci], row[ei], row[ti])
        else:
            for g, row in _table_rows(_SitesV3, data, off + tables["sites"], tables["sites_span"], extents, 0):
                sites[g] = row
        ki, ni = _ERRNO_AT
        for _, row in _table_rows(ERRNO_SLOT, data, off + tables["errnos"], tables["errnos_span"], extents,
                                  _ERRNO_WORD):
            key, count = row[ki], row[ni]
            if key and count:
                n, err = key >> 16, key & 0xFFFF
                if n in nr:
                    name = errno_names.errorcode.get(err, f"E{err}")
                    nr[n].errnos[name] = nr[n].errnos.get(name, 0) + count
        if capacity and event_head:
            n_events = min(event_head, capacity)
            ring_end = off_events + capacity * EVENT.size
            if ring_end <= len(data):
                for k in range(event_head - n_events, event_head):
                    e = EVENT.unpack(data, off_events + (k % capacity) * EVENT.size)
                    events.append((e["enter_tsc"], e["exit_tsc"], e["result"], e["nr"], e["site"]))
    return Block(tid, calls, invalid, nr, sites, events)
