"""`ferry report` of a bare proc/ directory: the process files alone, copied out of a
run, or written by a program run with FERRY_RUN_DIR and no `ferry run`, give the same
processes and counts as the run they came from."""
import json
import os
import shutil
import subprocess

from conftest import calls_of, read_stats, recording_env, ferry

SCRIPT = "ls / >/dev/null; cat /etc/hostname; echo done"


def _model(path):
    return json.loads(ferry("report", "--json", path, check=True).stdout)


def _counted(model):
    """What the process files say: all but the run's info, the name the command was
    given (`ferry run` keeps it; the file says the real one), and the names of sites
    (the module tables beside proc/ give those)."""
    out = {k: model[k] for k in ("syscalls", "totals", "shim_calls", "aggregation")}
    out["processes"] = [dict(p, exe=os.path.realpath(p["exe"])) for p in model["processes"]]
    out["sites"] = [(s["id"], s["calls"], s["errors"]) for s in model["sites"]]
    return out


def test_a_copied_proc_directory_reports_the_run(tmp_path):
    run = tmp_path / "run"
    ferry("run", "-p", "trace", "-o", run, "--", "sh", "-c", SCRIPT, check=True)
    copy = tmp_path / "elsewhere" / "copied"
    shutil.copytree(run / "proc", copy)
    whole, bare = _model(run), _model(copy)
    assert bare["info"] == {}
    assert _counted(bare) == _counted(whole)
    assert bare["totals"]["processes"] >= 3 and bare["totals"]["calls"] > 0
    assert {"ls", "cat"} <= {os.path.basename(p["exe"]) for p in bare["processes"]}
    text = ferry("report", copy, check=True).stdout
    assert f"{bare['totals']['processes']} processes" in text and "openat" in text


def test_a_run_directory_written_by_the_shim_alone(instrument, test_programs, tmp_path):
    prog = instrument(test_programs / "getppid_loop")
    run = tmp_path / "run"
    r = subprocess.run([str(prog.path), "77"], env=recording_env(os.environ, run),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    model = _model(run)     # the directory FERRY_RUN_DIR named: no info.json
    assert model == _model(run / "proc")
    (p,) = model["processes"]
    assert p["pid"] == next(iter(read_stats(run)))
    getppid = next(s for s in model["syscalls"] if s["name"] == "getppid")
    assert getppid["calls"] == calls_of(read_stats(run), "getppid") == 77


def test_a_directory_without_process_files_is_still_not_a_run(tmp_path):
    (tmp_path / "proc").mkdir()
    r = ferry("report", tmp_path)
    assert r.returncode == 2 and "not a run directory" in r.stderr
