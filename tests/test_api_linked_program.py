"""A program linked with libferry.so for its API (aggregation, counts) is rewritten and
run like any other, but the shim itself is never rewritten nor patched from a plan:
patching its own calls would make it call itself."""
import json
import subprocess

from conftest import ROOT, ferry

PROGRAM = ROOT / "tests" / "programs" / "build" / "api_linked"


def test_shim_linked_by_a_program_is_left_alone_by_instrument_and_run(tmp_path, test_programs, monkeypatch):
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    r = ferry("run", "-o", tmp_path / "run", "--", PROGRAM, check=True)
    assert "getppid counted 5" in r.stdout
    manifest = json.loads(next((tmp_path / "cache" / "programs").glob("*/manifest.json")).read_text())
    [shim] = [m for m in manifest["modules"] if m["name"] == "libferry.so"]
    assert (shim["role"], shim["rewritten"]) == ("shim", None)
    assert not [p for p in (tmp_path / "cache" / "plans").iterdir()
                if p.name == "-".join(map(str, _identity(ROOT / "shim" / "build" / "libferry.so")))]
    # run natively after the run filled the cache: the shim loads (it is linked),
    # applies the cached plans, and must not have patched itself
    native = subprocess.run([str(PROGRAM)], capture_output=True, text=True, timeout=60)
    assert native.returncode == 0 and native.stdout.startswith("active 1, snapshot 0")


def test_instrument_refuses_the_shim_itself(tmp_path):
    r = ferry("instrument", ROOT / "shim" / "build" / "libferry.so", "-o", tmp_path / "out")
    assert r.returncode == 2 and "Ferry's shim, which is never rewritten" in r.stderr
    assert not (tmp_path / "out").exists()


def _identity(path):
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
