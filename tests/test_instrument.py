"""`ferry instrument`: executables PIE and non-PIE, with and without symbols,
shared objects, the image cache, idempotence, and the original context."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import LIBC, ROOT, read_stats, recording_env, calls_of, ferry

SOURCE = ROOT / "tests" / "programs" / "inline_syscalls.c"


def _build(tmp_path, name, *flags, strip=False):
    exe = tmp_path / name
    subprocess.run(["gcc", "-O2", *flags, "-o", str(exe), str(SOURCE)], check=True)
    if strip:
        subprocess.run(["strip", "-s", str(exe)], check=True)
    return exe


@pytest.mark.parametrize("flags,strip", [(("-pie", "-fPIE"), False), (("-no-pie",), False),
                                         (("-pie", "-fPIE"), True), (("-no-pie",), True)],
                         ids=["pie", "non-pie", "pie-stripped", "non-pie-stripped"])
def test_program_with_its_own_sites_is_patched_and_counted(tmp_path, flags, strip):
    exe = _build(tmp_path, "inline", *flags, strip=strip)
    out = tmp_path / "out"
    ferry("instrument", exe, "-o", out, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    own = manifest["modules"][0]
    assert own["role"] == "executable" and own["pie"] == ("-pie" in flags)
    assert own["sites_total"] == own["sites_patched"] == 2
    if strip:  # no symbols: the function comes from .eh_frame
        assert all(s["function"].startswith("fde@") for s in own["sites"])
    original = subprocess.run([str(exe), "321"], capture_output=True, text=True)
    env = recording_env(os.environ, tmp_path / "run")
    rewritten = subprocess.run([str(out / "inline"), "321"], capture_output=True, text=True, env=env)
    assert (rewritten.stdout, rewritten.stderr, rewritten.returncode) == \
        (original.stdout, original.stderr, original.returncode)
    assert "kept" in rewritten.stdout
    stats = read_stats(tmp_path / "run")
    assert calls_of(stats, "getppid") == 321
    assert calls_of(stats, "getpid") == 2


def test_rewritten_program_needs_no_preload_or_library_path(tmp_path):
    out = tmp_path / "out"
    ferry("instrument", "/usr/bin/true", "-o", out, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    env = recording_env(env, tmp_path / "run")
    assert subprocess.run([str(out / "true")], env=env).returncode == 0
    stats = read_stats(tmp_path / "run")
    assert len(stats) == 1 and list(stats.values())[0]["modules"] >= 1
    assert calls_of(stats, "exit_group") == 1
    # It keeps working when the directory is moved: everything is found from $ORIGIN.
    moved = tmp_path / "moved"
    shutil.move(str(out), str(moved))
    assert subprocess.run([str(moved / "true")], env=env).returncode == 0


def test_second_instrument_is_served_from_the_cache():
    first = json.loads(ferry("instrument", "--json", "/usr/bin/cat", check=True).stdout)
    second = json.loads(ferry("instrument", "--json", "/usr/bin/cat", check=True).stdout)
    assert second["from_cache"] and second["out_dir"] == first["out_dir"]
    libc = next(m for m in second["modules"] if m["name"] == "libc.so.6")
    assert libc["rewritten"] == "libc.so.6"
    assert subprocess.run([second["entry"], "/etc/hostname"], capture_output=True).stdout == \
        Path("/etc/hostname").read_bytes()


def test_cache_is_not_used_when_a_file_changes(tmp_path):
    exe = _build(tmp_path, "prog")
    first = json.loads(ferry("instrument", "--json", exe, check=True).stdout)
    assert not first["from_cache"]
    _build(tmp_path, "prog", "-DVARIANT=1", "-O0")
    second = json.loads(ferry("instrument", "--json", exe, check=True).stdout)
    assert not second["from_cache"] and second["out_dir"] != first["out_dir"]


def test_rewritten_file_is_recognized_and_not_rewritten_again(tmp_path):
    out = tmp_path / "out"
    ferry("instrument", "/usr/bin/true", "-o", out, check=True)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = tmp_path / "again"
    r = ferry("instrument", out / "true", "-o", again, check=True)
    assert "already rewritten" in r.stderr
    assert not again.exists()
    r = ferry("instrument", out / "libc.so.6", "-o", again, check=True)
    assert "already rewritten" in r.stderr and not again.exists()
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    r = ferry("sites", out / "true")
    assert r.returncode == 2 and "already rewritten" in r.stderr


def test_the_manifest_names_its_input_by_an_absolute_path(tmp_path):
    """The report names a process run from a cached image by the manifest's
    input: given relative, it read as relative to nothing the reader knew
    (`st/child` for a program the user ran as /tmp/x/b)."""
    (tmp_path / "sub").mkdir()
    exe = _build(tmp_path / "sub", "prog", "-pie", "-fPIE")
    ferry("instrument", "sub/prog", "-o", "out", check=True, cwd=tmp_path)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["input"] == str(exe)


def test_shared_object_is_rewritten_into_the_output_directory(tmp_path):
    out = tmp_path / "out"
    ferry("instrument", LIBC, "-o", out, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "shared-object" and manifest["entry"] is None
    assert (out / "libc.so.6").is_file()
    # A program loading this libc (by LD_LIBRARY_PATH) without the shim runs natively.
    r = subprocess.run(["/usr/bin/echo", "hi"], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=str(out)))
    assert r.stdout == "hi\n"


def _program_headers(path):
    """(e_phoff, [(type, offset, filesz) of each program header])."""
    import struct
    data = Path(path).read_bytes()
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    fields = [struct.unpack_from("<IIQQQQQQ", data, phoff + i * 56) for i in range(phnum)]
    return phoff, [(f[0], f[2], f[5]) for f in fields]


def test_a_rewritten_librarys_program_headers_lie_in_its_first_segment(tmp_path):
    # ld.so reads a library's program headers from its mapping: moved to the
    # end of libc's text (the widest gap), they were a page of text faulted
    # in by every process that loads it; after the first segment they lie on
    # the page its relocations are read from.
    out = tmp_path / "out"
    ferry("instrument", LIBC, "-o", out, check=True)
    phoff, headers = _program_headers(out / "libc.so.6")
    loads = [h for h in headers if h[0] == 1]
    first = loads[0]
    assert first[1] == 0 and phoff + len(headers) * 56 <= first[2], (hex(phoff), loads)
    _, original = _program_headers(LIBC)
    # the other segments as they were: none grew to hold the table
    assert [h for h in loads[1:] if h in original] == [h for h in original if h[0] == 1][1:]


def test_original_directory_replaces_origin_in_the_program_search_path(tmp_path):
    libdir = tmp_path / "app" / "lib"
    libdir.mkdir(parents=True)
    (tmp_path / "app" / "helper.c").write_text("int helper(void) { return 42; }\n")
    (tmp_path / "app" / "main.c").write_text(
        '#include <stdio.h>\nint helper(void);\nint main(void) { printf("%d\\n", helper()); return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(libdir / "libhelper.so"),
                    str(tmp_path / "app" / "helper.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "app" / "main"), str(tmp_path / "app" / "main.c"),
                    "-L", str(libdir), "-lhelper", "-Wl,-rpath,$ORIGIN/lib"], check=True)
    out = tmp_path / "out"
    ferry("instrument", tmp_path / "app" / "main", "-o", out, check=True)
    r = subprocess.run([str(out / "main")], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "42\n")


def test_instrument_shows_a_summary_table_and_the_path_to_run(tmp_path):
    r = ferry("instrument", "/usr/bin/true", "-o", tmp_path / "out", check=True)
    assert "libc.so.6" in r.stdout and "526" in r.stdout
    assert str(tmp_path / "out" / "true") in r.stdout.replace("\n", "")
