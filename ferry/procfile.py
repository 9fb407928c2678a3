"""Reading the process records written by the shim in a run's proc/: slot
files (`proc/u<uid>-<k>.ferry`, one record per slot, shared by the processes
of one user) and files of one record (`proc/<pid>-<seq>.ferry`).

Every offset mirrors shim/src/procfile.h (tests/test_layout_matches_shim.py
checks them).  A record has room for the most blocks the shim may claim (sparse);
only its header and the blocks it says were claimed are read, and they are
checked before use: a truncated or corrupt file is a ProcFileError naming it,
never a crash.  proc/ may be writable by other users (a run whose processes
change user): only regular files are read, never through a symlink, and
never a FIFO that would block.
"""
import errno as errno_names
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from . import aggdata, catchdata
from .rewriter.syscall_table import name_of

MAGIC = b"FERRYPROC\0v1\0\0\0\0"
SLOTS_MAGIC = b"FERRYSLOTS\0v1\0\0\0"
SLOTS_VERSION = 1
SLOTS_HEAD = 4096           # struct ferry_slots_head: magic, version, capacity, stride, next, ready
VERSION = 1
HEADER_SIZE = 65536
NR_MAX = 512
MAX_SITES = 4096
HIST_BUCKETS = 32
ERRNO_SLOTS = 1024
EVENT_SIZE = 32

OFF_CALLS = 64
OFF_INVALID = 4160
OFF_NR = 4224
NR_STATS_SIZE = 8 * (4 + HIST_BUCKETS)
OFF_SITES = 151680
SITE_STATS_SIZE = 24
OFF_ERRNOS = 249984
OFF_EVENTS = 266368
OFF_MODULES = 8192
MODULE_SIZE = 256
OFF_WAITS = 40960
WAIT_SIZE = 16
OFF_INTERNAL = 49152
OFF_UID = 152
OFF_PLATFORM = 224          # u32 platform, u32 names_size, u64 names_offset
PLATFORM_LINUX, PLATFORM_WINDOWS = 0, 1
NAME_SIZE = 64
MAX_NAMES_SIZE = NR_MAX * NAME_SIZE

STATE_RUNNING, STATE_EXITED, STATE_EXEC, STATE_DETACHED = 1, 2, 3, 4
EXEC_REWRITTEN, EXEC_PLAIN, EXEC_SETUID, EXEC_STATIC, EXEC_UNKNOWN, EXEC_FOREIGN = 1, 2, 3, 4, 5, 6
MODES = {0: "off", 1: "count", 2: "trace", 3: "aggregate"}
# Modes whose blocks hold errors and times: trace (the traced calls) and aggregate (the calls
# that reach the shim's slow path, the engine's among them; docs/aggregate.md).
RECORDING_MODES = (2, 3)


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
    file: Path = None          # the file of proc/ that holds the record
    offset: int = 0            # where in it the record starts

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
    return f, st


def _read_used(f, base=0):
    """(bytes, names bytes) of the record at `base`: its header and the blocks
    the header says were claimed, and the name table if it has one; a sparse
    record's unused room is never read."""
    f.seek(base)
    data = f.read(HEADER_SIZE)
    names = b""
    if len(data) == HEADER_SIZE and data[:16] == MAGIC:
        block_size, max_blocks, nblocks = struct.unpack_from("<III", data, 24)
        if block_size % 4096 == 0:
            data += f.read(min(nblocks, max_blocks, 1024) * block_size)
        _platform, names_size, names_offset = struct.unpack_from("<IIQ", data, OFF_PLATFORM)
        if names_size:
            f.seek(base + names_offset)
            names = f.read(min(names_size, MAX_NAMES_SIZE))
    return data, names


class NeverStarted(ProcFileError):
    """A record the shim claimed but never filled in: its process was killed
    while the shim was starting (e.g. with a `ferry run` that was killed)."""


def read(path):
    """The record of a file of one record."""
    path = Path(path)
    f, st = _open(path)
    with f:
        data, names = _read_used(f)
    r = _parse(path, st, data, names)
    r.file = path
    return r


def record_offsets(f, size=None, name=None):
    """Where the records of an open file of proc/ start: 0 in a file of one
    record; each slot claimed so far in a slot file, less those at its end
    that the file does not reach yet (their process was killed between
    claiming the slot and growing the file: nothing was recorded there)."""
    f.seek(0)
    head = f.read(SLOTS_HEAD)
    if head[:16] != SLOTS_MAGIC:
        return [0]
    if len(head) < SLOTS_HEAD:
        raise ProcFileError(name or f.name, "truncated process file (a slot file shorter than its head)")
    version, capacity, stride, claimed, ready = struct.unpack_from("<IIQII", head, 16)
    if not ready:
        return []  # its first process is still making it: nothing recorded yet
    if version != SLOTS_VERSION or stride < HEADER_SIZE or stride % 4096:
        raise ProcFileError(name or f.name, "corrupt slot file head")
    size = os.fstat(f.fileno()).st_size if size is None else size
    bases = [SLOTS_HEAD + i * stride for i in range(min(claimed, capacity))]
    while bases and bases[-1] + stride > size:
        bases.pop()
    return bases


def read_all(path):
    """The records of one file of proc/, a slot file or a file of one record,
    oldest slot first; records never filled in are left out."""
    path = Path(path)
    f, st = _open(path)
    records = []
    with f:
        offsets = record_offsets(f, st.st_size, path)
        for i, base in enumerate(offsets):
            data, names = _read_used(f, base)
            try:
                r = _parse(path if base == 0 else Path(f"{path}#{i}"), st, data, names)
            except NeverStarted:
                continue
            r.file, r.offset = path, base
            records.append(r)
    return records


