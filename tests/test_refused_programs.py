"""Kinds of programs are told apart from their headers alone, before LIEF,
capstone or keystone is loaded.  Those the shim cannot serve (32-bit, musl
dynamic) are refused in one line that names the file and the reason; their
sites can still be listed.  Static ones carry the shim once rewritten
(tests/test_static_programs.py)."""
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, ferry

HELLO = ROOT / "tests" / "programs" / "inline_syscalls.c"
PYTHON = sys.executable


def _gcc(*args, cc="gcc"):
    subprocess.run([cc, "-O2", *map(str, args)], check=True)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    built = {}
    _gcc("-static", "-o", d / "static", HELLO)
    built["static"] = d / "static"
    _gcc("-static-pie", "-o", d / "static-pie", HELLO)
    built["static-pie"] = d / "static-pie"
    _gcc("-o", d / "dynamic", HELLO)
    built["dynamic"] = d / "dynamic"
    # a real 32-bit program, without a 32-bit C library: exit(7) by int $0x80
    (d / "t32.s").write_text("_start: movl $1, %eax\n movl $7, %ebx\n int $0x80\n .globl _start\n")
    subprocess.run(["as", "--32", "-o", str(d / "t32.o"), str(d / "t32.s")], check=True)
    subprocess.run(["ld", "-m", "elf_i386", "-o", str(d / "elf32"), str(d / "t32.o")], check=True)
    built["elf32"] = d / "elf32"
    if shutil.which("musl-gcc"):
        _gcc("-o", d / "musl", HELLO, cc="musl-gcc")
        built["musl"] = d / "musl"
    return built


def _classify_alone(path, then=""):
    """classify(path) in a fresh interpreter: (kind name, reason, heavy
    modules it loaded)."""
    code = textwrap.dedent(f"""
        import json, sys
        from ferry.rewriter.elfkind import classify
        k = classify({str(path)!r})
        {then}
        heavy = sorted(m for m in ("lief", "capstone", "keystone") if m in sys.modules)
        print(json.dumps([k.name, k.reason, heavy]))
    """)
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("kind", ["static", "static-pie", "elf32", "dynamic", "musl"])
def test_kind_is_told_from_the_headers_alone(programs, kind):
    if kind not in programs:
        pytest.skip("musl-gcc is not installed (apt-get install musl-tools)")
    name, reason, heavy = _classify_alone(programs[kind])
    assert name == kind and heavy == []
    assert bool(reason) == (kind not in ("dynamic", "static", "static-pie"))


@pytest.mark.parametrize("kind,words", [
    ("elf32", "not a 64-bit ELF file"),
    ("musl", "uses musl's dynamic loader (/lib/ld-musl-x86_64.so.1); the shim is built for glibc"),
])
def test_program_the_shim_cannot_serve_is_refused_in_one_line(programs, tmp_path, kind, words):
    if kind not in programs:
        pytest.skip("musl-gcc is not installed (apt-get install musl-tools)")
    path = programs[kind]
    r = ferry("instrument", path, "-o", tmp_path / "out")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"ferry: {path}: {r.stderr.split(': ', 2)[2].strip()}"]
    assert words in r.stderr and str(path) in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["elf32", "musl"])
def test_refusing_loads_no_disassembler_or_elf_library(programs, kind):
    """The refusal costs a few reads: ferry run of a 32-bit program paid for
    loading LIEF (and hashing the file) only to be told no."""
    if kind not in programs:
        pytest.skip("musl-gcc is not installed (apt-get install musl-tools)")
    then = textwrap.dedent(f"""
        from ferry.base.errors import InputError
        from ferry.rewriter.instrument import instrument
        try:
            instrument({str(programs[kind])!r})
        except InputError:
            pass
        else:
            raise SystemExit("not refused")
    """).replace("\n", "\n        ")
    _name, _reason, heavy = _classify_alone(programs[kind], then)
    assert heavy == []


def test_sites_of_a_musl_program_and_its_loader_are_listed(programs):
    if "musl" not in programs:
        pytest.skip("musl-gcc is not installed (apt-get install musl-tools)")
    report = json.loads(ferry("sites", "--json", programs["musl"], check=True).stdout)
    assert report["summary"]["sites"] == 2  # inline_syscalls.c's own two
    loader = json.loads(ferry("sites", "--json", "/lib/ld-musl-x86_64.so.1", check=True).stdout)
    assert loader["summary"]["sites"] > 100  # musl's libc: loader and C library in one
