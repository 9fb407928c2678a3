"""The data of a sparse file: process records are mostly holes, and reading
(or copying) a hole has the kernel fill page cache with zeros for it."""
import errno
import os


def data_extents(fd, start, end):
    """(first, stop) of each run of data of the open file `fd` within
    [start, end); holes are left out.  A file system that cannot tell gives
    the whole range as data."""
    pos = start
    while pos < end:
        try:
            first = os.lseek(fd, pos, os.SEEK_DATA)
            stop = min(os.lseek(fd, first, os.SEEK_HOLE), end)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return                  # holes only, from pos to the end
            first, stop = pos, end
        if first >= end:
            return
        yield first, stop
        pos = stop
