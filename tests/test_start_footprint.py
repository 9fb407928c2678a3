"""What an enabled process's start writes of its record: each page of the
record it touches is a page of the run's file to fault in, allocate and
write back, in every process.  A start writes its header's first page and
the pages its counts need, and nothing for what did not happen."""
import os

from conftest import ferry
from ferry import catchdata, procfile
from ferry.rundata import load_run


def _records(run_dir, exe):
    return [r for r in procfile.read_dir(run_dir / "proc") if r.exe == exe]


def test_catch_area_written_only_once_a_call_is_caught(tmp_path):
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", "/bin/true; :",
              timeout=120)
    assert r.returncode == 0, r.stderr
    (true,) = _records(run_dir, "/usr/bin/true")
    assert true.caught == {"enabled": True, "caught": 0, "overflow": 0, "sites": []}
    with open(true.file, "rb") as f:
        area = os.pread(f.fileno(), 4096, true.offset + catchdata.OFFSET)
    assert area == bytes(4096), "the catch area's page was written though nothing was caught"
    model = load_run(run_dir)
    assert model["catch_all"]["enabled"]
