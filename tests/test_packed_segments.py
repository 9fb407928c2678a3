"""Files whose segments are packed back to back, with no room for more
program headers (lld, hence every Rust program, and GNU ld with
`-z noseparate-code -z norelro`): they are rewritten without moving any
existing segment, and run as natively."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, calls_of, read_stats, recording_env, ferry

PROGRAMS_SRC = ROOT / "tests" / "programs"
PACKED = ["-Wl,-z,noseparate-code", "-Wl,-z,norelro"]
PT_LOAD, PT_PHDR = 1, 6


def _segments(path):
    """(type, offset, vaddr, filesz, memsz, flags) of each program header."""
    import struct
    data = Path(path).read_bytes()
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    out = []
    for i in range(phnum):
        t, flags, off, vaddr, _pa, filesz, memsz, _al = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * 56)
        out.append((t, off, vaddr, filesz, memsz, flags))
    return out


def _loads(path):
    return [s for s in _segments(path) if s[0] == PT_LOAD]


def _gcc(*args):
    subprocess.run(["gcc", "-O2", *map(str, args)], check=True)


def _no_room_natively(path):
    """The layout this test is about: LIEF finds no gap for the table."""
    import lief
    return not lief.ELF.parse(str(path)).relocate_phdr_table(lief.ELF.Binary.PHDR_RELOC.SEGMENT_GAP)


def _same_run(original, rewritten, args, tmp_path):
    native = subprocess.run([str(original), *args], capture_output=True, text=True)
    env = recording_env(os.environ, tmp_path / "run")
    got = subprocess.run([str(rewritten), *args], capture_output=True, text=True, env=env)
    assert (got.stdout, got.stderr, got.returncode) == (native.stdout, native.stderr, native.returncode)
    return read_stats(tmp_path / "run")


def _kept_in_place(original, rewritten):
    """Every segment of the original is where it was, with its permissions;
    the new ones lie above the whole image."""
    before, after = _loads(original), _loads(rewritten)
    assert [s for s in after if s in before] == before
    end = max(s[2] + s[4] for s in before)
    assert all(s[2] >= end for s in after if s not in before)
    phdr = [s for s in _segments(rewritten) if s[0] == PT_PHDR]
    for s in phdr:  # the table the loader reads is inside a loaded segment
        assert any(l[1] <= s[1] and s[1] + s[3] <= l[1] + l[3] and l[2] - l[1] == s[2] - s[1]
                   for l in after)


@pytest.mark.parametrize("pie", [True, False], ids=["pie", "non-pie"])
def test_program_with_packed_segments_is_rewritten_in_place(tmp_path, pie):
    exe = tmp_path / "packed"
    _gcc(*(["-pie", "-fPIE"] if pie else ["-no-pie"]), *PACKED, "-o", exe,
         PROGRAMS_SRC / "inline_syscalls.c")
    assert _no_room_natively(exe)
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    own = json.loads((out / "manifest.json").read_text())["modules"][0]
    assert own["sites_patched"] == 2
    _kept_in_place(exe, out / "packed")
    stats = _same_run(exe, out / "packed", ["321"], tmp_path)
    assert calls_of(stats, "getppid") == 321


def test_library_with_packed_segments_is_rewritten_in_place(tmp_path):
    """A needed library with no program header segment of its own (as
    librustc_driver): the loader finds its table through the segment that
    maps it."""
    lib = tmp_path / "libsite.so"
    _gcc("-shared", "-fPIC", *PACKED, "-o", lib, PROGRAMS_SRC / "libsite.c")
    assert _no_room_natively(lib)
    exe = tmp_path / "site_caller"
    _gcc("-o", exe, PROGRAMS_SRC / "site_caller.c", f"-L{tmp_path}", "-lsite",
         f"-Wl,-rpath,{tmp_path}")
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    mods = {m["name"]: m for m in json.loads((out / "manifest.json").read_text())["modules"]}
    assert mods["libsite.so"]["sites_patched"] == 1
    _kept_in_place(lib, out / "libsite.so")
    stats = _same_run(exe, out / "site_caller", ["77"], tmp_path)
    assert calls_of(stats, "getppid") == 77


RUST_SOURCE = """
use std::io::Read;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut text = String::new();
    std::fs::File::open(&args[1]).unwrap().read_to_string(&mut text).unwrap();
    let n: usize = args[2].parse().unwrap();
    let mut pids = 0;
    for _ in 0..n { pids += (std::process::id() > 0) as usize; }
    println!("{} lines, {} of {} ids", text.lines().count(), pids, n);
}
"""


def _rustc():
    rustc = shutil.which("rustc")
    if rustc is None:
        pytest.skip("rustc is not installed")
    return rustc


def _rust_program(tmp_path):
    """A Rust release build of RUST_SOURCE: (executable, source)."""
    rustc = _rustc()
    src = tmp_path / "prog.rs"
    src.write_text(RUST_SOURCE)
    exe = tmp_path / "prog"
    subprocess.run([rustc, "-C", "opt-level=3", "-o", str(exe), str(src)], check=True)
    return exe, src


def test_rust_release_program_runs_rewritten(tmp_path):
    exe, src = _rust_program(tmp_path)
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    _kept_in_place(exe, out / "prog")
    stats = _same_run(exe, out / "prog", [str(src), "40"], tmp_path)
    assert calls_of(stats, "openat") >= 1


def test_rust_program_under_ferry_run_is_enabled(tmp_path):
    exe, src = _rust_program(tmp_path)
    native = subprocess.run([str(exe), str(src), "5"], capture_output=True, text=True)
    run = tmp_path / "run"
    got = ferry("run", "-o", run, "--", exe, src, "5")
    assert (got.returncode, got.stdout) == (native.returncode, native.stdout)
    assert "without the shim" not in got.stderr
