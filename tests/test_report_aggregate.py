"""The Aggregation part of `ferry report`: the aggregation area of process files (layout:
shim/src/aggarea.h) read into the run model, and shown as text, JSON, CSV (--by pool)
and HTML. The process files come from real `ferry run`s; their aggregation areas are
filled here member by member in the header's layout (ferry.base.layouts), so the reader
is tested whether or not the engine ran."""
import csv
import io
import itertools
import json
import re
import shutil

import pytest

from conftest import ferry, proc_records, read_record, write_record
from ferry import aggdata, procfile
from ferry.base.layouts import constant
from ferry.rundata import load_run

BUCKETS = aggdata.BATCH_BUCKETS


def area(pools, aggregated=1000, native=30, worker=20, crossings=25, fibers=40, switches=2100,
         carriers=1, groups=1, magic=b"FERRYAGG", version=1, npools=None, carrier_table=(),
         slots=None):
    """An aggregation area; pools: dicts of counters, batches and settings; carrier_table:
    (fibers, switches, crossings, completed, peak) per carrier."""
    a = bytearray(aggdata.SIZE)
    area_ = aggdata.AREA
    area_.pack_into(a, 0, magic=magic, version=version, npools=len(pools) if npools is None else npools,
                    aggregated=aggregated, native=native, worker=worker, crossings=crossings,
                    fibers=fibers, switches=switches, carriers=carriers, groups=groups,
                    route=[0xff] * area_.count("route"),
                    carrier_slots=len(carrier_table) if slots is None else slots)
    for i, p in enumerate(pools):
        off = area_.offset("pools") + i * aggdata.POOL.size
        aggdata.POOL.pack_into(a, off, **{k: p[k] for k in aggdata.POOL_COUNTERS}, batches=p["batches"],
                               entries=p.get("entries", 256), concurrency=p.get("concurrency", 0),
                               cpus=p.get("cpus", 0), sqpoll_cpu=p.get("sqpoll", -1),
                               priority=p.get("priority", 0), wait=p.get("wait", 4),
                               wait_limit=p.get("limit", 0), wait_timeout_ns=p.get("timeout", 0))
    for i, c in enumerate(carrier_table):
        aggdata.CARRIER.pack_into(a, area_.offset("carrier") + i * aggdata.CARRIER.size,
                                  **dict(zip(aggdata.CARRIER_COUNTERS, c)))
    return bytes(a)


def batches(**at):
    b = [0] * BUCKETS
    for k, v in at.items():
        b[int(k[1:])] = v
    return b


POOL0 = {"submitted": 900, "completed": 900, "enters": 10, "max_depth": 120,
         "wait_ns": 2_500_000, "depth_sum": 640, "batches": batches(b4=2, b6=8),
         "entries": 256, "concurrency": 4, "wait": 4}
CARRIERS = [(25, 1400, 12, 600, 9), (15, 700, 13, 399, 6)]   # fibers, switches, crossings,
#                                                              completed, peak
POOL1 = {"submitted": 100, "completed": 99, "enters": 15, "max_depth": 9, "wait_ns": 1_000_000,
         "depth_sum": 45, "batches": batches(b0=5, b2=10), "entries": 64, "cpus": 0b1,
         "sqpoll": 0, "priority": 5, "wait": 2, "limit": 16, "timeout": 100_000}


def fill(rec, data, mode=None):
    write_record(rec, aggdata.OFFSET, data)
    if mode is not None:
        raw = bytearray(read_record(rec))
        procfile.HEADER.pack_into(raw, 0, mode=mode)
        write_record(rec, 0, bytes(raw))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run directories of real runs: one process (count profile), several processes
    (aggregate profile, a shell running two children)."""
    tmp = tmp_path_factory.mktemp("aggreport")
    one = tmp / "one"
    r = ferry("run", "--profile", "count", "-o", one, "--", "/bin/true", cwd=tmp)
    assert r.returncode == 0, r.stderr
    many = tmp / "many"
    r = ferry("run", "--profile", "aggregate", "-o", many, "--", "/bin/sh", "-c",
              "/bin/true; /bin/true; exit 0", cwd=tmp)
    assert r.returncode == 0, r.stderr
    return one, many


def one_process_run(recorded, tmp_path, data):
    d = tmp_path / "run"
    shutil.copytree(recorded[0], d)
    (proc,) = proc_records(d)
    fill(proc, data, mode=constant("FERRY_MODE_AGGREGATE"))
    return d


@pytest.fixture
def run(recorded, tmp_path):
    """A copy of the one-process run with both pools filled in (an area of a shim from
    before the carrier table: no carrier recorded)."""
    return one_process_run(recorded, tmp_path, area([POOL0, POOL1]))


@pytest.fixture
def carrier_run(recorded, tmp_path):
    """The same with two carriers recorded."""
    return one_process_run(recorded, tmp_path, area([POOL0, POOL1], carriers=2,
                                                    carrier_table=CARRIERS))


def carrier_table(out):
    """The rows of the text report's carrier table, split into words."""
    lines = out.split("\ncarriers ")[1].splitlines()[3:]     # after title, head, rule
    return [line.split() for line in itertools.takewhile(str.strip, lines)]


