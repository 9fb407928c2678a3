"""`ferry report`: the text tables, --by/--sort, --json, --csv, --html, --chrome, --diff, and
bad input. Everything renders tests/data/run_small.json (a run model, docs/run.md), through
the `ferry` command or the render functions; nothing here needs a run to be recorded."""
import base64
import copy
import csv
import io
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from ferry.report import chrome, diff, export, rows, source, table
from ferry.report.output import write_atomic
from ferry.base.errors import FerryError

from conftest import ferry

DATA = Path(__file__).parent / "data" / "run_small.json"
MODEL = json.loads(DATA.read_text())
UNTIMED = {"clone3", "exit_group"}


@pytest.fixture
def run_json(tmp_path):
    """The fixture model in a fresh directory (outputs written beside it land there)."""
    p = tmp_path / "run.json"
    p.write_text(DATA.read_text())
    return p


def write_model(path, model):
    path.write_text(json.dumps(model))
    return path


def render_text(parts, width=200):
    out = io.StringIO()
    c = Console(file=out, width=width, color_system=None, highlight=False)
    for part in parts:
        c.print(part)
    return out.getvalue()


def strace_rows(text, minmax=None):
    """{syscall: (pct, seconds, usecs, calls, errors)} and the order, from the strace -c table
    (its min and max columns go into the dict `minmax`: {syscall: (min, max)}, None for '-')."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["%", "time"])
    found, order = {}, []
    for line in lines[head + 2:]:
        m = re.match(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|-)\s+([\d.]+|-)\s+(\d+)\s+"
                     r"(?:(\d+)\s+)?(\S+)\s*$", line)
        if not m:
            if found and line.strip():
                break
            continue
        pct, secs, usecs, mn, mx, calls, errors, name = m.groups()
        if minmax is not None:
            minmax[name] = tuple(None if v == "-" else float(v) for v in (mn, mx))
        found[name] = (float(pct), float(secs), float(usecs), int(calls), int(errors or 0))
        order.append(name)
    return found, order


# -- the fixture itself ------------------------------------------------------------------

def test_fixture_is_a_consistent_model():
    source.check(MODEL, DATA)
    sc = MODEL["syscalls"]
    assert len(sc) >= 10 and len(MODEL["processes"]) == 2 and MODEL["events"]
    for key in ("calls", "errors", "time_ns"):
        total = sum(s[key] for s in sc)
        assert sum(s[key] for s in MODEL["sites"]) == total, key
        assert sum(p[key] for p in MODEL["processes"]) == total, key
    for s in sc:
        assert sum(s["errnos"].values()) == s["errors"], s["name"]
        assert len(s["hist"]) == 32
        if s["name"] in UNTIMED:               # counted, not timed (docs/run.md)
            assert s["time_ns"] == 0 and not any(s["hist"]) and s["min_ns"] is None
        else:
            assert sum(s["hist"]) == s["calls"], s["name"]
            assert s["min_ns"] <= s["time_ns"] / s["calls"] <= s["max_ns"], s["name"]
    assert [s["time_ns"] for s in sc] == sorted((s["time_ns"] for s in sc), reverse=True)
    assert MODEL["totals"]["calls"] == sum(s["calls"] for s in sc)
    for p in MODEL["processes"]:
        mine = [t for t in MODEL["threads"] if t["pid"] == p["pid"]]
        assert len(mine) == p["threads"]
        for key in ("calls", "errors", "time_ns"):
            assert sum(t[key] for t in mine) == p[key], (p["pid"], key)
    for s in sc:
        assert sum(t["syscalls"].get(s["name"], 0) for t in MODEL["threads"]) == s["calls"]
    sites = {s["id"]: s for s in MODEL["sites"]}
    for e in MODEL["events"]:
        assert sites[e["site"]]["name"] == e["name"] and e["name"] not in UNTIMED


# -- the text report ---------------------------------------------------------------------

def test_default_report_is_a_strace_c_table_then_the_hottest_sites():
    r = ferry("report", DATA, check=True)
    header = next(line for line in r.stdout.splitlines() if "usecs/call" in line)
    assert header.split() == "% time seconds usecs/call min usecs max usecs calls errors syscall".split()
    found, order = strace_rows(r.stdout)
    assert set(found) == {s["name"] for s in MODEL["syscalls"]} | {"total"}
    total = found.pop("total")
    assert order[-1] == "total"
    assert abs(sum(v[0] for v in found.values()) - 100.0) < 0.2
    assert total[0] == 100.0
    assert total[3] == sum(s["calls"] for s in MODEL["syscalls"]) == 1535
    assert total[4] == sum(s["errors"] for s in MODEL["syscalls"])
    for s in MODEL["syscalls"]:
        pct, secs, usecs, calls, errors = found[s["name"]]
        assert (calls, errors) == (s["calls"], s["errors"])
        assert secs == pytest.approx(s["time_ns"] / 1e9, abs=1e-6)
        assert usecs == pytest.approx(s["time_ns"] / s["calls"] / 1e3, abs=0.01)
    assert order[:-1] == [s["name"] for s in MODEL["syscalls"]]     # most time first
    # then the hottest sites, with module and function
    after = r.stdout[r.stdout.index("hottest 10 sites"):]
    hottest = sorted(MODEL["sites"], key=lambda s: -s["time_ns"])[:10]
    lines = [line for line in after.splitlines() if "libc.so.6" in line or "python3.11" in line]
    assert len(lines) == 10
    for line, s in zip(lines, hottest):
        assert s["function"] in line and s["module"] in line and s["address"] in line, line
    coldest = min(MODEL["sites"], key=lambda s: s["time_ns"])
    assert coldest["function"] not in after
    # the summary and the errno breakdown
    assert "python3 compress.py data.txt" in r.stdout and "2 processes" in r.stdout
    assert re.search(r"newfstatat\s+57\s+ENOENT 57", r.stdout)
    assert re.search(r"openat\s+42\s+ENOENT 41, EACCES 1", r.stdout)
    assert "not timed: clone3, exit_group" in r.stdout
    assert "the shim's own calls, not in the tables: 15" in r.stdout


@pytest.mark.parametrize("key", rows.SORT_KEYS)
def test_sort_orders_the_syscall_table(key):
    _, order = strace_rows(render_text(table.render(MODEL, "syscall", key)))
    sc = MODEL["syscalls"]
    expected = {
        "time": sorted(sc, key=lambda s: (-s["time_ns"], s["name"])),
        "calls": sorted(sc, key=lambda s: (-s["calls"], s["name"])),
        "errors": sorted(sc, key=lambda s: (-s["errors"], s["name"])),
        "avg": sorted(sc, key=lambda s: (-(s["time_ns"] / s["calls"]), s["name"])),
        "name": sorted(sc, key=lambda s: s["name"]),
    }[key]
    assert order[:-1] == [s["name"] for s in expected]


def test_sort_keys_differ_on_the_fixture():
    """Otherwise the test above could not tell the keys apart."""
    orders = {key: [r["name"] for r in rows.rows(MODEL, "syscall", key)] for key in rows.SORT_KEYS}
    assert {key: order[0] for key, order in orders.items()} == {
        "time": "wait4", "calls": "read", "errors": "newfstatat", "avg": "wait4", "name": "brk"}
    assert orders["avg"][3] == "munmap" and orders["time"][3] == "read"


def test_by_site_lists_every_site():
    out = ferry("report", DATA, "--by", "site", "--sort", "calls", check=True).stdout
    lines = [line for line in out.splitlines() if re.search(r"\b0x[0-9a-f]+\s*$", line)]
    by_calls = sorted(MODEL["sites"], key=lambda s: (-s["calls"], s["name"], s["module"],
                                                     s["function"], s["id"]))
    assert len(lines) == len(MODEL["sites"])
    for line, s in zip(lines, by_calls):
        assert line.split()[3] == str(s["calls"]) and s["function"] in line, line
    assert not re.search(r"^system calls", out, re.M)      # not the syscall table
    assert not re.search(r"\btotal\s*$", out, re.M)


def test_by_process():
    out = ferry("report", DATA, "--by", "process", check=True).stdout
    found = [line for line in out.splitlines() if re.match(r"\s*41\d\d\s", line)]
    lines = {line.split()[0]: line for line in found}
    assert set(lines) == {"4100", "4101"}
    for p in MODEL["processes"]:
        fields = lines[str(p["pid"])].split()
        assert fields[1] == str(p["ppid"])
        assert fields[2] == Path(p["exe"]).name
        assert "exited 0" in lines[str(p["pid"])]
        assert str(p["calls"]) in fields and str(p["errors"]) in fields
    assert [line.split()[0] for line in found] == ["4100", "4101"]      # more time first


def test_processes_without_counts_are_named_and_do_not_break_the_tables():
    model = copy.deepcopy(MODEL)
    model["processes"].append({
        "pid": 4101, "ppid": 4100, "exe": "/usr/bin/cat", "argv": None, "start": None,
        "end": None, "duration_s": None, "exit": None, "state": "unfinished", "exec": None,
        "enabled": False, "reason": "ran a program that was not rewritten",
        "threads": None, "calls": None, "errors": None, "time_ns": None})
    model["processes"][1]["state"] = "unfinished"
    source.check(model, "m")
    text = render_text(table.render(model, "process", "calls"))
    assert "(cat 4101) ran without the shim: ran a program that was not rewritten" in text
    assert "(gzip 4101) never finished" in text
    assert re.search(r"4101\s+4100\s+cat\s+no shim", text)
    got = list(csv.DictReader(io.StringIO(export.to_csv(model, "process", "time"))))
    assert [g["exe"] for g in got] == ["/usr/bin/python3.11", "/usr/bin/gzip", "/usr/bin/cat"]
    assert got[2]["calls"] == "" and got[2]["enabled"] == "false"


def test_an_empty_run_says_so():
    model = dict(MODEL, processes=[], syscalls=[], sites=[], events=[])
    text = render_text(table.render(model))
    assert "no system calls recorded" in text and "0 processes" in text
    assert export.to_csv(model).splitlines() == [",".join(export.columns("syscall"))]
    assert [e for e in chrome.trace(model)["traceEvents"]] == []


def test_text_report_to_a_file(tmp_path):
    out = tmp_path / "report.txt"
    r = ferry("report", DATA, "-o", out, check=True)
    assert str(out) in r.stdout and "usecs/call" not in r.stdout
    text = out.read_text()
    assert "usecs/call" in text and "hottest 10 sites" in text and "\x1b[" not in text


# -- --json and --csv --------------------------------------------------------------------

def test_json_is_the_model(tmp_path):
    assert json.loads(ferry("report", DATA, "--json", check=True).stdout) == MODEL
    out = tmp_path / "m.json"
    r = ferry("report", DATA, "--json", "-o", out, check=True)
    assert str(out) in r.stdout and "{" not in r.stdout
    assert json.loads(out.read_text()) == MODEL


@pytest.mark.parametrize("by", rows.BY)
def test_csv_has_a_header_and_one_row_per_entry(by):
    text = ferry("report", DATA, "--csv", "--by", by, "--sort", "calls", check=True).stdout
    lines = list(csv.reader(io.StringIO(text)))
    assert lines[0] == export.columns(by)
    got = list(csv.DictReader(io.StringIO(text)))
    entries = rows.entries(MODEL, by)
    assert len(got) == len(entries)
    calls = [int(g["calls"]) for g in got]
    assert calls == sorted(calls, reverse=True)
    key = {"syscall": "syscall", "site": "site", "process": "pid", "thread": "tid"}[by]
    model_key = {"syscall": "name", "site": "id", "process": "pid", "thread": "tid"}[by]
    by_key = {str(e[model_key]): e for e in entries}
    assert {g[key] for g in got} == set(by_key)
    whole = sum(e["time_ns"] for e in entries)
    for g in got:
        e = by_key[g[key]]
        assert (int(g["calls"]), int(g["errors"]), int(g["time_ns"])) == \
               (e["calls"], e["errors"], e["time_ns"])
        assert float(g["avg_ns"]) == pytest.approx(e["time_ns"] / e["calls"], abs=0.05)
        assert float(g["pct_time"]) == pytest.approx(100 * e["time_ns"] / whole, abs=0.005)
    if by == "syscall":
        openat = next(g for g in got if g["syscall"] == "openat")
        assert openat["errnos"] == "ENOENT=41;EACCES=1"
        assert [int(openat[f"hist_{i}"]) for i in range(32)] == by_key["openat"]["hist"]
    if by == "site":
        g = next(g for g in got if g["function"] == "__read")
        assert (g["module"], g["syscall"], g["address"]) == ("libc.so.6", "read", "0x114980")
    if by == "process":
        g = next(g for g in got if g["pid"] == "4101")
        assert (g["argv"], g["state"], g["exit_code"], g["exit_signal"]) == \
               ("gzip -c data.txt", "exited", "0", "")
    if by == "thread":
        g = next(g for g in got if g["tid"] == "4102")
        assert (g["pid"], g["exe"], g["syscalls"]) == \
               ("4100", "/usr/bin/python3.11", "futex=53;write=40;read=25;ioctl=12")


# -- --html ------------------------------------------------------------------------------

class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.links, self.images, self.text = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "action", "data", "poster", "srcset"):
                self.links.append(value)
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def test_html_is_one_self_contained_page_with_plots(run_json):
    r = ferry("report", run_json, "--html", check=True)
    page_path = run_json.with_name("run.html")
    assert str(page_path) in r.stdout
    assert sorted(p.name for p in run_json.parent.iterdir()) == ["run.html", "run.json"]
    html = page_path.read_text()
    page = _Page()
    page.feed(html)
    page.close()
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert "url(" not in html and "@import" not in html
    assert len(page.images) == 3          # calls per syscall, latency, timeline
    assert page.links == page.images      # nothing but the embedded images is referenced
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    text = " ".join(page.text)
    for s in MODEL["syscalls"]:
        assert s["name"] in text
    for s in MODEL["sites"][:5]:
        assert s["function"] in text
    assert "python3 compress.py data.txt" in text and "4101" in text


def test_html_escapes_the_model_and_draws_a_timeline_without_events(tmp_path):
    from ferry.report.html import to_html
    model = copy.deepcopy(MODEL)
    model["info"]["command"] = ["sh", "-c", "echo '<script>alert(1)</script>'"]
    model["processes"][0]["exe"] = "/bin/<b>odd"
    model["events"] = []
    page = _Page()
    page.feed(to_html(model, "calls"))
    assert "script" not in page.tags and "b" not in page.tags
    assert "<script>alert(1)</script>" in " ".join(page.text)
    assert len(page.images) == 3


# -- --chrome ----------------------------------------------------------------------------

def test_chrome_trace_has_one_complete_event_per_recorded_call(tmp_path):
    out = tmp_path / "t.json"
    r = ferry("report", DATA, "--chrome", "-o", out, check=True)
    assert str(out) in r.stdout
    trace = json.loads(out.read_text())
    assert trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    assert all(e["ph"] in ("X", "M") for e in events)
    calls = [e for e in events if e["ph"] == "X"]
    assert len(calls) == len(MODEL["events"])
    expected = sorted(MODEL["events"], key=lambda e: (e["start_ns"], e["pid"], e["tid"]))
    for got, want in zip(calls, expected):
        assert got["name"] == want["name"] and got["cat"] == "syscall"
        assert isinstance(got["ts"], float) and isinstance(got["dur"], float)
        assert got["ts"] == pytest.approx(want["start_ns"] / 1000)
        assert got["dur"] == pytest.approx(want["dur_ns"] / 1000)
        assert (got["pid"], got["tid"]) == (want["pid"], want["tid"])
        assert got["args"]["result"] == want["result"] and got["args"]["site"] == want["site"]
    failed = [e for e in calls if e["args"]["result"] < 0]
    assert [e["args"]["errno"] for e in failed] == ["ENOENT"]
    assert all("errno" not in e["args"] for e in calls if e["args"]["result"] >= 0)
    meta = {(e["name"], e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert meta == {("process_name", 4100, 4100): "python3.11",
                    ("process_name", 4101, 4101): "gzip",
                    ("thread_name", 4100, 4100): "python3.11",
                    ("thread_name", 4100, 4102): "thread 4102",
                    ("thread_name", 4101, 4101): "gzip"}


def test_chrome_default_location_and_a_run_without_events(tmp_path):
    p = write_model(tmp_path / "quiet.json", dict(MODEL, events=[]))
    r = ferry("report", p, "--chrome", check=True)
    out = tmp_path / "quiet.trace.json"
    assert str(out) in r.stdout and "no individual calls" in r.stderr
    trace = json.loads(out.read_text())
    assert [e["ph"] for e in trace["traceEvents"]] == ["M", "M"]


# -- --diff ------------------------------------------------------------------------------

def _changed_model():
    b = copy.deepcopy(MODEL)
    sc = {s["name"]: s for s in b["syscalls"]}
    sc["read"]["calls"] += 100
    sc["read"]["time_ns"] += 5_000_000
    sc["wait4"]["time_ns"] -= 20_000_000
    sc["openat"]["errors"] -= 40
    b["syscalls"] = [s for s in b["syscalls"] if s["name"] != "getrandom"]
    b["syscalls"].append({"nr": 7, "name": "poll", "calls": 4, "errors": 0, "errnos": {},
                          "time_ns": 3_000_000, "min_ns": 1000, "max_ns": 2_000_000,
                          "hist": [0] * 32})
    return b


def test_diff_rows_have_the_right_deltas():
    a, b = MODEL, _changed_model()
    d = diff.diff(a, b, "syscall", "old", "new")
    by = {r["syscall"]: r for r in d["rows"]}
    a_read = next(s for s in a["syscalls"] if s["name"] == "read")
    read = by["read"]
    assert (read["calls_a"], read["calls_b"], read["calls_delta"]) == \
           (a_read["calls"], a_read["calls"] + 100, 100)
    assert read["time_ns_delta"] == 5_000_000
    assert read["time_delta_pct"] == pytest.approx(100 * 5_000_000 / a_read["time_ns"], abs=0.01)
    assert by["wait4"]["time_ns_delta"] == -20_000_000
    assert by["openat"]["errors_delta"] == -40 and by["openat"]["time_ns_delta"] == 0
    assert by["poll"]["only_in"] == "B" and by["poll"]["time_delta_pct"] is None
    assert by["getrandom"]["only_in"] == "A" and by["getrandom"]["time_delta_pct"] == -100.0
    assert by["mmap"]["only_in"] is None and by["mmap"]["calls_delta"] == 0
    assert [r["syscall"] for r in d["rows"][:4]] == ["wait4", "read", "poll", "getrandom"]
    deltas = [abs(r["time_ns_delta"]) for r in d["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    assert d["total"]["calls_delta"] == 100 + 4 - 1
    assert d["total"]["time_ns_delta"] == sum(r["time_ns_delta"] for r in d["rows"])
    assert (d["a"]["run"], d["b"]["run"]) == ("old", "new")


def test_diff_command(tmp_path):
    old = write_model(tmp_path / "old.json", MODEL)
    new = write_model(tmp_path / "new.json", _changed_model())
    d = json.loads(ferry("report", new, "--diff", old, "--json", check=True).stdout)
    assert d == json.loads(json.dumps(diff.diff(MODEL, _changed_model(), "syscall",
                                                str(old), str(new))))
    text = ferry("report", new, "--diff", old, check=True).stdout
    assert f"A: {old}" in text and f"B: {new}" in text
    line = next(line for line in text.splitlines() if line.split()[:1] == ["read"])
    a_read = next(s for s in MODEL["syscalls"] if s["name"] == "read")
    assert line.split()[1:4] == [str(a_read["calls"]), str(a_read["calls"] + 100), "+100"]
    assert line.split()[-1] == f"{100 * 5_000_000 / a_read['time_ns']:+.1f}%"
    assert next(line for line in text.splitlines() if line.split()[:1] == ["poll"]).endswith("new")
    got = list(csv.DictReader(io.StringIO(ferry("report", new, "--diff", old, "--csv", check=True).stdout)))
    assert [g["syscall"] for g in got] == [r["syscall"] for r in d["rows"]]
    assert got[0]["time_ns_delta"] == "-20000000"
    sites = json.loads(ferry("report", new, "--diff", old, "--json", "--by", "site", check=True).stdout)
    assert len(sites["rows"]) == len(MODEL["sites"]) and sites["by"] == "site"


# -- bad input ---------------------------------------------------------------------------

def _one_line_failure(r, path):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"ferry: {path}"), lines[0]
    assert "Traceback" not in r.stderr
    return lines[0]


def _bad_model(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


BAD = {
    "missing": (lambda d: d / "nothere", "no such run directory"),
    "empty-dir": (lambda d: (d / "empty").mkdir() or d / "empty", "not a run directory"),
    "truncated-json": (lambda d: _bad_model(d, "t.json", DATA.read_text()[:700]),
                       "corrupt run model: not valid JSON (truncated"),
    "garbled-json": (lambda d: _bad_model(d, "g.json", DATA.read_text().replace(":", ";", 3)),
                     "corrupt run model: not valid JSON (line"),
    "empty-file": (lambda d: _bad_model(d, "e.json", ""), "empty"),
    "binary": (lambda d: _bad_model(d, "b.json", b"\x7fELF\x02\x01\x01\xff\xfe" * 20),
               "not a run directory or a run model"),
    "info-file": (lambda d: _bad_model(d, "info.json", '{"format": "ferry-run-info"}'),
                  "not a run model: format is \"ferry-run-info\""),
    "json-list": (lambda d: _bad_model(d, "l.json", "[1, 2]"), "not a run model"),
    "new-version": (lambda d: _bad_model(d, "v.json", json.dumps(dict(MODEL, version=99))),
                    "version 99 is not supported"),
    "no-syscalls": (lambda d: _bad_model(d, "n.json", json.dumps(
        {k: v for k, v in MODEL.items() if k != "syscalls"})), "no 'syscalls'"),
    "bad-field": (lambda d: _bad_model(d, "f.json", json.dumps(dict(
        MODEL, syscalls=[dict(MODEL["syscalls"][0], calls="12")] + MODEL["syscalls"][1:]))),
        "syscalls[0].calls should be a count"),
    "bad-event": (lambda d: _bad_model(d, "ev.json", json.dumps(dict(
        MODEL, events=[{"pid": 1, "tid": 1, "name": "read", "start_ns": -5, "dur_ns": 1}]))),
        "events[0].start_ns should be a number >= 0"),
}


# every case once with --html (which writes into the run directory by default); a few
# with every output format
CASES = [(case, "--html") for case in sorted(BAD)] + [
    (case, fmt) for case in ("empty-dir", "truncated-json") for fmt in ("", "--chrome", "--csv")]


@pytest.mark.parametrize("case,fmt", CASES)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case, fmt):
    make, problem = BAD[case]
    path = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    r = ferry("report", path, *([fmt] if fmt else []))
    assert problem in _one_line_failure(r, path)
    assert sorted(tmp_path.rglob("*")) == before


def test_bad_diff_input_names_the_other_run(tmp_path):
    bad = _bad_model(tmp_path, "bad.json", "{")
    r = ferry("report", DATA, "--diff", bad, "--json", "-o", tmp_path / "d.json")
    assert "corrupt run model" in _one_line_failure(r, bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_damaged_run_directory(tmp_path):
    """A run directory whose process file is damaged (ferry.rundata reads it)."""
    run = tmp_path / "ferry.data"
    (run / "proc").mkdir(parents=True)
    (run / "info.json").write_text(json.dumps({
        "format": "ferry-run-info", "version": 1, "command": ["true"], "exit":
        {"code": 0, "signal": None}}))
    (run / "proc" / "10-0.ferry").write_bytes(b"FERRY\0\0\0" + b"\xff" * 13)
    before = sorted(tmp_path.rglob("*"))
    r = ferry("report", "--html", cwd=tmp_path)        # DIR defaults to ferry.data
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("ferry: ferry.data"), r.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_unwritable_output_is_one_line_and_leaves_nothing(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "r.html"
    r = ferry("report", DATA, "--html", "-o", target)
    _one_line_failure(r, target)
    assert list(tmp_path.iterdir()) == []
    r = ferry("report", DATA, "--csv", "-o", tmp_path)              # a directory
    assert r.returncode == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--json", "--csv"], ["--html", "--chrome"],
                                  ["--diff", str(DATA), "--html"],
                                  ["--diff", str(DATA), "--by", "process"]])
def test_options_that_do_not_go_together(args):
    r = ferry("report", DATA, *args)
    assert r.returncode == 2 and r.stdout == "" and "Error" in r.stderr


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("old report")

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(FerryError, match="No space left on device"):
        write_atomic(target, "new report")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert target.read_text() == "old report"
    monkeypatch.undo()
    write_atomic(target, "new report")
    assert target.read_text() == "new report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)     # not mkstemp's private mode
