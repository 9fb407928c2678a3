"""Where a fiber's system call goes: the syscall groups a profile's [aggregate.route]
may name, the calls that must stay native, and the expansion of a route table into
one target per syscall number (what FERRY_AGG carries).

Groups are disjoint, so a syscall is never claimed by two groups; a syscall named
on its own overrides its group, and a group overrides "default".

The same table routes a Windows program's Nt* calls (ferry.dll): each group has
its Nt calls too (WIN_GROUPS), a key may name an Nt call, and `expand_windows`
gives {Nt name: target}, since only ferry.dll can number an ntdll's calls.
"""
import re

from ..base.syscall_table import NAMES, NUMBERS

NATIVE, WORKER = "native", "worker"

GROUPS = {
    "files": (
        "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev",
        "preadv2", "pwritev2", "open", "openat", "openat2", "creat", "close", "lseek",
        "fsync", "fdatasync", "sync_file_range", "fallocate", "ftruncate", "truncate",
        "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
        "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
        "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
        "link", "linkat", "symlink", "symlinkat", "fadvise64", "flock", "fcntl", "dup", "dup2",
        "dup3", "sendfile", "copy_file_range", "chmod", "fchmod", "fchmodat", "chown", "fchown",
        "lchown", "fchownat", "utimensat", "getxattr", "fgetxattr", "lgetxattr", "setxattr",
        "fsetxattr", "lsetxattr", "sync", "syncfs", "ioctl",
    ),
    "sockets": (
        "socket", "socketpair", "connect", "accept", "accept4", "bind", "listen", "shutdown",
        "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "getsockname",
        "getpeername", "setsockopt", "getsockopt",
    ),
    "pipes": ("pipe", "pipe2", "splice", "tee", "vmsplice"),
    "events": (
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    ),
    "timers": (
        "nanosleep", "clock_nanosleep", "timerfd_create", "timerfd_settime", "timerfd_gettime",
        "alarm", "getitimer", "setitimer",
    ),
    "clock": ("clock_gettime", "clock_getres", "gettimeofday", "time"),
    "identity": ("getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getpgrp",
                 "getpgid", "getsid", "getgroups", "getresuid", "getresgid"),
    "futexes": ("futex", "futex_waitv"),
    "memory": ("mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "msync", "mincore",
               "mlock", "munlock", "mlockall", "munlockall"),
    "process": ("wait4", "waitid", "kill", "tkill", "tgkill"),
}
# Every syscall the other entries of a route table do not name, except MUST_NATIVE.
DEFAULT = "default"

# Calls that act on the calling thread itself (its signal mask, stack, credentials,
# TLS, affinity, identity) or never return to it: run on a worker or through a
# ring they would act on the wrong thread, so they always run on the fiber's own.
MUST_NATIVE = frozenset((
    "clone", "clone3", "fork", "vfork", "execve", "execveat", "exit", "exit_group",
    "rt_sigreturn", "rt_sigprocmask", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigpending",
    "sigaltstack", "pause", "arch_prctl", "set_tid_address", "set_robust_list",
    "get_robust_list", "gettid", "prctl", "seccomp", "unshare", "setns", "sched_yield",
    "sched_setaffinity", "sched_getaffinity", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capset",
))