def test_the_reader_gives_the_areas_numbers(run):
    (proc,) = proc_records(run)
    rec = aggdata.parse(read_record(proc))
    assert {k: rec[k] for k in aggdata.COUNTERS} == {
        "aggregated": 1000, "native": 30, "worker": 20, "crossings": 25, "fibers": 40,
        "switches": 2100, "carriers": 1, "groups": 1}
    assert rec["calls"] == 1050
    assert rec["crossings_saved"] == pytest.approx(1 - 25 / 1050)
    p0, p1 = rec["pools"]
    assert (p0["submitted"], p0["completed"], p0["enters"], p0["max_depth"], p0["wait_ns"],
            p0["depth_sum"]) == (900, 900, 10, 120, 2_500_000, 640)
    assert p0["mean_depth"] == 64.0
    assert p0["batches"] == batches(b4=2, b6=8)
    assert (p0["entries"], p0["concurrency"], p0["cpus"], p0["sqpoll_cpu"], p0["priority"],
            p0["wait"]) == (256, 4, [], -1, 0, "adaptive")
    assert (p1["entries"], p1["cpus"], p1["sqpoll_cpu"], p1["priority"], p1["wait"],
            p1["wait_limit"], p1["wait_timeout_ns"]) == (64, [0], 0, 5, "some", 16, 100_000)
    assert p1["mean_depth"] == 3.0
    assert rec["carrier_list"] == []


def test_the_reader_gives_each_carriers_numbers(carrier_run):
    (proc,) = proc_records(carrier_run)
    rec = aggdata.parse(read_record(proc))
    assert rec["carrier_list"] == [
        {"index": 0, "fibers": 25, "switches": 1400, "crossings": 12, "completed": 600, "peak": 9},
        {"index": 1, "fibers": 15, "switches": 700, "crossings": 13, "completed": 399, "peak": 6}]
    assert rec["carriers"] == 2


def test_the_run_model_has_the_aggregation_and_names_mode_3(run):
    model = load_run(run)
    agg = model["aggregation"]
    assert agg["processes"] == 1 and agg["calls"] == 1050 and len(agg["pools"]) == 2
    assert [p["mode"] for p in model["processes"]] == ["aggregate"]
    assert model["processes"][0]["aggregation"]["aggregated"] == 1000


def test_a_run_without_aggregation_has_none(recorded):
    model = load_run(recorded[0])
    assert model["aggregation"] is None
    assert model["processes"][0]["aggregation"] is None
    r = ferry("report", recorded[0])
    assert r.returncode == 0 and "aggregation" not in r.stdout
    r = ferry("report", "--by", "pool", recorded[0])
    assert r.returncode == 0 and "no aggregation data" in r.stdout
    r = ferry("report", "--by", "pool", "--csv", recorded[0])
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1     # the header only


def test_processes_add_up_and_pools_take_the_profiles_names(recorded, tmp_path):
    d = tmp_path / "many"
    shutil.copytree(recorded[1], d)
    procs = proc_records(d)
    assert len(procs) >= 3
    main = {"submitted": 10, "completed": 10, "enters": 2, "max_depth": 7, "wait_ns": 5,
            "depth_sum": 9, "batches": batches(b2=2)}          # the aggregate profile's pool
    for i, proc in enumerate(procs[:2]):
        fill(proc, area([dict(main, max_depth=7 + i)], aggregated=10, native=1, worker=0,
                        crossings=3))
    model = load_run(d)
    agg = model["aggregation"]
    assert agg["processes"] == 2
    assert (agg["aggregated"], agg["native"], agg["crossings"], agg["calls"]) == (20, 2, 6, 22)
    (p,) = agg["pools"]
    assert p["name"] == "main" and not p["mixed"]
    assert (p["submitted"], p["enters"], p["depth_sum"], p["max_depth"]) == (20, 4, 18, 8)
    assert p["batches"] == batches(b2=4) and p["mean_depth"] == 4.5
    # a group of the C API with settings of its own: unnamed, and marked when they differ
    fill(procs[2], area([dict(main, entries=64)]))
    p = load_run(d)["aggregation"]["pools"][0]
    assert p["mixed"] and p["name"] is None
    assert "differs between processes" in " ".join(ferry("report", d).stdout.split())


