"""The formats shared by the shim and Python are defined once, in the shim's C
headers: ferry.base._layouts is what the compiler makes of them now, and a
header change that the generated module does not follow fails here."""
import importlib.util
import re
import shutil

import pytest

from conftest import ROOT
from ferry.base import _layouts, layouts
from ferry.rewriter import layout, plan


def _generator():
    spec = importlib.util.spec_from_file_location("gen_layouts", ROOT / "tools" / "gen_layouts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def differences(measured):
    """What the generated module says otherwise than the headers measured now."""
    out = []
    for name, (size, members) in measured["structs"].items():
        have = _layouts.STRUCTS.get(name)
        if have is None:
            out.append(f"struct {name} missing")
            continue
        if have[0] != size:
            out.append(f"sizeof(struct {name}): {have[0]}, header {size}")
        for member, value in members.items():
            if have[1].get(member) != value:
                out.append(f"{name}.{member}: {have[1].get(member)}, header {value}")
        out += [f"{name}.{m}: gone from the header" for m in have[1] if m not in members]
    for name, value in measured["constants"].items():
        if _layouts.CONSTANTS.get(name) != value:
            out.append(f"{name}: {_layouts.CONSTANTS.get(name)!r}, header {value!r}")
    return out


def test_generated_layouts_are_those_of_the_headers():
    assert differences(_generator().measure(ROOT / "shim", "cc")) == []


@pytest.fixture
def shim_copy(tmp_path):
    copy = tmp_path / "shim"
    shutil.copytree(ROOT / "shim" / "src", copy / "src")
    shutil.copytree(ROOT / "shim" / "include", copy / "include")
    return copy


def test_a_moved_member_is_a_difference(shim_copy):
    """Swapping two members of the catch-all area (what a merge of two header
    edits can do) is seen, member by member."""
    header = shim_copy / "src" / "procfile.h"
    text, swaps = re.subn(r"(\n[^\n]*\benabled;[^\n]*)(\n[^\n]*\bnsites;[^\n]*)", r"\2\1", header.read_text())
    assert swaps == 1
    header.write_text(text)
    found = differences(_generator().measure(shim_copy, "cc"))
    area = layouts.layout("ferry_catch_area")
    assert [f.split(":")[0] for f in sorted(found)] == ["ferry_catch_area.enabled", "ferry_catch_area.nsites"]
    assert f"header ({area.offset('enabled')}," in sorted(found)[1]


def test_a_changed_constant_and_a_new_member_are_differences(shim_copy):
    header = shim_copy / "src" / "aggarea.h"
    text = header.read_text()
    text = text.replace("#define FERRY_AGG_VERSION 1", "#define FERRY_AGG_VERSION 2")
    text = text.replace("    uint32_t reserved;\n    struct ferry_agg_carrier_row",
                        "    uint32_t spare;\n    struct ferry_agg_carrier_row")
    header.write_text(text)
    found = differences(_generator().measure(shim_copy, "cc"))
    assert "FERRY_AGG_VERSION: 1, header 2" in found
    assert any(f.startswith("ferry_agg_area.spare:") for f in found)
    assert "ferry_agg_area.reserved: gone from the header" in found


def test_a_member_the_readers_need_is_named_when_missing():
    area = layouts.layout("ferry_catch_area")
    with pytest.raises(layouts.LayoutError, match="struct ferry_catch_area has no member sites_"):
        area.offset("sites_")
    with pytest.raises(layouts.LayoutError, match="no FERRY_NO_SUCH"):
        layouts.constant("FERRY_NO_SUCH")


def test_a_header_the_generator_cannot_read_is_refused(shim_copy):
    header = shim_copy / "src" / "ctl.h"
    header.write_text(header.read_text().replace(
        "    uint64_t reserved[3];               /* offset 40 */",
        "    union { uint64_t reserved[3]; char raw[24]; } u;"))
    gen = _generator()
    with pytest.raises(gen.HeaderError, match="struct ferry_ctl: a nested struct or union"):
        gen.measure(shim_copy, "cc")


def test_unpack_and_pack_agree_with_the_offsets():
    """Layout.unpack reads each member where the compiler put it (a value per member)."""
    hdr = layouts.layout("ferry_proc_header")
    buf = bytearray(hdr.size)
    values = {"pid": -7, "seq": 3, "start_spans": tuple(range(1, 9)), "exe": b"/bin/true"}
    hdr.pack_into(buf, 0, **values)
    assert int.from_bytes(buf[hdr.offset("pid"):hdr.offset("pid") + 4], "little", signed=True) == -7
    got = hdr.unpack(buf)
    assert (got["pid"], got["seq"], got["start_spans"]) == (-7, 3, tuple(range(1, 9)))
    assert got["exe"].rstrip(b"\0") == b"/bin/true"


def test_unpacking_some_members_gives_what_unpacking_all_gives():
    """Layout.unpack_only reads the members asked for where unpack reads
    them, and refuses a member the struct does not have."""
    hdr = layouts.layout("ferry_proc_header")
    buf = bytearray(hdr.size)
    hdr.pack_into(buf, 0, pid=-7, nblocks=3, start_spans=tuple(range(1, 9)), exe=b"/bin/true",
                  internal=tuple(range(hdr.count("internal"))), catchall_on=1)
    whole = hdr.unpack(buf)
    for members in (("pid",), ("exe", "pid", "internal"), ("catchall_on", "start_spans", "nblocks")):
        assert hdr.unpack_only(buf, members) == {m: whole[m] for m in members}
    with pytest.raises(layouts.LayoutError):
        hdr.unpack_only(buf, ("pid", "no_such_member"))


def test_control_block_and_plan_follow_the_headers():
    ctl = layouts.layout("ferry_ctl")
    assert layout.CTL_HEADER_SIZE == ctl.offset("sites") and layout.SITE_RECORD_SIZE == ctl.stride("sites")
    assert len(layout.CTL_MAGIC) == layouts.constant("FERRY_CTL_MAGIC_LEN")
    windows = [(0x1000, b"\xe9" + bytes(7)), (0x2000, b"\xe9" + bytes(4))]
    data = plan.encode(0x10000, b"\xcc" * 20, 0x20000, b"\x01" * 9, [4, 12], windows)
    assert plan.decode(data) == (0x10000, b"\xcc" * 20, 0x20000, b"\x01" * 9, [4, 12], windows)


def test_glue_size_matches_the_trampoline_layout():
    from ferry.rewriter import trampoline
    code = trampoline.glue(0x100000, 0x200000, 0x200040)
    assert len(code) == trampoline.GLUE_SIZE
