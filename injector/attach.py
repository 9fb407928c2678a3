"""`ferry attach PID`: enable a running dynamic process through ptrace.

Every thread is stopped (PTRACE_SEIZE + PTRACE_INTERRUPT), then the main
thread is made to call libc's `dlopen` on libferry.so, as a debugger calls a
function in its inferior: its registers and the stack words we use are saved,
the call returns to address 0 so that its end is a SIGSEGV stop we catch,
and everything is put back exactly, so a blocking call the thread was in is
restarted as before.  The shim's constructor runs inside that dlopen, while
the other threads are still stopped, and patches libc in memory from its
cached plan (the same load-time patching as for preloaded children).  Its
settings come from /tmp/ferry-attach.<pid>, since the process's environment
is its own.  `ferry detach PID` calls the shim's `ferry_detach` the same way.
"""
import ctypes
import ctypes.util
import os
import signal
import time
from pathlib import Path

from ..base.errors import FerryError

PTRACE_PEEKDATA, PTRACE_POKEDATA = 2, 5
PTRACE_CONT, PTRACE_DETACH = 7, 17
PTRACE_GETREGS, PTRACE_SETREGS = 12, 13
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
WALL = 0x40000000
RTLD_NOW = 2
CALL_TIMEOUT = 20.0

_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
         "fs_base gs_base ds es fs gs").split()


class Regs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in _REGS]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_ptrace = _libc.ptrace
_ptrace.restype = ctypes.c_long
_ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def _call(req, tid, addr=0, data=0, check=True):
    ctypes.set_errno(0)
    r = _ptrace(req, tid, ctypes.c_void_p(addr), ctypes.c_void_p(data))
    err = ctypes.get_errno()
    if check and r == -1 and err:
        raise OSError(err, os.strerror(err))
    return r


def _threads(pid):
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        raise FerryError(pid, "no such process") from None


def _wait_stop(tid, timeout=CALL_TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(tid, os.WNOHANG | WALL)
        if done:
            return status
        if time.monotonic() > deadline:
            raise FerryError(tid, "the thread did not stop in time (is it stuck on a lock?)")
        time.sleep(0.001)


class Stopped:
    """All threads of `pid` stopped for the duration of the `with` block."""

    def __init__(self, pid):
        self.pid = pid
        self.tids = []
        self.rips = []  # where each thread stopped

    def __enter__(self):
        seen = set()
        try:
            while True:  # threads may appear while we stop the others
                new = [t for t in _threads(self.pid) if t not in seen]
                if not new:
                    break
                for tid in new:
                    seen.add(tid)
                    try:
                        _call(PTRACE_SEIZE, tid)
                    except ProcessLookupError:
                        continue  # a thread that ended after it was listed (a server's per-request thread)
                    self.tids.append(tid)
                    try:
                        _call(PTRACE_INTERRUPT, tid)
                        status = _wait_stop(tid)
                        if not os.WIFSTOPPED(status):
                            raise ProcessLookupError
                        regs = Regs()
                        _call(PTRACE_GETREGS, tid, 0, ctypes.addressof(regs))
                    except (ProcessLookupError, ChildProcessError):
                        self.tids.remove(tid)  # it ended while we stopped it
                        continue
                    self.rips.append(regs.rip)
        except PermissionError:
            self.__exit__(None, None, None)
            raise FerryError(self.pid, "ptrace denied (another tracer, or not allowed by "
                                       "kernel.yama.ptrace_scope; try as root)") from None
        except OSError as e:
            self.__exit__(None, None, None)
            raise FerryError(self.pid, f"cannot stop it: {e.strerror}") from None
        return self

    def __exit__(self, *exc):
        for tid in self.tids:
            _call(PTRACE_DETACH, tid, 0, 0, check=False)

    def call(self, func, *args):
        """Call `func(*args)` (integer or bytes arguments) in the main thread."""
        tid = self.pid
        saved = Regs()
        _call(PTRACE_GETREGS, tid, 0, ctypes.addressof(saved))
        regs = Regs.from_buffer_copy(saved)
        # Below the red zone, 16-byte aligned, with room for the strings.
        blobs = [a for a in args if isinstance(a, bytes)]
        room = sum(len(b) + 8 for b in blobs) + 64
        # At a function's entry rsp is 8 past a multiple of 16 (the call pushed
        # the return address): the callee's aligned stack stores depend on it.
        sp = ((saved.rsp - 128 - room) & ~0xF) - 8
        words = {}
        cursor = sp + 16
        values = []
        for a in args:
            if isinstance(a, bytes):
                values.append(cursor)
                data = a + b"\0" * (8 - len(a) % 8)
                for i in range(0, len(data), 8):
                    words[cursor + i] = int.from_bytes(data[i:i + 8], "little")
                cursor += len(data)
            else:
                values.append(a)
        words[sp] = 0  # the return address: the call ends in a fault at 0
        original = {addr: _call(PTRACE_PEEKDATA, tid, addr, 0) & (2**64 - 1) for addr in words}
        try:
            for addr, value in words.items():
                _call(PTRACE_POKEDATA, tid, addr, value)
            for name, value in zip(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), values):
                setattr(regs, name, value)
            regs.rsp, regs.rip, regs.rax, regs.orig_rax = sp, func, 0, 2**64 - 1
            _call(PTRACE_SETREGS, tid, 0, ctypes.addressof(regs))
            _call(PTRACE_CONT, tid, 0, 0)
            status = _wait_stop(tid)
            after = Regs()
            _call(PTRACE_GETREGS, tid, 0, ctypes.addressof(after))
            if not (os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSEGV and after.rip == 0):
                raise FerryError(self.pid, f"the injected call did not return as expected "
                                           f"(stop status {status:#x} at {after.rip:#x})")
            return after.rax
        finally:
            for addr, value in original.items():
                _call(PTRACE_POKEDATA, tid, addr, value, check=False)
            _call(PTRACE_SETREGS, tid, 0, ctypes.addressof(saved), check=False)