def test_text_report_has_an_aggregation_section(run):
    r = ferry("report", run)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("system calls") < out.index("aggregation")
    assert ("1050 calls of fibers (1 process, 1 group): 1000 aggregated, 30 native, 20 by "
            "workers; 25 kernel crossings, 97.62% saved; 40 fibers on 1 carrier (40.0 per carrier), "
            "2100 fiber switches (kernel context switches avoided)") \
        in " ".join(out.split())
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if re.match(r"^[01]\s+\d", line) and "entries" in line}
    assert rows["0"][:7] == ["0", "900", "900", "10", "64.0", "120", "0.002500"]
    assert "entries 256, wait adaptive, concurrency 4, cpus any" in out
    assert "entries 64, wait some(16, 100us), concurrency default, cpus 0, sqpoll cpu 0, " \
           "priority 5" in out
    head = next(line for line in out.splitlines() if "calls per enter" in line).split()
    assert head[-7:] == ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127"]
    batch_rows = [line.split() for line in out.splitlines()
                  if re.match(r"^[01]\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s*$", line)]
    assert batch_rows == [["0", "0", "0", "0", "0", "2", "0", "8"],
                          ["1", "5", "0", "10", "0", "0", "0", "0"]]
    pools_only = ferry("report", "--by", "pool", run).stdout
    assert "aggregation" in pools_only and "system calls" not in pools_only.split("aggregation")[1]


def test_json_has_the_aggregation(run, tmp_path):
    model = json.loads(ferry("report", "--json", run).stdout)
    agg = model["aggregation"]
    assert agg["crossings_saved"] == pytest.approx(1 - 25 / 1050)
    assert [p["mean_depth"] for p in agg["pools"]] == [64.0, 3.0]
    # ... and a model file renders the same report as the directory
    saved = tmp_path / "model.json"
    saved.write_text(json.dumps(model))
    assert ferry("report", saved).stdout == ferry("report", run).stdout


def test_csv_by_pool_has_the_totals_then_a_row_per_pool(run):
    r = ferry("report", "--csv", "--by", "pool", run)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["pool"] for row in rows] == ["all", "0", "1"]
    total, p0, p1 = rows
    assert (total["aggregated"], total["native"], total["worker"], total["calls"],
            total["crossings"]) == ("1000", "30", "20", "1050", "25")
    assert float(total["crossings_saved"]) == pytest.approx(1 - 25 / 1050, abs=1e-6)
    assert (total["submitted"], total["enters"], total["max_depth"]) == ("1000", "25", "120")
    assert float(total["mean_depth"]) == pytest.approx(685 / 25, abs=0.01)
    assert [total[f"batch_{i}"] for i in range(BUCKETS)] == \
        [str(a + b) for a, b in zip(POOL0["batches"], POOL1["batches"])]
    assert (p0["entries"], p0["wait"], p0["cpus"], p0["mean_depth"], p0["wait_ns"]) == \
        ("256", "adaptive", "", "64.0", "2500000")
    assert (p1["cpus"], p1["sqpoll_cpu"], p1["priority"], p1["wait"], p1["wait_limit"],
            p1["wait_timeout_ns"], p1["mixed"]) == ("0", "0", "5", "some", "16", "100000", "false")
    assert p1["aggregated"] == "" and [p1[f"batch_{i}"] for i in (0, 2)] == ["5", "10"]


def test_html_has_the_section_and_a_batch_size_plot(run):
    plain = ferry("report", "--html", "-o", run.parent / "plain.html", run)
    assert plain.returncode == 0, plain.stderr
    page = (run.parent / "plain.html").read_text()
    assert "<h2>Aggregation</h2>" in page and "97.62% saved" in page
    assert 'alt="batch sizes"' in page
    section = page.split("<h2>Aggregation</h2>")[1]
    assert section.count("data:image/png;base64,") == 1
    assert "some(16, 100us)" in section


@pytest.mark.parametrize("by", ["pool", "carrier"])
def test_diff_by_pool_or_carrier_is_a_usage_error(run, by):
    r = ferry("report", "--diff", run, "--by", by, run)
    assert r.returncode == 2 and f"not by {by}" in r.stderr


# --- carriers ---------------------------------------------------------------------------------

