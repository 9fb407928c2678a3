"""Where libferry.so is: $FERRY_SHIM, else the shim built in this source tree."""
import os
from pathlib import Path

from .errors import FerryError

SOURCE_TREE_SHIM = Path(__file__).resolve().parent.parent / "shim" / "build" / "libferry.so"


def path():
    p = Path(os.environ.get("FERRY_SHIM") or SOURCE_TREE_SHIM)
    if not p.is_file():
        raise FerryError(p, "the shim is not built (run `make shim`, or set FERRY_SHIM)")
    return p
