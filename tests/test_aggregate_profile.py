"""FERRY_MODE=aggregate with FERRY_AGG (docs/aggregate.md): the settings
reach the shim, a malformed FERRY_AGG is reported and the process runs in
count mode, and the figures land in the process file's aggregation area."""
from aggregate_helpers import agg, engine_stats  # noqa: F401
from conftest import proc_records, read_record
from ferry import aggdata, procfile
from ferry.base.layouts import constant


def test_malformed_ferry_agg_is_reported_and_ignored(agg, tmp_path):
    for bad in ["pool=3,0,0,-1,0,any,0,0", "route=0:9", "frobnicate=1", "pool=256,0,0,-1,0,sometimes,0,0"]:
        r = agg("agg_results", "fiber", "timers", tmp_path,
                env={"FERRY_MODE": "aggregate", "FERRY_AGG": bad})
        assert "FERRY_AGG" in r.stderr, bad
        assert "count mode" in r.stderr


def test_aggregation_area_in_process_file(agg, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "proc").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    r = agg("agg_results", "fiber", "pipes", tmp_path / "d",
            env={"FERRY_MODE": "aggregate", "FERRY_RUN_DIR": str(run_dir),
                 "FERRY_AGG": "workers=3;pool=128,2,0,-1,3,some,8,50000;route=0:0,1:0,7:w,61:w"})
    records = proc_records(run_dir)
    assert len(records) == 1
    data = read_record(records[0])
    assert procfile.HEADER.unpack(data)["mode"] == constant("FERRY_MODE_AGGREGATE")
    a = aggdata.AREA.unpack(data, aggdata.OFFSET)
    assert a["magic"] == b"FERRYAGG"
    stats = engine_stats(r.stderr)
    assert (a["version"], a["npools"], a["carriers"], a["groups"]) == (1, 1, 1, 1)
    assert a["aggregated"] == stats["aggregated"] > 0
    assert a["worker"] == stats["worker"] > 0
    assert a["fibers"] == 1 and a["switches"] > 0
    assert a["crossings"] >= stats["enters"]
    pool = aggdata.POOL.unpack(data, aggdata.OFFSET + aggdata.AREA.offset("pools"))
    assert pool["submitted"] == pool["completed"] == a["aggregated"] and pool["enters"] == stats["enters"]
    assert sum(pool["batches"]) > 0
    assert tuple(pool[k] for k in aggdata.POOL_SETTINGS) == (128, 2, 0, -1, 3, 2, 8, 50000)
    route = a["route"]
    assert route[0] == 0 and route[1] == 0 and route[61] == 0xFE and route[39] == 0xFF