def test_text_report_has_a_carrier_table_when_a_process_ran_several(carrier_run):
    out = ferry("report", carrier_run).stdout
    assert "40 fibers on 2 carriers (20.0 per carrier)" in " ".join(out.split())
    assert out.index("\ncarriers ") < out.index("\npools ")
    head = out.split("\ncarriers ")[1].splitlines()[1].split()
    assert head == ["carrier", "fibers", "peak", "switches", "crossings", "completed", "calls"]
    assert carrier_table(out) == [["0", "25", "9", "1400", "12", "600"],
                                  ["1", "15", "6", "700", "13", "399"]]
    only = ferry("report", "--by", "carrier", carrier_run).stdout
    assert carrier_table(only) == carrier_table(out) and "pools" not in only


def test_csv_by_carrier_has_a_row_per_carrier_with_its_pid(carrier_run):
    r = ferry("report", "--csv", "--by", "carrier", carrier_run)
    assert r.returncode == 0, r.stderr
    pid = json.loads(ferry("report", "--json", carrier_run).stdout)["processes"][0]["pid"]
    assert list(csv.reader(io.StringIO(r.stdout))) == [
        ["pid", "carrier", "fibers", "peak", "switches", "crossings", "completed"],
        [str(pid), "0", "25", "9", "1400", "12", "600"],
        [str(pid), "1", "15", "6", "700", "13", "399"]]


def test_carriers_of_several_processes_keep_their_pids(recorded, tmp_path):
    d = tmp_path / "many"
    shutil.copytree(recorded[1], d)
    procs = proc_records(d)[:2]
    fill(procs[0], area([], carriers=2, carrier_table=CARRIERS))
    fill(procs[1], area([], carriers=1, carrier_table=[(3, 40, 5, 7, 2)]))
    pids = [p["pid"] for p in load_run(d)["processes"]][:2]
    agg = load_run(d)["aggregation"]
    assert [(c["pid"], c["index"], c["fibers"]) for c in agg["carrier_list"]] == \
        [(pids[0], 0, 25), (pids[0], 1, 15), (pids[1], 0, 3)]
    assert (agg["carriers"], agg["fibers"]) == (3, 80)
    out = ferry("report", d).stdout
    head = out.split("\ncarriers ")[1].splitlines()[1].split()
    assert head[:2] == ["pid", "carrier"]
    assert [row[:3] for row in carrier_table(out)] == \
        [[str(pids[0]), "0", "25"], [str(pids[0]), "1", "15"], [str(pids[1]), "0", "3"]]


def test_one_carrier_per_process_gives_no_carrier_table(recorded, tmp_path):
    d = one_process_run(recorded, tmp_path, area([POOL0], carrier_table=CARRIERS[:1]))
    out = ferry("report", d).stdout
    assert "40 fibers on 1 carrier" in " ".join(out.split())
    assert "completed calls" not in out
    assert carrier_table(ferry("report", "--by", "carrier", d).stdout) == \
        [["0", "25", "9", "1400", "12", "600"]]


def test_an_area_from_before_the_carrier_table_is_reported_as_before(run):
    out = ferry("report", run).stdout
    assert "completed calls" not in out and "pools" in out
    r = ferry("report", "--by", "carrier", run)
    assert r.returncode == 0 and "no carrier data" in r.stdout
    r = ferry("report", "--by", "carrier", "--csv", run)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1     # the header only


def test_html_has_the_carrier_table_and_plot(carrier_run):
    r = ferry("report", "--html", "-o", carrier_run.parent / "c.html", carrier_run)
    assert r.returncode == 0, r.stderr
    section = (carrier_run.parent / "c.html").read_text().split("<h2>Aggregation</h2>")[1]
    assert 'alt="fibers and switches per carrier"' in section
    assert section.count("data:image/png;base64,") == 2          # carriers, batch sizes
    assert "<th class=\"n\">completed calls</th>" in section
    assert '<td class="n">1400</td>' in section


def test_a_model_file_without_carriers_renders_as_before(run, tmp_path):
    model = json.loads(ferry("report", "--json", run).stdout)
    del model["aggregation"]["carrier_list"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(model))
    assert ferry("report", old).stdout == ferry("report", run).stdout


