"""The rewriter and the shim agree on the binary contract between them."""
import re

from conftest import ROOT
from ferry.rewriter import layout


def _defines(*headers):
    values = {}
    for h in headers:
        for name, value in re.findall(r"^#define (FERRY_\w+) (\d+)\s*$", (ROOT / h).read_text(), re.M):
            values[name] = int(value)
    return values


def test_layout_constants_match_the_shim_headers():
    d = _defines("shim/src/layout.h", "shim/src/ctl.h")
    assert d["FERRY_TRAMP_RAW_DELTA"] == layout.TRAMP_RAW_DELTA
    assert d["FERRY_CTL_MAGIC_LEN"] == len(layout.CTL_MAGIC)
    assert d["FERRY_CTL_VERSION"] == layout.CTL_VERSION


def test_control_block_magic_matches_the_shim():
    text = (ROOT / "shim/src/ctl.h").read_text()
    literal = re.search(r'#define FERRY_CTL_MAGIC "(.*)"', text).group(1)
    assert literal.encode().decode("unicode_escape").encode("latin-1") == layout.CTL_MAGIC


def test_glue_size_matches_the_trampoline_layout():
    from ferry.rewriter import trampoline
    code = trampoline.glue(0x100000, 0x200000, 0x200040)
    assert len(code) == trampoline.GLUE_SIZE
