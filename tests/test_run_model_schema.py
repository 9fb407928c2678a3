"""The run model (`ferry report --json`) follows docs/run.md, on a real run
with the event trace on; the Chrome trace has one event per recorded call."""
import json

import pytest

from conftest import ROOT, ferry

UNTIMED = {"clone", "clone3", "vfork", "rt_sigreturn", "exit", "exit_group"}  # never return here
OPT_INT = (int, type(None))
OPT_STR = (str, type(None))
SCHEMA = {
    "info": {"command": list, "cwd": str, "start": str, "end": str, "duration_s": float, "exit": dict,
             "host": str, "kernel": str, "ferry_version": str, "profile": dict},
    "process": {"pid": int, "ppid": int, "exe": str, "argv": (list, type(None)), "start": OPT_STR,
                "end": OPT_STR, "duration_s": (float, type(None)), "exit": (dict, type(None)),
                "state": str, "exec": OPT_STR, "enabled": bool, "reason": OPT_STR,
                "threads": OPT_INT, "calls": OPT_INT, "errors": OPT_INT, "time_ns": OPT_INT},
    "syscall": {"nr": int, "name": str, "calls": int, "errors": int, "errnos": dict, "time_ns": int,
                "min_ns": OPT_INT, "max_ns": OPT_INT, "hist": list},
    "site": {"id": str, "module": OPT_STR, "function": OPT_STR, "address": OPT_STR, "nr": OPT_INT,
             "name": OPT_STR, "calls": int, "errors": int, "time_ns": int},
    "event": {"pid": int, "tid": int, "nr": int, "name": str, "start_ns": int, "dur_ns": int,
              "result": int, "site": OPT_STR},
}


def _check(obj, schema, where):
    missing = set(schema) - set(obj)
    assert not missing, f"{where}: missing {missing}"
    for key, types in schema.items():
        assert isinstance(obj[key], types), f"{where}.{key}: {type(obj[key]).__name__}"


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schema")
    profile = tmp / "events.toml"
    profile.write_text('mode = "trace"\n[trace]\nevents = true\nevent_buffer = 65536\n')
    run_dir = tmp / "run"
    ferry("run", "--profile", profile, "-o", run_dir, "--", ROOT / "tests/programs/build/threads",
          check=True, timeout=120, text=False)
    model = json.loads(ferry("report", "--json", run_dir, check=True).stdout)
    return run_dir, model


def test_report_json_follows_the_documented_schema(traced_run):
    _, model = traced_run
    assert (model["format"], model["version"]) == ("ferry-run", 1)
    _check(model["info"], SCHEMA["info"], "info")
    for kind, key in (("process", "processes"), ("syscall", "syscalls"), ("site", "sites"),
                      ("event", "events")):
        assert model[key], key
        for i, item in enumerate(model[key]):
            _check(item, SCHEMA[kind], f"{key}[{i}]")
    for s in model["syscalls"]:
        assert len(s["hist"]) == 32
        if s["name"] not in UNTIMED:
            assert sum(s["hist"]) == s["calls"], s["name"]
            assert s["min_ns"] <= s["time_ns"] / s["calls"] <= s["max_ns"]
    assert [s["time_ns"] for s in model["syscalls"]] == sorted((s["time_ns"] for s in model["syscalls"]),
                                                               reverse=True)
    assert model["totals"]["calls"] == sum(s["calls"] for s in model["syscalls"])
    assert "not seen" in model["preinit"]["note"]


def test_one_event_per_recorded_call_in_the_trace_and_the_chrome_export(traced_run, tmp_path):
    run_dir, model = traced_run
    timed = sum(s["calls"] for s in model["syscalls"] if s["name"] not in UNTIMED)
    assert len(model["events"]) == timed
    threads = {(e["pid"], e["tid"]) for e in model["events"]}
    assert len(threads) == 7  # main + 6 workers
    out = tmp_path / "trace.json"
    ferry("report", "--chrome", "-o", out, run_dir, check=True, text=False)
    trace = json.loads(out.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == timed
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and "name" in e for e in complete)


def test_html_report_embeds_its_plots(traced_run, tmp_path):
    run_dir, _ = traced_run
    out = tmp_path / "report.html"
    ferry("report", "--html", "-o", out, run_dir, check=True, text=False)
    html = out.read_text()
    assert html.count("data:image/png;base64,") >= 3
    assert 'src="http' not in html and "href=\"http" not in html
