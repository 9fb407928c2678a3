"""Where libferry.so is: $FERRY_SHIM, else the copy installed with the package
(setup.py builds it into ferry/_shim/), else the shim built in this source tree."""
import os
from pathlib import Path

from ..base.errors import FerryError

_TOP = Path(__file__).resolve().parent.parent
# In an installed package this file is ferry/rewriter/shimlib.py; in the
# source tree it is rewriter/shimlib.py, beside ferry/ and shim/.
PACKAGED_SHIM = _TOP / "_shim" / "libferry.so"
SOURCE_TREE_SHIM = _TOP / "shim" / "build" / "libferry.so"


def path():
    env = os.environ.get("FERRY_SHIM")
    if env:
        p = Path(env)
    else:
        p = PACKAGED_SHIM if PACKAGED_SHIM.is_file() else SOURCE_TREE_SHIM
    if not p.is_file():
        raise FerryError(p, "the shim is not built (run `make shim`, or set FERRY_SHIM)")
    return p
