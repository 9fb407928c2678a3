"""Bad input gets one line naming the file and the problem, exit status 2, and
leaves nothing behind; a damaged file never produces a traceback or a partly
written output."""
import os
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import LIBC, ferry

SMALL_PROGRAM = Path("/usr/bin/true").read_bytes()


def _assert_clean_failure(r, path, out_dir=None):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ferry: {path}"), lines[0]
    assert "Traceback" not in r.stderr
    if out_dir is not None:
        assert not Path(out_dir).exists()
        leftovers = [p for p in Path(out_dir).parent.iterdir() if p.name.startswith(".")]
        assert not leftovers, leftovers


def _assert_complete_or_clean_failure(r, path, out_dir):
    """The two acceptable outcomes for a damaged file."""
    if r.returncode == 0:
        assert (Path(out_dir) / "manifest.json").is_file()
        leftovers = [p for p in Path(out_dir).iterdir() if p.name.endswith(".tmp")]
        assert not leftovers
    else:
        _assert_clean_failure(r, path, out_dir)


def _elf_with(offset, fmt, value, base=SMALL_PROGRAM):
    data = bytearray(base)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


def _first_load_align_offset(data):
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    for i in range(phnum):
        if struct.unpack_from("<I", data, phoff + i * 56)[0] == 1:  # PT_LOAD
            return phoff + i * 56 + 48
    raise AssertionError("no PT_LOAD")


BAD_FILES = {
    "empty": (b"", "not an ELF file"),
    "text": (b"#!/bin/sh\necho hello\n", "not an ELF file"),
    "truncated-header": (SMALL_PROGRAM[:40], "truncated ELF header"),
    "truncated-body": (SMALL_PROGRAM[:4000], "truncated"),
    "32-bit": (_elf_with(4, "<B", 1), "not a 64-bit ELF file"),
    "big-endian": (_elf_with(5, "<B", 2), "not a little-endian ELF file"),
    "arm64": (_elf_with(18, "<H", 183), "not an x86-64 ELF file"),
    "object-file": (_elf_with(16, "<H", 1), "not an executable or shared object"),
    "bad-phdr-table": (_elf_with(32, "<Q", 1 << 40), "program header table"),
    "bad-shdr-table": (_elf_with(40, "<Q", 1 << 40), "section header table"),
    # found by fuzzing: LIEF's writer divides by a loadable segment's alignment
    "zero-alignment": (_elf_with(_first_load_align_offset(SMALL_PROGRAM), "<Q", 0), "alignment is 0x0"),
}


@pytest.mark.parametrize("command", ["instrument", "sites"])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_gives_one_line_and_exit_2(tmp_path, case, command):
    data, problem = BAD_FILES[case]
    path = tmp_path / case
    path.write_bytes(data)
    out = tmp_path / "out"
    r = ferry(command, path, "-o", out) if command == "instrument" else ferry(command, path)
    _assert_clean_failure(r, path, out)
    assert problem in r.stderr


@pytest.mark.parametrize("command", ["instrument", "sites"])
def test_directory_and_missing_file_are_refused(tmp_path, command):
    r = ferry(command, tmp_path)
    _assert_clean_failure(r, tmp_path)
    assert "is a directory" in r.stderr
    missing = tmp_path / "missing"
    r = ferry(command, missing)
    _assert_clean_failure(r, missing)
    assert "no such file" in r.stderr


def test_unreadable_file_is_refused(tmp_path):
    if os.getuid() == 0:
        pytest.skip("root reads every file")
    path = tmp_path / "secret"
    path.write_bytes(SMALL_PROGRAM)
    path.chmod(0)
    _assert_clean_failure(ferry("sites", path), path)


