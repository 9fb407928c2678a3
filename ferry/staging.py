"""Process records kept in memory while a run goes on.

Every process the shim enables writes its record through a shared mapping of
a file in proc/ (shim/src/procfile.h): at least 4 pages at its start, 6 more
for each command a shell starts, and its events under trace.  On a disk file
system each page written is a fault, a block reservation and a write-back:
~7 us on ext4 against ~4 on tmpfs, 25-55 us of each process's start.  So
`ferry run` makes proc/ a symbolic link to a fresh directory of a tmpfs
(`$XDG_RUNTIME_DIR` or `/dev/shm`, under `ferry-<uid>/`) and, once no process
of the run is left, moves the records into the run directory: the link is
swapped for a real directory in one step, and every reader (report, live, the
GUI) reads the run through either.

A process still claiming a slot while the records move waits on the slot
file's lock, which the move holds; it then finds the file unlinked and opens
the name again (shim/src/slots.c), which leads to the moved file.  Processes
that outlive `ferry run` (a daemon, `cmd &`) keep writing where they are: a
small process left behind (`python -m ferry.staging FD STAGING`, handed the
run directory open) moves the records
once the last of them ended, following the run directory if it is renamed
(DIR.old) and removing the records if the run directory is removed.  A run
whose `ferry run` was killed is moved by whoever reads it first with no
process left (`load_run`, the next run into the same directory).  Records
left in memory are lost if the machine restarts before they moved; those
no run leads to any more are removed by the next run that stages, a day
after their last write (`_sweep`).
"""
import fcntl
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import procfile
from .base.atomic import umask
from .base.sparse import data_extents

# Staging needs room: a tmpfs that fills up makes a program's next write to
# its record a SIGBUS, as a full disk does.
MIN_FREE = 1 << 30
BACKLINK = ".ferry-run"     # in the staging directory: the run it belongs to
# Records no run directory leads to any more (a run whose `ferry run` was
# killed, then removed by hand: nobody is left to move or remove them) stay
# in memory, a leak until the machine restarts.  They are removed by the
# next run that stages, once this long without a write: a run moved
# elsewhere by hand, its link to them with it, is still read whole within it.
STRANDED_AFTER = 24 * 3600


def _is_tmpfs(path):
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    path = os.path.realpath(path)
    best, kind = "", None
    for m in mounts:
        if len(m) >= 3:
            mnt = m[1].replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, m[2]
    return kind == "tmpfs"


def _roots():
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return [r for r in (runtime, "/dev/shm") if r]


def _base(root):
    """root/ferry-<uid>, ours alone to write; None when it cannot be."""
    base = Path(root) / f"ferry-{os.geteuid()}"
    try:
        os.mkdir(base, 0o711)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        s = os.lstat(base)
    except OSError:
        return None
    # someone else's name in a shared directory: not ours to use
    if not stat.S_ISDIR(s.st_mode) or s.st_uid != os.geteuid() or s.st_mode & 0o022:
        return None
    # processes of a root run that switch user reach their records through it
    if s.st_mode & 0o777 != 0o711:
        os.chmod(base, 0o711)
    return base


def stage(out_dir):
    """Make out_dir/proc a link to a new directory in memory; returns it, or
    None (and makes nothing) when no tmpfs with room is at hand or out_dir is
    already on one."""
    out_dir = Path(out_dir)
    if _is_tmpfs(out_dir):
        return None
    for root in _roots():
        try:
            if not _is_tmpfs(root):
                continue
            v = os.statvfs(root)
            if v.f_bavail * v.f_frsize < MIN_FREE:
                continue
        except OSError:
            continue
        base = _base(root)
        if base is None:
            continue
        _sweep(base)
        try:
            d = Path(tempfile.mkdtemp(prefix=out_dir.name[:40] + "-", dir=base))
        except OSError:
            continue
        try:
            # whole or not at all: another run's sweep may read it meanwhile
            part = d / (BACKLINK + ".part")
            part.write_text(str(out_dir) + "\n")
            os.replace(part, d / BACKLINK)
            os.chmod(d, 0o777 & ~umask())
            os.symlink(d, out_dir / "proc")
        except OSError:
            shutil.rmtree(d, ignore_errors=True)    # no run leads to it: never swept
            continue
        return d
    return None


