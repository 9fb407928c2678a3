"""The binary contract with the shim; every number mirrors shim/src/ctl.h and
shim/src/layout.h (tests/test_layout_matches_shim.py checks that they agree)."""

CTL_MAGIC = b"FERRY\0CTL\0v1\0\0\0\0"
CTL_VERSION = 1
CTL_VECTOR_OFFSET = 16
CTL_NSITES_OFFSET = 24
CTL_VERSION_OFFSET = 28
CTL_HEADER_SIZE = 64
SITE_RECORD_SIZE = 16

# From the return address of the trampoline's call (label A) to label B.
TRAMP_RAW_DELTA = 10



def _rewriter_digest():
    """A digest of the rewriter's own source: any change to how images are made
    changes the cache key, so the image cache never serves an image made by
    other code than the code running now."""
    import hashlib
    from pathlib import Path
    h = hashlib.sha256()
    for p in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


FORMAT = f"v{CTL_VERSION}-{_rewriter_digest()}"
