"""Ferry's images kept in the page cache in large folios.

Every enabled process maps the shim and the rewritten libraries (libc above
all) and unmaps them at its exit.  The kernel's work for that (fault-around
mapping the file's cached pages, the exit unmapping them, the reverse-map
counts) goes by folio, not by page.  A file written in large pieces is
cached in large folios; one the kernel read back once it had left the cache
(a reboot, memory pressure), by ld.so's reads and faults, in 4 KiB pages.
What a `posix_spawn` of an enabled /bin/true costs above native depends on
it by tens of microseconds (docs/start.md).  The system's own libraries
(ld.so, the programs) are cached as they were read, for every process,
enabled or not.

`settle(path)`: a file just written is written back, dropped from the cache
and read back through a mapping marked MADV_HUGEPAGE, whose faults the
kernel serves with large folios (readahead of the huge page's order) where
the file system allows (`read_back(path, huge=False)` reads it back in 4
KiB pages instead, as after a reboot: bench/spawn compares the two).
`warm(paths, marker_dir)`: the same, once per boot,
for those of `paths` in use (the shim and the rewritten libraries, which
program directories link; the patched text a preloaded shim made from a
plan, once a process mapped it): after a reboot they are read back in 4 KiB
pages by the first process that maps them.  Which files were done this boot is kept
in `<marker_dir>/folios-<boot id>`, "dev:inode" a line.  The page cache does
not say how large its folios are to an unprivileged process; a file evicted
and read back again within a boot (memory pressure) stays in 4 KiB pages
until the next.  Where the kernel cannot (transparent huge pages off, no
MADV_POPULATE_READ before Linux 5.14), only the files' pages are read.
"""
import ctypes
import functools
import mmap
import os
from pathlib import Path

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


def _read_back(fd, size, huge=True):
    """Drop what the cache holds of the open file (what no process maps),
    then read it all back through a mapping marked for huge pages (`huge`),
    or not: as the faults of a process read a file that left the cache."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
        try:
            if huge:
                m.madvise(mmap.MADV_HUGEPAGE)
            m.madvise(MADV_POPULATE_READ)
        except OSError:
            pass    # no transparent huge pages, or an older kernel: the faults read it


def _marker(marker_dir):
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return Path(marker_dir) / f"folios-{boot}"


def _remember(marker, keys):
    """Add `keys` to this boot's marker (O_APPEND: lines of writers at once
    do not mix); the markers of earlier boots go."""
    if marker is None or not keys:
        return
    try:
        fresh = not marker.exists()
        with open(marker, "a") as f:
            f.write("".join(f"{k}\n" for k in keys))
        if fresh:
            for old in marker.parent.glob("folios-*"):
                if old != marker:
                    old.unlink(missing_ok=True)
    except OSError:
        pass


def read_back(path, huge=True):
    """The file at `path` written back, dropped from the page cache and read
    back: in large folios (`huge`), else in 4 KiB pages, as a process's
    faults read it after a reboot (bench/spawn measures both).  Its status,
    or None when it is empty or could not be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not st.st_size:
            return None
        os.fdatasync(fd)    # dirty pages are not dropped
        _read_back(fd, st.st_size, huge)
        return st
    except OSError:
        return None
    finally:
        os.close(fd)


def settle(path, marker_dir=None):
    """Put the file at `path`, just written, in the page cache in large folios
    (and say so in `marker_dir`'s marker, when it has one: an image written
    elsewhere, `ferry instrument -o DIR`, is a line that no scan asks for)."""
    st = read_back(path)
    if st is not None and marker_dir is not None:
        _remember(_marker(marker_dir), [f"{st.st_dev}:{st.st_ino}"])


def _cached_any(fd, size):
    """Whether any page of the open file is in the page cache: mincore of a
    mapping never touched, which reads nothing in (a read with RWF_NOWAIT
    starts the readahead it does not wait for)."""
    libc, pages = _libc(), -(-size // mmap.PAGESIZE)
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        return False
    try:
        vec = ctypes.create_string_buffer(pages)
        return libc.mincore(addr, size, vec) == 0 and any(b & 1 for b in vec.raw)
    finally:
        libc.munmap(addr, size)


@functools.lru_cache(maxsize=1)
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def warm(paths, marker_dir, in_use="linked"):
    """Read back in large folios, once per boot, those of `paths` in use;
    returns them.  `in_use`: "linked", a file a program directory links
    (more than one name: the shim, the rewritten libraries), which the next
    process maps whether it is cached or not; "cached", one the page cache
    holds at least in part (the patched text a preloaded shim made from a
    plan, which a process mapped this boot)."""
    marker = _marker(marker_dir)
    if marker is None or not os.access(marker_dir, os.W_OK):
        return []   # with nothing to say what was done, it would be done at every run
    try:
        done = set(marker.read_text().split())
    except OSError:
        done = set()
    warmed, keys = [], []
    for path in paths:
        try:
            st = os.stat(path, follow_symlinks=False)
            key = f"{st.st_dev}:{st.st_ino}"
            if not st.st_size or key in done or (st.st_mode & 0o170000) != 0o100000 or \
                    (in_use == "linked" and st.st_nlink < 2):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            now = os.fstat(fd)
            same = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
            if same and (in_use == "linked" or _cached_any(fd, st.st_size)):
                _read_back(fd, st.st_size)
                warmed.append(path)
                keys.append(key)
                done.add(key)
        except OSError:
            continue
        finally:
            os.close(fd)
    _remember(marker, keys)
    return warmed