def staged_dir(run_dir):
    """Where run_dir's records are while they are in memory, or None."""
    link = Path(run_dir) / "proc"
    if not link.is_symlink():
        return None
    target = Path(os.readlink(link))
    return target if (target / BACKLINK).is_file() else None


def _leads_to(run_dir, directory):
    """Whether the run, by the names ferry gives it (DIR, DIR.old, DIR.old
    parked while a run replaces it), still leads to its records in
    `directory`."""
    names = [run_dir, run_dir.with_name(run_dir.name + ".old")]
    try:
        names += run_dir.parent.glob(f".{run_dir.name}.old.replaced-*")
    except OSError:
        pass
    for name in names:
        try:
            target = staged_dir(name)
            if target is not None and os.path.samefile(target, directory):
                return True
        except OSError:
            continue
    return False


def _sweep(base, now=None):
    """Remove the staging directories in `base` that no run leads to, where
    nothing was written for STRANDED_AFTER and no process records."""
    now = time.time() if now is None else now
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            d = Path(entry.path)
            named = (d / BACKLINK).read_text().strip()
            if not named.startswith("/"):
                continue    # not written whole (by a ferry of before): not judged
            run_dir = Path(named)
            if _leads_to(run_dir, d):
                continue
            last = max([entry.stat(follow_symlinks=False).st_mtime] +
                       [e.stat(follow_symlinks=False).st_mtime for e in os.scandir(d)])
            if now - last < STRANDED_AFTER or _recording(run_dir, d):
                continue
        except OSError:
            continue    # being made or removed meanwhile, or not a staging directory
        shutil.rmtree(d, ignore_errors=True)


def _recording(run_dir, directory):
    """Whether a process of the run still records: it maps a file of
    `directory` (every process the shim enabled maps its record until it
    ends), or it is a program of the run that has not mapped its record
    yet.  From its exec to its shim's mapping of the record (ld.so loading
    the libraries, the shim's first steps: a millisecond on a loaded
    machine), a process maps nothing of the run; its environment then
    still holds the run's setting (FERRY_RUN_DIR, which the shim takes out
    only once the record is mapped).  Looking at the maps alone, a run
    whose program ended while a child it started in the background was
    in that window had its records moved away under the child.  Before
    that, in the kernel's exec itself (from the old image's memory given
    up to the new stack's strings set up), a process shows neither: the
    new image's maps hold only its program and ld.so, its environment
    reads empty.  Its record, written before the exec, then says it exec'd
    a program that records itself, and no record of that image began: a
    process of the run, alive, with such a record is one too (a CI under
    load ended a run in that window, and moved the records away under
    the `sleep` the program had started in the background)."""
    needle = str(directory).encode() + b"/"
    setting = b"\0FERRY_RUN_DIR=" + str(Path(run_dir).absolute()).encode() + b"\0"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                if needle in f.read():
                    return True
            with open(f"/proc/{pid}/environ", "rb") as f:
                if setting in b"\0" + f.read():
                    return True
        except OSError:
            continue    # gone, or another user's (not a process of ours)
    return any(_alive(pid) for pid in procfile.pids_between_images(directory))


