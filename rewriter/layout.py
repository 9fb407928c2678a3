"""The binary contract with the shim: the control block a rewritten module
carries (struct ferry_ctl of shim/src/ctl.h) and the trampoline's fixed
distance (shim/src/layout.h), as the headers define them (ferry.base.layouts)."""
from ..base import layouts
from ..base.layouts import constant, layout

CTL = layout("ferry_ctl")
SITE_RECORD = layout("ferry_site_rec")
CTL_MAGIC = constant("FERRY_CTL_MAGIC")
CTL_VERSION = constant("FERRY_CTL_VERSION")
CTL_VECTOR_OFFSET = CTL.offset("vector")
CTL_NSITES_OFFSET = CTL.offset("nsites")
CTL_VERSION_OFFSET = CTL.offset("version")
CTL_HEADER_SIZE = CTL.offset("sites")
SITE_RECORD_SIZE = CTL.stride("sites")
MAX_SITES = constant("FERRY_MAX_SITES")  # the process's site table (shim/src/procfile.h)

# From the return address of the trampoline's call (label A) to label B.
TRAMP_RAW_DELTA = constant("FERRY_TRAMP_RAW_DELTA")


def _rewriter_digest():
    """A digest of the rewriter's own source and of the base package: any
    change to how images are made changes the cache key, so the image cache
    never serves an image made by other code than the code running now."""
    import hashlib
    from pathlib import Path
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    base = Path(layouts.__file__).resolve().parent     # the syscall table, the shared layouts
    for p in sorted(here.glob("*.py")) + sorted(base.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


FORMAT = f"v{CTL_VERSION}-{_rewriter_digest()}"