def test_a_file_name_that_would_break_the_line_is_written_escaped(tmp_path):
    """The one line names the file as Python writes a string: a newline or a
    form feed in a name (or in the loader's name a damaged file holds) would
    make two lines of it."""
    path = tmp_path / "two\nlines\x0c"
    path.write_bytes(b"not an ELF file")
    r = ferry("instrument", path, "-o", tmp_path / "out")
    _assert_clean_failure(r, str(path).replace("\n", "\\n").replace("\x0c", "\\x0c"), tmp_path / "out")


def test_missing_library_is_named(tmp_path):
    src = tmp_path / "m.c"
    src.write_text("int f(void); int main(void) { return f(); }\n")
    (tmp_path / "f.c").write_text("int f(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libgone.so"), str(tmp_path / "f.c")],
                   check=True)
    exe = tmp_path / "m"
    subprocess.run(["gcc", "-o", str(exe), str(src), "-L", str(tmp_path), "-lgone"], check=True)
    (tmp_path / "libgone.so").unlink()
    out = tmp_path / "out"
    r = ferry("instrument", exe, "-o", out)
    _assert_clean_failure(r, exe, out)
    assert "libgone.so" in r.stderr


def _address_space_limit():
    """In the child: at most 3 GiB of address space, so that a rewriter that tries
    to allocate what a damaged header asks for fails here instead of taking the
    machine's memory."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _instrument_with_a_header_byte(tmp_path, p_type, at, value):
    """`ferry instrument` (under the address-space limit) of SMALL_PROGRAM with
    byte `at` of its first program header of type `p_type` set to `value`;
    checked to fail cleanly."""
    data = bytearray(SMALL_PROGRAM)
    e_phoff, = struct.unpack_from("<Q", data, 32)
    index = next(i for i in range(16) if struct.unpack_from("<I", data, e_phoff + 56 * i)[0] == p_type)
    data[e_phoff + 56 * index + at] = value
    path = tmp_path / "prog"
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    r = ferry("instrument", path, "-o", out, preexec_fn=_address_space_limit)
    _assert_clean_failure(r, path, out)
    return r


def test_a_segment_claiming_gigabytes_of_memory_is_refused_not_allocated(tmp_path):
    # Found by hypothesis: one byte of /usr/bin/true's first LOAD p_memsz made it
    # 8 GiB; making room for the new segments then allocated it as file bytes.
    r = _instrument_with_a_header_byte(tmp_path, 1, 44, 2)     # PT_LOAD p_memsz += 8 GiB
    assert "p_memsz" in r.stderr


def test_a_segment_reaching_past_the_file_is_refused_not_loaded(tmp_path):
    # Found by hypothesis: one byte of /usr/bin/true's PT_DYNAMIC p_filesz made
    # it ~1 GB; LIEF then read that much to add a segment (std::bad_alloc).
    r = _instrument_with_a_header_byte(tmp_path, 2, 35, 62)    # PT_DYNAMIC p_filesz += 1 GB
    assert "DYNAMIC" in r.stderr and "past the end of the file" in r.stderr


def test_a_segment_placed_past_the_file_is_refused_not_loaded(tmp_path):
    # Found by hypothesis (a CI run): a qword over libc's PT_GNU_STACK header
    # put its p_offset ~1 GB past the file, p_filesz still 0; LIEF making
    # room for the new segments then allocated up to it (std::bad_alloc,
    # "internal error").  Whether it failed depended on the address space
    # left, so it was flaky.
    r = _instrument_with_a_header_byte(tmp_path, 0x6474E551, 11, 0x40)  # PT_GNU_STACK p_offset += 1 GiB
    assert "GNU_STACK" in r.stderr and "past the end of the file" in r.stderr


mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, len(SMALL_PROGRAM) - 1), st.just(0)),
    st.tuples(st.just("byte"), st.integers(0, 4095), st.integers(0, 255)),
    st.tuples(st.just("qword"), st.integers(0, 4088), st.integers(0, 2**64 - 1)),
)


def _mutate(data, mutations):
    data = bytearray(data)
    for kind, pos, value in mutations:
        if kind == "truncate":
            del data[pos:]
        elif pos < len(data):
            if kind == "byte":
                data[pos] = value
            else:
                data[pos:pos + 8] = struct.pack("<Q", value)[:len(data) - pos]
    return bytes(data)


def _instrument_mutated(tmp_path_factory, name, original, mutations):
    """Instrument a damaged copy of `original`; check the outcome is one of
    the two acceptable ones; return the damaged file's path."""
    tmp = tmp_path_factory.mktemp("mutated")
    path = tmp / name
    path.write_bytes(_mutate(original, mutations))
    out = tmp / "out"
    r = ferry("instrument", path, "-o", out, preexec_fn=_address_space_limit)
    _assert_complete_or_clean_failure(r, path, out)
    return path


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=4))
@example(mutations=[("byte", 792, 1)])  # found by hypothesis: a damaged PT_INTERP path
@example(mutations=[("byte", 435, 62)])  # found by hypothesis: PT_DYNAMIC's p_filesz past the file
@example(mutations=[("byte", 128, 104)])  # found by hypothesis: a form feed in the PT_INTERP path
def test_damaged_program_never_gives_a_traceback_or_partial_output(tmp_path_factory, mutations):
    path = _instrument_mutated(tmp_path_factory, "prog", SMALL_PROGRAM, mutations)
    r = ferry("sites", "--json", path)
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr
    if r.returncode == 2:
        assert len(r.stderr.splitlines()) == 1