# The same groups for Windows programs, by Nt name.  Winsock's calls all reach the
# kernel as NtDeviceIoControlFile on an AFD handle (sockets); blocking on an object
# is "waits" (a group Linux programs do not have).
WIN_GROUPS = {
    "files": (
        "NtReadFile", "NtWriteFile", "NtReadFileScatter", "NtWriteFileGather", "NtCreateFile",
        "NtOpenFile", "NtClose", "NtFlushBuffersFile", "NtQueryInformationFile",
        "NtSetInformationFile", "NtQueryAttributesFile", "NtQueryFullAttributesFile",
        "NtQueryVolumeInformationFile", "NtQueryDirectoryFile", "NtQueryDirectoryFileEx",
        "NtDeleteFile", "NtLockFile", "NtUnlockFile", "NtFsControlFile",
        "NtNotifyChangeDirectoryFile", "NtQueryEaFile", "NtSetEaFile",
    ),
    "sockets": ("NtDeviceIoControlFile",),
    "pipes": ("NtCreateNamedPipeFile", "NtCreateMailslotFile"),
    "events": (
        "NtCreateEvent", "NtSetEvent", "NtResetEvent", "NtPulseEvent", "NtClearEvent",
        "NtCreateIoCompletion", "NtSetIoCompletion", "NtRemoveIoCompletion",
        "NtRemoveIoCompletionEx",
    ),
    "waits": ("NtWaitForSingleObject", "NtWaitForMultipleObjects",
              "NtSignalAndWaitForSingleObject", "NtDelayExecution"),
    "timers": ("NtCreateTimer", "NtSetTimer", "NtCancelTimer", "NtQueryTimer"),
    "clock": ("NtQuerySystemTime", "NtQueryPerformanceCounter", "NtQueryTimerResolution",
              "NtGetTickCount"),
    "identity": ("NtQueryInformationProcess", "NtQueryInformationToken", "NtOpenProcessToken",
                 "NtOpenProcessTokenEx"),
    "futexes": ("NtWaitForKeyedEvent", "NtReleaseKeyedEvent"),
    "memory": ("NtAllocateVirtualMemory", "NtFreeVirtualMemory", "NtProtectVirtualMemory",
               "NtQueryVirtualMemory", "NtMapViewOfSection", "NtUnmapViewOfSection",
               "NtCreateSection", "NtFlushVirtualMemory", "NtLockVirtualMemory",
               "NtUnlockVirtualMemory"),
    "process": ("NtOpenProcess", "NtSuspendProcess", "NtResumeProcess"),
}

# Nt calls about the calling thread itself (its context, exceptions, callbacks,
# alerts), or the process's end and children: ferry.dll keeps them on the fiber's
# thread whatever the table says (shim/win/wagg_native.c, wagg_route.c), as it
# keeps every NtUser*/NtGdi* call (a thread's windows and GDI state) and every
# *Thread call given the current thread.
WIN_MUST_NATIVE = frozenset((
    "NtContinue", "NtContinueEx", "NtRaiseException", "NtCallbackReturn", "NtTestAlert",
    "NtWaitForAlertByThreadId", "NtTerminateProcess", "NtCreateUserProcess",
))
NT_NAME = re.compile(r"(Nt|Zw)[A-Z][A-Za-z0-9]*")

ROUTE_KEYS = tuple(GROUPS) + tuple(k for k in WIN_GROUPS if k not in GROUPS) + (DEFAULT,)


def is_nt_name(key):
    return NT_NAME.fullmatch(key) is not None


def must_stay_native(key):
    """Whether route key `key` names a call that may only be routed "native"."""
    return key in MUST_NATIVE or key in WIN_MUST_NATIVE or key.startswith(("NtUser", "NtGdi"))


def members(key):
    """The syscall numbers a route key stands for (a group, "default" excluded); a key
    only Windows programs have (an Nt name, "waits") stands for none."""
    if key in GROUPS:
        return [NUMBERS[n] for n in GROUPS[key]]
    return [NUMBERS[key]] if key in NUMBERS else []


def expand(route, pool_index):
    """{nr: pool index | "n" | "w"} for a profile's route table {key: target};
    `pool_index` maps pool names to their numbers."""
    code = {NATIVE: "n", WORKER: "w", **pool_index}
    out = {}
    ranked = sorted(route.items(), key=lambda kv: (kv[0] != DEFAULT, kv[0] in NUMBERS))
    for key, target in ranked:
        if key == DEFAULT:
            named = {nr for k in route if k != DEFAULT for nr in members(k)}
            nrs = [nr for nr, name in NAMES.items() if nr not in named and name not in MUST_NATIVE]
        else:
            nrs = members(key)
        for nr in nrs:
            out[nr] = code[target]
    return dict(sorted(out.items()))


def win_members(key):
    """The Nt calls a route key stands for in a Windows program ("default" excluded)."""
    if key in WIN_GROUPS:
        return list(WIN_GROUPS[key])
    return [key] if is_nt_name(key) else []


def expand_windows(route, pool_index):
    """{Nt name: pool index | "n" | "w"} of a profile's route table for a Windows program:
    as `expand`, with "default" standing for every call of the Windows groups."""
    code = {NATIVE: "n", WORKER: "w", **pool_index}
    out = {}
    ranked = sorted(route.items(), key=lambda kv: (kv[0] != DEFAULT, is_nt_name(kv[0])))
    for key, target in ranked:
        if key == DEFAULT:
            named = {n for k in route if k != DEFAULT for n in win_members(k)}
            names = [n for g in WIN_GROUPS.values() for n in g
                     if n not in named and not must_stay_native(n)]
        else:
            names = win_members(key)
        for name in names:
            out[name] = code[target]
    return dict(sorted(out.items()))
