"""The core of the shim reaches the aggregation engine through shim/src/engine.h only: no
core file includes agg.h (the engine's internal header), and engine.h names exactly the
engine's symbols that the core's built objects use, no more and no fewer."""
import re
import subprocess

from conftest import ROOT

SRC = ROOT / "shim" / "src"
BUILD = ROOT / "shim" / "build"


def _engine_file(name):
    return name.startswith("agg_")


def _symbols(obj, *flags):
    out = subprocess.run(["nm", *flags, str(obj)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_no_core_file_includes_the_engines_internal_header():
    includers = [p.name for p in sorted(SRC.glob("*.[chS]"))
                 if not _engine_file(p.name) and p.name != "engine.h"
                 and re.search(r'#include\s+"agg\.h"', p.read_text())]
    assert includers == []


def test_engine_header_names_exactly_what_the_core_uses():
    objs = sorted(BUILD.glob("*.o"))
    assert any(o.name == "shim.o" for o in objs), "the shim is not built (make shim)"
    engine = set().union(*(_symbols(o, "--defined-only", "-g") for o in objs if _engine_file(o.name)))
    used = set().union(*(_symbols(o, "-u") for o in objs if not _engine_file(o.name))) & engine
    text = re.sub(r"/\*.*?\*/", "", (SRC / "engine.h").read_text(), flags=re.S)
    declared = set(re.findall(r"\b(\w+)\s*\(", text)) | set(re.findall(r"\*?(\w+)\s*(?:__attribute__|;)", text))
    declared &= engine
    assert used, "no engine symbol used by the core: the test reads the wrong objects"
    assert declared == used, {"declared, not used": declared - used, "used, not declared": used - declared}
