"""Writing a rendered report: all at once under a temporary name, then renamed into place,
so a reader (or a failed run) never leaves half a file."""
from pathlib import Path

from ..base import atomic
from ..base.errors import FerryError


def check_target(path):
    """FerryError(path, ...) if `path` plainly cannot be written (checked before rendering)."""
    path = Path(path)
    if path.is_dir():
        raise FerryError(path, "cannot write the report: it is a directory")
    if not path.parent.is_dir():
        raise FerryError(path, "cannot write the report: its directory does not exist")


def write_atomic(path, data):
    """Write `data` (str or bytes) to `path`; FerryError(path, ...) if it cannot be written."""
    check_target(path)
    try:
        atomic.write_bytes(path, data)
    except OSError as e:
        raise FerryError(path, f"cannot write the report: {e.strerror}") from None
