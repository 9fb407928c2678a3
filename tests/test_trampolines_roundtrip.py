"""Every patched site of the rewritten libc jumps to its trampoline, the
trampoline replays the displaced instructions around a call into the shim and
a `syscall`, and jumps back to the instruction after the window."""
import struct

import capstone
import lief
import pytest

from conftest import LIBC
from ferry.rewriter import layout

md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
md.detail = True
GLUE_MNEMONICS = ["mov", "jrcxz", "lea", "lea", "call", "lea", "jmp",          # entry, label A
                  "lea", "syscall", "mov", "jrcxz", "lea", "call", "lea", "jmp",  # label B, post hook
                  "syscall"]                                                  # no shim yet
GLUE_INSNS = len(GLUE_MNEMONICS)


def _reader(binary):
    segs = [(s.virtual_address, bytes(s.content)) for s in binary.segments
            if s.type == lief.ELF.Segment.TYPE.LOAD]

    def read(addr, size):
        for base, data in segs:
            if base <= addr < base + len(data):
                return data[addr - base:addr - base + size]
        raise AssertionError(f"{addr:#x} is not in any loaded segment")
    return read


def _decode(read, addr, count):
    """The first `count` instructions at `addr`."""
    out = list(md.disasm(read(addr, 256), addr, count))
    assert len(out) == count, f"undecodable trampoline at {addr:#x}"
    return out


def _effective(insn):
    """An instruction's meaning independent of where it is: its text with any
    rip-relative operand replaced by the absolute address it reaches."""
    if "rip" in insn.op_str:
        target = insn.address + insn.size + insn.disp
        return insn.mnemonic, insn.op_str.split("[")[0] + f"[{target:#x}]"
    return insn.mnemonic, insn.op_str


@pytest.fixture(scope="module")
def rewritten_libc(instrument, tmp_path_factory):
    from conftest import ferry
    import json
    out = tmp_path_factory.mktemp("libc")
    ferry("instrument", LIBC, "-o", out, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    module = manifest["modules"][0]
    assert module["name"] == "libc.so.6"
    return lief.ELF.parse(str(out / "libc.so.6")), module


def test_every_patched_site_jumps_to_its_trampoline_and_back(rewritten_libc):
    binary, module = rewritten_libc
    original = lief.ELF.parse(LIBC)
    read_new, read_old = _reader(binary), _reader(original)
    ctl = next(s for s in binary.segments if s.type == lief.ELF.Segment.TYPE.LOAD
               and bytes(s.content)[:len(layout.CTL_MAGIC)] == layout.CTL_MAGIC)
    vector = ctl.virtual_address + layout.CTL_VECTOR_OFFSET
    patched = [s for s in module["sites"] if s["status"] == "patched"]
    assert len(patched) > 500
    records = set()
    for site in patched:
        start, end = (int(v, 16) for v in site["window"])
        tramp = int(site["trampoline"], 16)
        window = read_new(start, end - start)
        jmp = next(md.disasm(window, start))
        assert (jmp.mnemonic, int(jmp.op_str, 16)) == ("jmp", tramp), site["id"]
        assert window[jmp.size:] == b"\xcc" * (end - start - jmp.size), site["id"]

        original_insns = list(md.disasm(read_old(start, end - start), start))
        assert sum(i.size for i in original_insns) == end - start
        k = next(n for n, i in enumerate(original_insns) if i.mnemonic == "syscall")
        before, after = original_insns[:k], original_insns[k + 1:]

        body = _decode(read_new, tramp, len(before) + GLUE_INSNS + len(after) + 1)
        got = [_effective(i) for i in body]
        want_before = [_effective(i) for i in before]
        assert got[:len(before)] == want_before, site["id"]
        glue = body[len(before):len(before) + GLUE_INSNS]
        names = [i.mnemonic for i in glue]
        assert names == GLUE_MNEMONICS, site["id"]
        assert glue[0].address + glue[0].size + glue[0].disp == vector
        assert glue[9].address + glue[9].size + glue[9].disp == vector  # reloaded for the post hook
        assert glue[12].op_str == "qword ptr [rcx + 8]"  # ferry_vector.post
        records.add(glue[3].address + glue[3].size + glue[3].disp)
        # The entry returns to label B (A + delta) for calls it cannot run itself.
        label_a = glue[4].address + glue[4].size
        assert glue[7].address == label_a + layout.TRAMP_RAW_DELTA
        assert int(glue[1].op_str, 16) == glue[15].address  # jrcxz -> the bare syscall
        post = glue[15].address + 2
        # detached while the call ran: no post hook (jrcxz -> post)
        assert int(glue[10].op_str, 16) == int(glue[6].op_str, 16) == int(glue[14].op_str, 16) == post
        rest = body[len(before) + GLUE_INSNS:]
        assert [_effective(i) for i in rest[:-1]] == [_effective(i) for i in after], site["id"]
        assert int(rest[-1].op_str, 16) == end, site["id"]
    # One distinct record per site, inside the control segment.
    assert len(records) == len(patched)
    lo = ctl.virtual_address + layout.CTL_HEADER_SIZE
    assert all(lo <= r < lo + len(patched) * layout.SITE_RECORD_SIZE for r in records)
    nsites, version = struct.unpack_from("<II", bytes(ctl.content), layout.CTL_NSITES_OFFSET)
    assert (nsites, version) == (len(patched), layout.CTL_VERSION)


def test_nothing_outside_the_windows_changes(rewritten_libc):
    binary, module = rewritten_libc
    original = lief.ELF.parse(LIBC)
    text_new = binary.get_section(".text")
    text_old = original.get_section(".text")
    assert text_new.virtual_address == text_old.virtual_address
    new, old = bytearray(text_new.content), bytearray(text_old.content)
    base = text_old.virtual_address
    for site in module["sites"]:
        if site["status"] == "patched":
            start, end = (int(v, 16) - base for v in site["window"])
            new[start:end] = old[start:end]
    assert new == old