def read_dir(proc_dir):
    """Every record of a run's proc/, each pid's images numbered (seq) in the
    order they started: a slot says nothing of the images its pid had before."""
    records = []
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


def _parse(path, st, data, names):
    if not any(data[:HEADER_SIZE]):
        raise NeverStarted(path, "the process was killed before the shim wrote its file")
    if len(data) < HEADER_SIZE:
        raise ProcFileError(path, "truncated process file (shorter than its header)")
    if data[:16] != MAGIC:
        raise ProcFileError(path, "not a Ferry process file")
    version, header_size, block_size, max_blocks, nblocks, state, pid, ppid, exit_code, mode = \
        struct.unpack_from("<IIIIIIiiii", data, 16)
    if version != VERSION or header_size != HEADER_SIZE:
        raise ProcFileError(path, f"unsupported process file version {version}")
    if block_size < OFF_EVENTS or block_size % 4096:
        raise ProcFileError(path, "corrupt process file header (block size)")
    (start_real, start_mono, start_tsc, end_real, end_mono, end_tsc, cal_tsc, cal_ns) = \
        struct.unpack_from("<8Q", data, 56)
    nmodules, nsites, nwaits, event_capacity, overflow, seq, exec_kind, load_patched = \
        struct.unpack_from("<8I", data, 120)
    uid, exec_uid = struct.unpack_from("<II", data, OFF_UID)
    platform, = struct.unpack_from("<I", data, OFF_PLATFORM)
    if platform not in (PLATFORM_LINUX, PLATFORM_WINDOWS):
        raise ProcFileError(path, f"corrupt process file header (platform {platform})")
    table = None
    if platform == PLATFORM_WINDOWS:
        table = [_cstr(names[i:i + NAME_SIZE]) for i in range(0, len(names) - NAME_SIZE + 1, NAME_SIZE)]
    cmdline_len, = struct.unpack_from("<I", data, 1280)
    argv = [a.decode("utf-8", "surrogateescape")
            for a in data[1288:1288 + min(cmdline_len, 4096)].split(b"\0")[:-1]]
    modules = []
    for i in range(min(nmodules, 128)):
        off = OFF_MODULES + i * MODULE_SIZE
        name = _cstr(data[off:off + 232])
        m_nsites, m_base = struct.unpack_from("<II", data, off + 232)
        modules.append((name, m_nsites, m_base))
    waits = [struct.unpack_from("<iiQ", data, OFF_WAITS + i * WAIT_SIZE) for i in range(min(nwaits, 512))]
    internal = {n: c for n, c in enumerate(struct.unpack_from(f"<{NR_MAX}Q", data, OFF_INTERNAL)) if c}
    blocks = []
    count = min(nblocks, max_blocks)
    for b in range(count):
        off = HEADER_SIZE + b * block_size
        if off + OFF_EVENTS > len(data):
            if b == count - 1 and state == STATE_RUNNING:
                break  # a thread was still creating its block when the process died
            raise ProcFileError(path, f"truncated process file (block {b} of {count} missing)")
        blocks.append(_block(data, off, mode, event_capacity, block_size))
    try:
        aggregation = aggdata.parse(data)
    except aggdata.AggAreaError as e:
        raise ProcFileError(path, str(e)) from None
    return ProcFile(path, pid, ppid, seq, state, exit_code, MODES.get(mode, "?"), _cstr(data[256:1280]),
                    argv, _cstr(data[5384:6408]), exec_kind, load_patched, start_real, start_mono, start_tsc,
                    end_real, end_mono, end_tsc, cal_tsc, cal_ns, modules, waits, overflow, blocks, internal,
                    uid, exec_uid, st.st_uid, aggregation, catchdata.parse(data), platform, table)


def _block(data, off, mode, capacity, block_size):
    tid, = struct.unpack_from("<i", data, off + 4)
    event_head, = struct.unpack_from("<Q", data, off + 16)
    calls = list(struct.unpack_from(f"<{NR_MAX}Q", data, off + OFF_CALLS))
    invalid, = struct.unpack_from("<Q", data, off + OFF_INVALID)
    nr, sites, events = {}, {}, []
    if mode in RECORDING_MODES:
        for n in range(NR_MAX):
            if not calls[n]:
                continue
            o = off + OFF_NR + n * NR_STATS_SIZE
            errors, ticks, mn, mx = struct.unpack_from("<4Q", data, o)
            hist = list(struct.unpack_from(f"<{HIST_BUCKETS}Q", data, o + 32))
            nr[n] = NrStats(calls[n], errors, ticks, mn, mx, hist)
        raw = data[off + OFF_SITES:off + OFF_SITES + MAX_SITES * SITE_STATS_SIZE]
        for g, (c, e, t) in enumerate(struct.iter_unpack("<3Q", raw)):
            if c:
                sites[g] = (c, e, t)
        raw = data[off + OFF_ERRNOS:off + OFF_ERRNOS + ERRNO_SLOTS * 16]
        for key, _pad, count in struct.iter_unpack("<IIQ", raw):
            if key and count:
                n, err = key >> 16, key & 0xFFFF
                if n in nr:
                    name = errno_names.errorcode.get(err, f"E{err}")
                    nr[n].errnos[name] = nr[n].errnos.get(name, 0) + count
        if capacity and event_head:
            n_events = min(event_head, capacity)
            ring_end = off + OFF_EVENTS + capacity * EVENT_SIZE
            if ring_end <= len(data):
                for k in range(event_head - n_events, event_head):
                    o = off + OFF_EVENTS + (k % capacity) * EVENT_SIZE
                    t0, t1, result, nr_, _r, site = struct.unpack_from("<QQqHHI", data, o)
                    events.append((t0, t1, result, nr_, site))
    return Block(tid, calls, invalid, nr, sites, events)
