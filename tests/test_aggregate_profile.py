"""FERRY_MODE=aggregate with FERRY_AGG (docs/aggregate.md): the settings
reach the shim, a malformed FERRY_AGG is reported and the process runs in
count mode, and the figures land in the process file's aggregation area."""
import struct

from aggregate_helpers import agg, engine_stats  # noqa: F401
from conftest import proc_records, read_record

AREA = 57344


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
                 "FERRY_AGG": "workers=3;pool=128,2,0,-1,3,some,8,50000;route=0:0,1:0,61:w"})
    records = proc_records(run_dir)
    assert len(records) == 1
    data = read_record(records[0])
    assert struct.unpack_from("<i", data, 52)[0] == 3  # FERRY_MODE_AGGREGATE
    a = data[AREA:AREA + 8192]
    assert a[:8] == b"FERRYAGG"
    version, npools, aggregated, native, worker, crossings, fibers, switches, carriers, groups = \
        struct.unpack_from("<II8Q", a, 8)
    stats = engine_stats(r.stderr)
    assert (version, npools, carriers, groups) == (1, 1, 1, 1)
    assert aggregated == stats["aggregated"] > 0
    assert worker == stats["worker"] > 0
    assert fibers == 1 and switches > 0
    assert crossings >= stats["enters"]
    submitted, completed, enters = struct.unpack_from("<3Q", a, 80)
    assert submitted == completed == aggregated and enters == stats["enters"]
    batches = struct.unpack_from("<12Q", a, 80 + 64)
    assert sum(batches) > 0
    entries, concurrency, cpus, sqpoll_cpu, priority, wait, limit, timeout = \
        struct.unpack_from("<IIQiiIIQ", a, 80 + 160)
    assert (entries, concurrency, cpus, sqpoll_cpu, priority, wait, limit, timeout) == \
        (128, 2, 0, -1, 3, 2, 8, 50000)
    route = a[2128:2128 + 512]
    assert route[0] == 0 and route[1] == 0 and route[61] == 0xFE and route[39] == 0xFF