def _mapping_of(pid, path_endswith):
    """(base, path) of the first mapping of a file whose name ends so."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].endswith(path_endswith) and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16), parts[5]
    return None, None


def _symbol(path, name):
    import lief
    binary = lief.ELF.parse(path)
    for sym in binary.dynamic_symbols:
        if sym.name == name and sym.value:
            return sym.value
    raise FerryError(path, f"has no symbol {name}")


def settings_file(pid):
    return Path(f"/tmp/ferry-attach.{pid}")


def attach(pid, shim_path, env):
    """Load the shim into process `pid` with the FERRY_* settings in `env`."""
    base, libc = _mapping_of(pid, "/libc.so.6")
    if base is None:
        raise FerryError(pid, "no libc.so.6 in it (a static program cannot be attached)")
    already, _ = _mapping_of(pid, "/libferry.so")
    if already is not None:
        raise FerryError(pid, "already has the shim")
    dlopen = base + _symbol(libc, "dlopen")
    path = settings_file(pid)
    try:
        with Stopped(pid) as stopped:
            # A thread stopped in a call resumes at rip, or restarts the call at
            # rip - 2: the windows over those bytes must stay as they are.
            avoid = sorted({a for rip in stopped.rips for a in (rip, rip - 2)})
            settings = dict(env, FERRY_AVOID=",".join(f"{a:x}" for a in avoid))
            path.unlink(missing_ok=True)  # never write through a name someone else made
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                # The shim reads it only if it is its user's, and no one else's to change.
                if os.geteuid() != real_uid(pid):
                    os.fchown(f.fileno(), real_uid(pid), -1)
                f.write("".join(f"{k}={v}\n" for k, v in settings.items()))
            handle = stopped.call(dlopen, str(shim_path).encode(), RTLD_NOW)
    finally:
        path.unlink(missing_ok=True)
    if not handle:
        raise FerryError(pid, "dlopen of the shim failed in the process")


def real_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise FerryError(pid, "no such process")


def detach(pid):
    """Make process `pid`'s shim stop intercepting."""
    base, shim = _mapping_of(pid, "/libferry.so")
    if base is None:
        raise FerryError(pid, "has no shim to detach")
    with Stopped(pid) as stopped:
        stopped.call(base + _symbol(shim, "ferry_detach"))