LIBC_HEAD = Path(LIBC).read_bytes()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
@example(mutations=[("byte", 612, 1)])  # found by hypothesis: segments out of the code's reach
@example(mutations=[("qword", 746, 15710)])  # found by hypothesis: PT_GNU_STACK's p_offset past the file
def test_damaged_library_never_gives_a_traceback_or_partial_output(tmp_path_factory, mutations):
    _instrument_mutated(tmp_path_factory, "libc.so.6", LIBC_HEAD, mutations)


def test_a_crash_inside_the_writer_is_an_error_not_a_dead_ferry(tmp_path):
    # Found by fuzzing: on some damaged files LIEF's writer dies of SIGFPE.
    # It runs in a child process, so that is a FerryError naming the input.
    import signal
    from ferry.rewriter import patcher
    from ferry.base.errors import FerryError

    class CrashingWriter:
        def write(self, path):
            os.kill(os.getpid(), signal.SIGFPE)

    with pytest.raises(FerryError, match=r"/input: corrupt ELF file: LIEF crashed .*SIGFPE"):
        patcher._write_isolated(CrashingWriter(), str(tmp_path / "out"), "/input")
    assert not (tmp_path / "out").exists()


CRASHING_WRITE = """
import os, signal, sys
from ferry.rewriter import patcher
from ferry.base.errors import FerryError
class CrashingWriter:
    def write(self, path):
        os.kill(os.getpid(), signal.SIGFPE)
try:
    patcher._write_isolated(CrashingWriter(), sys.argv[1], "/input")
except FerryError as e:
    print(e)
"""


def test_a_crash_inside_the_writer_dumps_no_python_traceback(tmp_path):
    # Python's fault handler (PYTHONFAULTHANDLER, -X faulthandler, pytest's
    # workers) printed "Fatal Python error" and the writer child's stack
    # before the one-line error that the crash is.
    import sys
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", CRASHING_WRITE, str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert "corrupt ELF file: LIEF crashed" in r.stdout, (r.stdout, r.stderr)
    assert r.stderr == "", r.stderr


def test_library_name_that_is_not_text_is_reported(tmp_path):
    # Found by fuzzing: LIEF decodes DT_NEEDED names as UTF-8.
    path = tmp_path / "prog"
    path.write_bytes(SMALL_PROGRAM.replace(b"libc.so.6\0", b"libc\xd6so.6\0", 1))
    out = tmp_path / "out"
    r = ferry("instrument", path, "-o", out)
    _assert_clean_failure(r, path, out)
    assert "not valid text" in r.stderr