def _alive(pid):
    """Whether process `pid` exists and has not ended (a zombie has)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat_line[stat_line.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def _copy_sparse(src_fd, dst_fd, size):
    """The data of src into dst at the same offsets; holes stay holes (a
    slot file is gigabytes of holes around a few pages of data each)."""
    os.ftruncate(dst_fd, size)
    for start, stop in data_extents(src_fd, 0, size):
        while start < stop:
            chunk = os.pread(src_fd, min(stop - start, 1 << 20), start)
            if not chunk:
                return
            os.pwrite(dst_fd, chunk, start)
            start += len(chunk)


def _exchange(a, b):
    """Swap two names in one step (renameat2 RENAME_EXCHANGE)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(a))


def finish(run_dir):
    """Move run_dir's records out of memory into run_dir/proc, unless a
    process of the run is still alive.  Returns "moved", "live" or None (not
    staged, or the staging directory is gone)."""
    run_dir = Path(run_dir)
    src = staged_dir(run_dir)
    if src is None:
        return None
    # two readers finishing at once: the second finds the move done
    try:
        guard = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if staged_dir(run_dir) != src:
            return None
        if _recording(run_dir, src):
            return "live"
        _move(run_dir, src)
    finally:
        os.close(guard)
    shutil.rmtree(src, ignore_errors=True)
    return "moved"


def _move(run_dir, src):
    dst = Path(tempfile.mkdtemp(prefix=".proc-", dir=run_dir))
    held = []
    try:
        os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode))
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            if entry.name == BACKLINK or not entry.is_file(follow_symlinks=False):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            held.append((fd, entry.path))
            # a slot being claimed finishes first; one claimed after waits
            # and then finds the file gone (shim/src/slots.c)
            fcntl.flock(fd, fcntl.LOCK_EX)
            s = os.fstat(fd)
            out = os.open(dst / entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                          stat.S_IMODE(s.st_mode))
            try:
                _copy_sparse(fd, out, s.st_size)
                os.fchmod(out, stat.S_IMODE(s.st_mode))
                if os.geteuid() == 0:
                    os.fchown(out, s.st_uid, s.st_gid)
            finally:
                os.close(out)
            os.utime(dst / entry.name, ns=(s.st_atime_ns, s.st_mtime_ns))
        _exchange(dst, run_dir / "proc")
        os.unlink(dst)      # the link, now under the temporary name
        for _, path in held:
            os.unlink(path)
    except BaseException:
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst, ignore_errors=True)
        raise
    finally:
        for fd, _ in held:
            os.close(fd)


def discard(run_dir):
    """Remove run_dir and, if its records are still in memory, them too."""
    src = staged_dir(run_dir)
    shutil.rmtree(run_dir)
    if src is not None:
        shutil.rmtree(src, ignore_errors=True)


def finish_later(run_dir):
    """Leave behind a process that moves run_dir's records once no process
    of the run is left (they outlived `ferry run`).  It is handed the run
    directory open, so that one removed before it even started is noticed."""
    src = staged_dir(run_dir)
    if src is None:
        return
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        subprocess.Popen([sys.executable, "-m", "ferry.staging", str(fd), str(src)], pass_fds=(fd,),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(fd)


def _wait_and_finish(fd, src, poll=0.2, longest=5.0):
    """Poll until the records in `src` moved into the run directory open as
    `fd` (a rename, DIR.old, is followed; a removal frees them)."""
    try:
        while True:
            if os.fstat(fd).st_nlink == 0:
                # the run directory is gone, and with it the only way to them
                shutil.rmtree(src, ignore_errors=True)
                return
            where = Path(os.readlink(f"/proc/self/fd/{fd}"))
            try:
                state = finish(where) if staged_dir(where) == src else None
            except OSError:
                state = None
            if state != "live":
                # removed while it looked (finish() scans every process):
                # its records go with it, as above
                if state is None and os.fstat(fd).st_nlink == 0:
                    shutil.rmtree(src, ignore_errors=True)
                return
            time.sleep(poll)
            poll = min(poll * 1.5, longest)
    finally:
        os.close(fd)


if __name__ == "__main__":
    _wait_and_finish(int(sys.argv[1]), Path(sys.argv[2]))