def report_of_changed_model(run, change, tmp_path):
    """`ferry report` of the run's model (--json) once `change` has damaged it."""
    model = json.loads(ferry("report", "--json", run).stdout)
    change(model["aggregation"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(model))
    return ferry("report", bad), bad


def test_a_model_file_with_a_bad_carrier_is_rejected(carrier_run, tmp_path):
    r, bad = report_of_changed_model(carrier_run, lambda a: a["carrier_list"][1].update(peak=-1),
                                     tmp_path)
    assert r.returncode == 2
    assert r.stderr == (f"ferry: {bad}: not a valid run model: aggregation.carrier_list[1].peak "
                        "should be a count (integer >= 0), not -1\n")


@pytest.mark.parametrize("data, problem", [
    (area([POOL0], magic=b"FERRYAGX"), "corrupt aggregation area (bad magic)"),
    (area([POOL0], version=2), "unsupported aggregation area version 2"),
    (area([POOL0], npools=9), "corrupt aggregation area (9 pools, at most 8)"),
    (area([POOL0], slots=65), "corrupt aggregation area (65 carrier slots, at most 64)"),
])
def test_a_damaged_area_is_one_line_naming_the_file(run, data, problem):
    (proc,) = proc_records(run)
    fill(proc, data)
    r = ferry("report", run)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"ferry: {proc[2]}: {problem}\n"


def test_a_model_file_with_a_bad_aggregation_is_rejected(run, tmp_path):
    r, bad = report_of_changed_model(run, lambda a: a["pools"][1].update(batches=[1, 2]), tmp_path)
    assert r.returncode == 2
    assert r.stderr == (f"ferry: {bad}: not a valid run model: aggregation.pools[1].batches "
                        "should be a list of 12 counts, not [1, 2]\n")


def test_a_real_aggregate_run_reports_without_error(tmp_path):
    # With the engine built the process runs in mode aggregate; without it, in count
    # mode; the report works either way (and shows the section when a group was made).
    r = ferry("run", "--profile", "aggregate", "-o", tmp_path / "run", "--", "/bin/true",
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    model = json.loads(ferry("report", "--json", tmp_path / "run").stdout)
    assert model["processes"][0]["mode"] in ("aggregate", "count")
    agg = model["aggregation"]
    if agg is not None:
        assert agg["calls"] == agg["aggregated"] + agg["native"] + agg["worker"]
    r = ferry("report", "--csv", "--by", "pool", tmp_path / "run")
    assert r.returncode == 0, r.stderr


def summary_line(out):
    return next(line for line in " ".join(out.split()).split("aggregation ") if "calls of fibers" in line)


def test_more_crossings_than_calls_is_no_saving(recorded, tmp_path):
    # e.g. redis under fibers: batches of one call plus the engine's waits cost more
    # crossings than the calls would make natively; never a negative "saved"
    d = one_process_run(recorded, tmp_path, area([POOL0], aggregated=10, native=5, worker=0,
                                                  crossings=40))
    out = ferry("report", d).stdout
    line = summary_line(out)
    assert "15 calls of fibers" in line
    assert "40 kernel crossings, 25 more than the calls make natively (none saved)" in line
    assert "saved;" not in line.replace("(none saved);", "") and "-" not in line.split(";")[1]
    html = ferry("report", "--html", "-o", tmp_path / "r.html", d)
    assert html.returncode == 0 and "more than the calls make natively" in \
        " ".join((tmp_path / "r.html").read_text().split())
    model = json.loads(ferry("report", "--json", d).stdout)
    assert model["aggregation"]["crossings_saved"] == pytest.approx(1 - 40 / 15)   # as documented


def test_nothing_aggregated_claims_no_saving_and_no_avoided_switches(recorded, tmp_path):
    d = one_process_run(recorded, tmp_path, area([POOL0], aggregated=0, native=30, worker=4,
                                                  crossings=20, switches=50))
    line = summary_line(ferry("report", d).stdout)
    assert "20 kernel crossings, none saved (no call was aggregated)" in line
    assert "50 fiber switches" in line and "avoided" not in line and "%" not in line


def test_submitted_calls_without_a_completion_are_named(run):
    out = " ".join(ferry("report", run).stdout.split())
    assert "pool 1: 1 submitted call with no completion recorded" in out
    assert "pool 0" not in out.split("submitted call")[0][-40:]       # pool 0: all completed


def test_an_aggregating_profile_that_aggregated_nothing_says_so(recorded, tmp_path):
    # recorded[1] ran `sh -c` under -p aggregate: no process creates a group there
    model = load_run(recorded[1])
    assert model["aggregation"] is None and model["info"]["profile"]["mode"] == "aggregate"
    out = " ".join(ferry("report", recorded[1]).stdout.split())
    assert "profile aggregate: no process used the aggregation engine" in out
    assert "no process used the aggregation engine" not in ferry("report", recorded[0]).stdout
