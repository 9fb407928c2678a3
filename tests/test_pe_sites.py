"""`ferry sites` on PE files: ntdll's stubs with their SSN and Nt* name,
stubs of a program's own and inline `syscall`s, and bad PE input refused in
one line (exit 2)."""
import json
import re
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ferry, ferry_env

ROOT = Path(__file__).resolve().parent.parent
WINE_DLLS = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows")
OBJDUMP = "x86_64-w64-mingw32-objdump"


def _sites(path):
    r = ferry("sites", "--json", path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _objdump_stubs(dll):
    """{entry RVA: (label, SSN)} of the functions binutils' disassembler shows
    starting `mov %rcx,%r10; mov $SSN,%eax` with a `syscall` before the next
    label: an oracle independent of LIEF and Capstone."""
    text = subprocess.run([OBJDUMP, "-d", str(dll)], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    base = int(re.search(r"ImageBase\s+([0-9a-f]+)",
                         subprocess.run([OBJDUMP, "-p", str(dll)], capture_output=True, text=True,
                                        check=True).stdout).group(1), 16)
    out = {}
    for block in re.split(r"\n(?=[0-9a-f]+ <)", text):
        m = re.match(r"([0-9a-f]+) <([^>]+)>:\n", block)
        if not m:
            continue
        insns = re.findall(r"^\s+[0-9a-f]+:\t[^\t]*\t(.*)$", block, re.M)
        if len(insns) < 3 or insns[0].split() != ["mov", "%rcx,%r10"]:
            continue
        ssn = re.match(r"mov\s+\$0x([0-9a-f]+),%eax$", insns[1])
        if ssn and any(i.strip() == "syscall" for i in insns[2:10]):
            out[int(m.group(1), 16) - base] = (m.group(2), int(ssn.group(1), 16))
    return out


@pytest.fixture(scope="module")
def needs_mingw():
    import shutil
    if shutil.which(OBJDUMP) is None or not (WINE_DLLS / "ntdll.dll").is_file():
        pytest.skip("wine and mingw-w64 are not installed (tools/sysdeps.sh installs them)")


@pytest.mark.parametrize("dll", ["ntdll.dll", "win32u.dll"])
def test_every_stub_with_its_ssn_and_exported_name(needs_mingw, dll):
    report = _sites(WINE_DLLS / dll)
    assert report["format"] == "pe" and report["dll"]
    stubs = {int(s["entry"], 16): s for s in report["sites"] if s["kind"] == "stub"}
    expected = _objdump_stubs(WINE_DLLS / dll)
    assert expected and set(stubs) == set(expected)
    for entry, (label, ssn) in expected.items():
        s = stubs[entry]
        assert s["nr"] == ssn, (label, s)
        # binutils labels an address with one of its names (NtX or its alias ZwX)
        assert s["syscall"] == label or s["syscall"] == "Nt" + label[2:], (label, s)
        assert s["status"] == "patched"
        assert s["window"] == [f"{entry:#x}", f"{entry + 8:#x}"]
    names = {s["syscall"] for s in stubs.values()}
    prefix = "NtUser" if dll == "win32u.dll" else "NtWriteFile"
    assert any(n.startswith(prefix) for n in names)


def test_program_with_its_own_stub_and_inline_syscall(needs_mingw, win_programs):
    report = _sites(win_programs["own_stub"])
    assert report["format"] == "pe" and not report["dll"]
    by_kind = {s["kind"]: s for s in report["sites"]}
    assert len(report["sites"]) == 2, report["sites"]
    stub, inline = by_kind["stub"], by_kind["inline"]
    assert stub["nr"] == 0x46 and stub["syscall"] is None      # exported by nobody
    assert stub["window_insns"] == ["mov r10, rcx", "mov eax, 0x46"]
    assert inline["nr"] == 0x2C and inline["status"] == "patched"
    assert "syscall" in inline["window_insns"]
    start, end = (int(v, 16) for v in inline["window"])
    assert start <= int(inline["address"], 16) < end and end - start >= 5


def test_text_table_names_the_nt_functions(needs_mingw):
    r = ferry("sites", WINE_DLLS / "ntdll.dll", env=ferry_env(COLUMNS=200))
    assert r.returncode == 0, r.stderr
    assert "NtWriteFile" in r.stdout and "not patched" in r.stdout.splitlines()[-1]


def _pe_offsets(data):
    lfanew, = struct.unpack_from("<I", data, 0x3C)
    return lfanew, lfanew + 24     # PE signature, optional header


def _thirty_two_bit(data):
    lfanew, opt = _pe_offsets(data)
    struct.pack_into("<H", data, lfanew + 4, 0x14C)
    struct.pack_into("<H", data, opt, 0x10B)


def _dotnet_only(data):
    """A CLR header (in the file's last 72 bytes, reached through .rdata's
    room would be fiddly: instead the header points at the DOS stub) with
    COMIMAGE_FLAGS_ILONLY."""
    _lfanew, opt = _pe_offsets(data)
    first_section_raw = None
    nsec, = struct.unpack_from("<H", data, _lfanew + 6)
    opt_size, = struct.unpack_from("<H", data, _lfanew + 20)
    table = opt + opt_size
    va, raw = struct.unpack_from("<I4xI", data, table + 12)
    first_section_raw = raw
    cor = bytearray(72)
    struct.pack_into("<IHHII", cor, 0, 72, 2, 5, 0, 0)
    struct.pack_into("<I", cor, 16, 1)               # ILONLY
    data[first_section_raw:first_section_raw + 72] = cor
    struct.pack_into("<II", data, opt + 112 + 14 * 8, va, 72)


def _no_pdata(data):
    _lfanew, opt = _pe_offsets(data)
    struct.pack_into("<II", data, opt + 112 + 3 * 8, 0, 0)


def _truncated(data):
    del data[300:]


def _no_signature(data):
    lfanew, _ = _pe_offsets(data)
    data[lfanew:lfanew + 4] = b"PX\0\0"


@pytest.mark.parametrize("damage,problem", [
    (_thirty_two_bit, "32-bit PE"),
    (_dotnet_only, ".NET assembly"),
    (_no_pdata, "no .pdata"),
    (_truncated, "truncated"),
    (_no_signature, "no PE signature"),
])
def test_bad_pe_input_one_line_exit_2(needs_mingw, win_programs, tmp_path, damage, problem):
    data = bytearray(win_programs["write_count"].read_bytes())
    damage(data)
    bad = tmp_path / "bad.exe"
    bad.write_bytes(bytes(data))
    r = ferry("sites", bad)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ferry: {bad}: "), r.stderr
    assert problem in lines[0]
    assert list(tmp_path.iterdir()) == [bad]


mutation = st.tuples(st.integers(0, 1023), st.integers(0, 255))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=4))
def test_mutated_pe_headers_list_or_refuse_cleanly(needs_mingw, win_programs, tmp_path, mutations):
    data = bytearray(win_programs["own_stub"].read_bytes())
    for offset, value in mutations:
        data[offset] = value
    bad = tmp_path / "mutated.exe"
    bad.write_bytes(bytes(data))
    r = ferry("sites", "--json", bad)
    assert "Traceback" not in r.stderr
    if r.returncode == 0:
        json.loads(r.stdout)
    else:
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(f"ferry: {bad}"), r.stderr


def test_instrument_refuses_a_dll_in_one_line(needs_mingw, tmp_path):
    dll = tmp_path / "some.dll"
    dll.write_bytes((ROOT / "shim" / "build" / "ferry.dll").read_bytes())
    out = tmp_path / "out"
    r = ferry("instrument", dll, "-o", out)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "a DLL, not a program" in r.stderr and str(dll) in r.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["some.dll"]
