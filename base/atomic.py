"""Writing a file whole or not at all: under a temporary name beside it, then
renamed into place, with the permissions the umask gives a new file."""
import os
import tempfile
from pathlib import Path


def umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_with(path, write, mode=None):
    """Call `write(temporary_path)` and rename its result to `path`; on any
    failure nothing is left behind and `path` keeps what it had."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, (0o666 & ~umask()) if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_bytes(path, data, mode=None):
    """Write `data` (bytes or str) to `path` atomically."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    write_with(path, lambda tmp: Path(tmp).write_bytes(data), mode)
