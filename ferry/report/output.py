"""Writing a rendered report: all at once under a temporary name, then renamed into place,
so a reader (or a failed run) never leaves half a file."""
import os
import tempfile
from pathlib import Path

from ..rewriter.errors import FerryError


def check_target(path):
    """FerryError(path, ...) if `path` plainly cannot be written (checked before rendering)."""
    path = Path(path)
    if path.is_dir():
        raise FerryError(path, "cannot write the report: it is a directory")
    if not path.parent.is_dir():
        raise FerryError(path, "cannot write the report: its directory does not exist")


def write_atomic(path, data):
    """Write `data` (str or bytes) to `path`; FerryError(path, ...) if it cannot be written."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    check_target(path)
    parent = path.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise FerryError(path, f"cannot write the report: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise FerryError(path, f"cannot write the report: {e.strerror}") from None
    except BaseException:
        _remove(tmp)
        raise


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(tmp):
    try:
        os.unlink(tmp)
    except OSError:
        pass
