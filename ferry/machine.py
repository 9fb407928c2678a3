"""What this machine offers Ferry (`ferry doctor`): each probe asks the kernel
itself (a ring is set up, a prctl is made, the auxiliary vector is read) rather
than guessing from version numbers, which distributions and containers bend."""
import ctypes
import errno
import os
import shutil
import struct
from dataclasses import asdict, dataclass

OK, LIMITED, MISSING = "yes", "limited", "no"

SYS_IO_URING_SETUP = 425
PR_SET_SYSCALL_USER_DISPATCH = 59
PR_SYS_DISPATCH_OFF = 0
AT_HWCAP2 = 26
HWCAP2_FSGSBASE = 1 << 1
CAP_SYS_PTRACE = 19


@dataclass
class Check:
    name: str
    status: str  # OK, LIMITED or MISSING
    found: str  # what the probe saw
    enables: str  # what Ferry does with it
    fix: str = ""  # how to get it, when status is not OK

    def as_dict(self):
        return asdict(self)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _errno_text(e):
    return f"{os.strerror(e)} ({errno.errorcode.get(e, e)})"


def kernel():
    u = os.uname()
    found = f"{u.sysname} {u.release} {u.machine}"
    enables = "everything: the rewriter and the shim target x86-64 Linux"
    if u.sysname == "Linux" and u.machine == "x86_64":
        return Check("kernel", OK, found, enables)
    return Check("kernel", MISSING, found, enables, "run Ferry on an x86-64 Linux machine")


def io_uring():
    enables = "the aggregate, net and fibers profiles (the shim's engine submits calls in batches)"
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    libc = _libc()
    fd = libc.syscall(SYS_IO_URING_SETUP, ctypes.c_uint(4), params)
    if fd >= 0:
        os.close(fd)
        return Check("io_uring", OK, "a ring of 4 entries was set up", enables)
    e = ctypes.get_errno()
    fix = ("Linux 5.1 or later; if the kernel has it, allow it: "
           "`sysctl kernel.io_uring_disabled=0`, or in a container a seccomp profile that "
           "permits io_uring_setup (docker run --security-opt seccomp=unconfined)")
    return Check("io_uring", MISSING, f"io_uring_setup failed: {_errno_text(e)}", enables, fix)


def syscall_user_dispatch():
    enables = ("the catch-all (profiles with catch_all = true): calls from code no rewrite "
               "patched, such as JIT code, are still recorded")
    libc = _libc()
    r = libc.prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0)
    if r == 0:
        return Check("Syscall User Dispatch", OK, "prctl(PR_SET_SYSCALL_USER_DISPATCH) accepted",
                     enables)
    e = ctypes.get_errno()
    return Check("Syscall User Dispatch", MISSING,
                 f"prctl(PR_SET_SYSCALL_USER_DISPATCH) failed: {_errno_text(e)}", enables,
                 "Linux 5.11 or later (the catch-all is then off; rewritten sites still work)")


def _auxv(key):
    with open("/proc/self/auxv", "rb") as f:
        data = f.read()
    for k, v in struct.iter_unpack("<QQ", data[:len(data) // 16 * 16]):
        if k == key:
            return v
    return None


def fsgsbase():
    enables = "fast fiber switches in the fibers profile (wrfsbase: ~12 ns instead of ~170 ns)"
    hwcap2 = _auxv(AT_HWCAP2)
    if hwcap2 is not None and hwcap2 & HWCAP2_FSGSBASE:
        return Check("FSGSBASE", OK, "AT_HWCAP2 has HWCAP2_FSGSBASE", enables)
    return Check("FSGSBASE", LIMITED,
                 "AT_HWCAP2 lacks HWCAP2_FSGSBASE" if hwcap2 is not None else "no AT_HWCAP2",
                 enables, "Linux 5.9 or later on a CPU with FSGSBASE (Ivy Bridge or later), "
                          "not booted with nofsgsbase; without it fibers switch with arch_prctl")


def _has_cap(bit):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except OSError:
        pass
    return False


def ptrace_scope():
    enables = "ferry attach (injecting the shim into a running process)"
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except (OSError, ValueError):
        return Check("ptrace scope", OK, "no Yama restrictions", enables)
    capable = _has_cap(CAP_SYS_PTRACE)
    found = f"kernel.yama.ptrace_scope = {scope}" + (", with CAP_SYS_PTRACE" if capable else "")
    if scope == 0 or (scope in (1, 2) and capable):
        return Check("ptrace scope", OK, found, enables)
    if scope == 3:
        return Check("ptrace scope", MISSING, found, enables,
                     "scope 3 cannot be lowered until reboot; boot with kernel.yama.ptrace_scope=1")
    return Check("ptrace scope", LIMITED, found, enables,
                 "attach only to your own children as it is; `sysctl kernel.yama.ptrace_scope=0`, "
                 "or run ferry attach as root / with CAP_SYS_PTRACE")


def wine():
    enables = ("the Windows side (ferry.dll, built with mingw-w64, run under wine); "
               "Ferry does not build it yet")
    have = {n: shutil.which(n) for n in ("wine", "x86_64-w64-mingw32-gcc")}
    found = ", ".join(f"{n}: {p or 'not found'}" for n, p in have.items())
    if all(have.values()):
        return Check("wine / mingw-w64", OK, found, enables)
    return Check("wine / mingw-w64", MISSING, found, enables,
                 "apt-get install wine gcc-mingw-w64-x86-64")


def image_cache():
    from .injector.launch import check_cache_usable
    from .rewriter import cache
    from .base.errors import FerryError
    root = cache.root()
    enables = "running programs: rewritten images are kept and run from the image cache"
    try:
        check_cache_usable(root)
    except FerryError as e:
        return Check("image cache", MISSING, f"{root}: {e.problem}", enables,
                     "set FERRY_CACHE (or XDG_CACHE_HOME) to a writable directory on an exec mount")
    state = "writable" if root.is_dir() else "to be created, its parent is writable"
    return Check("image cache", OK, f"{root}: {state}", enables)


def shim():
    from .rewriter import shimlib
    from .base.errors import FerryError
    enables = "everything: libferry.so is what rewritten sites jump into"
    try:
        return Check("shim", OK, str(shimlib.path()), enables)
    except FerryError as e:
        return Check("shim", MISSING, f"{e.path}: {e.problem}", enables,
                     "`make shim` in the source tree, reinstall the package, or set FERRY_SHIM")


PROBES = (kernel, shim, io_uring, syscall_user_dispatch, fsgsbase, ptrace_scope, image_cache, wine)


def checks():
    return [probe() for probe in PROBES]

