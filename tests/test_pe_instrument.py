"""`ferry instrument app.exe`: the program (and any imported DLL with stubs
of its own) rewritten with a trampoline section, a control block and an
import of ferry.dll; ntdll and win32u left to ferry.dll's in-memory patching,
which the manifest says.  A program's own stub is then counted under the Nt
name the loaded ntdll gives its SSN."""
import json
import subprocess

import pytest

from conftest import ferry
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)
from winenv import WIN_SOURCES, build_win_program


@pytest.fixture(scope="module")
def own_stub(wine, ferry_dll_built, tmp_path_factory):
    """own_stub.exe whose stub has NtYieldExecution's SSN in the ntdll wine
    loads (a program written for that build), and its instrumented copy."""
    ntdll = wine.prefix / "drive_c" / "windows" / "system32" / "ntdll.dll"
    r = ferry("sites", "--json", ntdll, env=wine.env, text=False, timeout=180)
    assert r.returncode == 0, r.stderr
    ssn = next(s["nr"] for s in json.loads(r.stdout)["sites"] if s["syscall"] == "NtYieldExecution")
    d = tmp_path_factory.mktemp("own_stub")
    exe = build_win_program(WIN_SOURCES / "own_stub.c", d, f"-DYIELD_SSN={ssn:#x}")
    out = d / "out"
    r = ferry("instrument", exe, "-o", out, env=wine.env, text=False, timeout=180)
    assert r.returncode == 0, r.stderr
    return exe, out


def _yields(wine, run_dir):
    r = ferry("report", "--json", run_dir, env=wine.env, text=False, timeout=180)
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)
    return model, sum(s["calls"] for s in model["syscalls"] if s["name"] == "NtYieldExecution")


def test_manifest_says_what_was_rewritten_and_why_not(wine, own_stub):
    exe, out = own_stub
    m = json.loads((out / "manifest.json").read_text())
    assert m["entry"] == "own_stub.exe" and (out / "ferry.dll").is_file()
    root = m["modules"][0]
    assert root["rewritten"] == "own_stub.exe" and root["sites_total"] == 2
    stub = next(s for s in root["sites"] if s["kind"] == "stub")
    inline = next(s for s in root["sites"] if s["kind"] == "inline")
    assert stub["status"] == "patched"
    assert inline["status"] == "unpatched" and "inline syscall" in inline["reason"]
    ntdll = next(mod for mod in m["modules"] if mod["name"].lower() == "ntdll.dll")
    assert ntdll["rewritten"] is None and "in memory" in ntdll["note"]
    # the rewritten file imports ferry.dll and carries both new sections
    r = subprocess.run(["x86_64-w64-mingw32-objdump", "-p", "-h", out / "own_stub.exe"],
                       capture_output=True, text=True, timeout=60)
    assert "DLL Name: ferry.dll" in r.stdout and ".ferryt" in r.stdout and ".ferryc" in r.stdout


def test_instrument_is_idempotent(wine, own_stub):
    exe, out = own_stub
    before = (out / "own_stub.exe").read_bytes()
    r = ferry("instrument", exe, "-o", out, env=wine.env, text=False, timeout=180)
    assert r.returncode == 0 and b"from the cache" in r.stdout, r.stdout
    r = ferry("instrument", out / "own_stub.exe", env=wine.env, text=False, timeout=180)
    assert r.returncode == 0 and b"already rewritten" in b" ".join(r.stderr.split()), r.stderr
    assert (out / "own_stub.exe").read_bytes() == before


def test_instrumented_program_runs_as_the_original(wine, own_stub):
    """Under plain wine (ferry.dll loaded from the program's directory, no run
    directory: nothing counted) it behaves as the original does."""
    exe, out = own_stub
    for args in (("--yield", "9"), ()):
        plain, rewritten = wine.reference(exe, *args), wine.run(out / "own_stub.exe", *args)
        assert rewritten.returncode == plain.returncode == 0, rewritten.stderr
        assert rewritten.stdout.replace(b"out\\", b"").split(b" at ")[0] == \
            plain.stdout.split(b" at ")[0]


@pytest.mark.parametrize("profile", ["count", "trace"])
def test_own_stub_counted_after_instrument(wine, own_stub, tmp_path, profile):
    exe, out = own_stub
    counts = {}
    for n in (0, 25):
        plain = wine.reference(exe, "--yield", n)
        r = ferry("run", "-p", profile, "-o", tmp_path / f"run{n}", "--",
                  out / "own_stub.exe", "--yield", n, env=wine.env, text=False, timeout=180)
        assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
        assert f"yielded {n}, 0 failed".encode() in r.stdout
        model, counts[n] = _yields(wine, tmp_path / f"run{n}")
        mods = model["processes"][0]
        assert mods["enabled"] and mods["windows"]
    assert counts[25] - counts[0] == 25, counts


@pytest.mark.parametrize("profile", ["count", "trace"])
def test_run_of_the_original_takes_its_rewritten_image_from_the_cache(wine, own_stub, tmp_path,
                                                                       profile):
    """`ferry run app.exe` rewrites the program into the image cache (once)
    and runs that, as it does a Linux program: its own stub is counted with
    no `ferry instrument` beforehand, and the program still sees itself
    named as the user named it (its command line), and so does the report."""
    exe, _out = own_stub
    counts = {}
    for n in (0, 25):
        plain = wine.reference(exe, "--yield", n)
        r = ferry("run", "-p", profile, "-o", tmp_path / f"run{n}", "--", exe, "--yield", n,
                  env=wine.env, text=False, timeout=180)
        assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
        model, counts[n] = _yields(wine, tmp_path / f"run{n}")
        (proc,) = model["processes"]
        assert proc["enabled"] and proc["exe"].lower().endswith("\\own_stub.exe"), proc
        assert "cache" not in proc["exe"].lower() and proc["exe"].startswith("Z:"), proc
    assert counts[25] - counts[0] == 25, counts


def _build_with_private_dll(d):
    """app.exe importing private.dll from its own directory (no system call
    code in the DLL: it is not rewritten, only needed)."""
    import subprocess as sp
    from winenv import MINGW_CC
    dll_c, app_c = d / "private.c", d / "app.c"
    dll_c.write_text('__declspec(dllexport) int private_twice(int x) { return 2 * x; }\n')
    app_c.write_text('#include <stdio.h>\n__declspec(dllimport) int private_twice(int);\n'
                     'int main(void) { printf("twice 21 is %d\\n", private_twice(21)); return 0; }\n')
    for cmd in ([MINGW_CC, "-O2", "-shared", "-o", d / "private.dll", dll_c,
                 "-Wl,--out-implib," + str(d / "libprivate.a")],
                [MINGW_CC, "-O2", "-o", d / "app.exe", app_c, "-L" + str(d), "-lprivate"]):
        r = sp.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return d / "app.exe"


def test_instrumented_directory_carries_the_programs_own_dlls(wine, ferry_dll_built, tmp_path):
    """The instrumented directory is where the program runs from: a DLL the
    loader took from the program's directory must be found there too."""
    exe = _build_with_private_dll(tmp_path)
    out = tmp_path / "out"
    r = ferry("instrument", exe, "-o", out, env=wine.env, text=False, timeout=180)
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    private = next(x for x in m["modules"] if x["name"].lower() == "private.dll")
    assert private["copied"] == "private.dll" and (out / "private.dll").is_file(), private
    plain = wine.reference(exe)
    assert plain.stdout.rstrip() == b"twice 21 is 42", plain
    ran = wine.run(out / "app.exe")
    assert (ran.stdout, ran.returncode) == (plain.stdout, plain.returncode), ran.stderr
