"""Static programs Ferry can do nothing with: one whose segments leave no room
for the shim's, one whose PT_INTERP points nowhere, a Go program packed with
UPX.  `ferry instrument` and `ferry run` say so in one line naming the file,
exit 2, and leave nothing behind (no output or run directory, no temporary
file, nothing in the image cache).  These checks come before the refusal of
static programs as such, so they stay right once static programs are
rewritten."""
import shutil
import struct
import subprocess

import pytest

from conftest import ferry

PT_LOAD, PT_INTERP, PT_GNU_STACK = 1, 3, 0x6474E551


def _ferry(*args, cwd):
    return ferry(*args, timeout=120, cwd=cwd)


def _phdrs(data):
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    return [(phoff + i * 56, struct.unpack_from("<IIQQQQQQ", data, phoff + i * 56)) for i in range(phnum)]


def no_room(data):
    """The last loadable segment's memory (its .bss) grown up to just below
    the top of user space: nothing fits above it."""
    at, ph = max(((at, ph) for at, ph in _phdrs(data) if ph[0] == PT_LOAD), key=lambda a: a[1][3] + a[1][6])
    out = bytearray(data)
    struct.pack_into("<Q", out, at + 40, 0x7FFF_FFFF_0000 - ph[3])     # p_memsz
    return bytes(out)


def _with_interp(data, offset, size, tail=b""):
    """The PT_GNU_STACK entry (every static program has one) turned into a
    PT_INTERP of `size` bytes at file offset `offset`; `tail` appended."""
    at = next(at for at, ph in _phdrs(data) if ph[0] == PT_GNU_STACK)
    out = bytearray(data)
    struct.pack_into("<IIQQQQQQ", out, at, PT_INTERP, 4, offset, 0, 0, size, size, 1)
    return bytes(out) + tail


def interp_past_the_end(data):
    return _with_interp(data, len(data) + 4096, 28)


def interp_missing(data):
    name = b"/nonexistent/ld-ferry-test.so.1\0"
    return _with_interp(data, len(data), len(name), name)


MAKERS = {
    "no-room": (no_room, "leaves no room above them for the shim's segments"),
    "interp-past-the-end": (interp_past_the_end, "(PT_INTERP) lies past the end of the file"),
    "interp-missing": (interp_missing, "its program interpreter /nonexistent/ld-ferry-test.so.1 "
                                       "does not exist"),
}


def _cache_files(cache):
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))


def _assert_refused(tmp_path, path, words, places):
    work = tmp_path / "work"
    work.mkdir()
    before = _cache_files(places["FERRY_CACHE"])
    r = _ferry("instrument", path, "-o", work / "out", cwd=work)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.splitlines() == [f"ferry: {path}: {r.stderr.split(': ', 2)[2].strip()}"]
    assert words in r.stderr and "statically linked" not in r.stderr
    r = _ferry("run", "-o", work / "run", "--", path, cwd=work)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr.splitlines() == [f"ferry: {path}: {r.stderr.split(': ', 2)[2].strip()}"]
    assert words in r.stderr
    assert list(work.iterdir()) == []           # no output, no run directory, no temporary file
    assert _cache_files(places["FERRY_CACHE"]) == before


@pytest.mark.parametrize("case", sorted(MAKERS))
@pytest.mark.parametrize("program", ["static_c-glibc", "static_c-glibc-pie", "static_c-musl"])
def test_bad_static_file_is_refused_in_one_line(static_program, tmp_path, ferry_places, case,
                                                program):
    make, words = MAKERS[case]
    path = tmp_path / f"{program}-{case}"
    path.write_bytes(make(static_program(program).read_bytes()))
    path.chmod(0o755)
    _assert_refused(tmp_path, path, words, ferry_places)


def _upx():
    return shutil.which("upx") or shutil.which("upx-ucl")


def test_go_program_packed_with_upx_is_refused(static_program, tmp_path, ferry_places):
    upx = _upx()
    if not upx:
        pytest.skip("no UPX (apt-get install upx-ucl; Debian 12 does not have it)")
    path = tmp_path / "go_runtime.upx"
    subprocess.run([upx, "-q", "-o", str(path), str(static_program("go_runtime"))], check=True,
                   capture_output=True, timeout=300)
    natively = subprocess.run([str(path), "child", "x"], capture_output=True, text=True, timeout=60)
    assert natively.stdout == 'child ["x"]'    # still the program, packed
    _assert_refused(tmp_path, path, "packed with UPX", ferry_places)


def upx_header(data):
    """What `upx` leaves at the front of a packed ELF program, where Ferry
    looks for it: no section headers, and l_info (a checksum, "UPX!", the
    loader's size, UPX's version and format numbers) right after the
    program headers.  For machines without UPX (Debian 12 has none)."""
    out = bytearray(data)
    struct.pack_into("<Q", out, 40, 0)      # e_shoff
    struct.pack_into("<HHH", out, 58, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    struct.pack_into("<I4sHBB", out, phoff + phnum * 56, 0x12345678, b"UPX!", 0x1000, 13, 22)
    return bytes(out)


def test_upx_header_is_recognized_without_upx(static_program, tmp_path, ferry_places):
    path = tmp_path / "go_runtime.upx-header"
    path.write_bytes(upx_header(static_program("go_runtime").read_bytes()))
    path.chmod(0o755)
    _assert_refused(tmp_path, path, "packed with UPX", ferry_places)
