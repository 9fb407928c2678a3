"""The aggregation area of a process file (struct ferry_agg_area of
shim/src/aggarea.h, the `aggregate` member of the process file's header, laid
out as the headers say through ferry.base.layouts), and the run model's
"aggregation" entry built from the areas of every process.

An area that is all zero belongs to a process that never created a group.
"""
from .base.layouts import constant, constants, layout

AREA = layout("ferry_agg_area")
POOL = layout("ferry_agg_pool_row")
CARRIER = layout("ferry_agg_carrier_row")
_HEADER = layout("ferry_proc_header")
OFFSET = _HEADER.offset("aggregate")         # in the process file's header
SIZE = _HEADER.span("aggregate")
MAGIC = constant("FERRY_AGG_MAGIC")
VERSION = constant("FERRY_AGG_VERSION")
MAX_POOLS = AREA.count("pools")
MAX_CARRIERS = AREA.count("carrier")         # carrier rows; carriers beyond them count only in the totals
BATCH_BUCKETS = POOL.count("batches")
_WAIT = {v: k.lower() for k, v in constants("FERRY_WAIT_").items()}      # enum ferry_wait
WAITS = tuple(_WAIT[i] for i in range(len(_WAIT)))

COUNTERS = ("aggregated", "native", "worker", "crossings", "fibers", "switches", "carriers",
            "groups")
POOL_COUNTERS = ("submitted", "completed", "enters", "max_depth", "wait_ns", "depth_sum")
CARRIER_COUNTERS = ("fibers", "switches", "crossings", "completed", "peak")
POOL_SETTINGS = ("entries", "concurrency", "cpus", "sqpoll_cpu", "priority", "wait",
                 "wait_limit", "wait_timeout_ns")


class AggAreaError(ValueError):
    """The area is neither empty nor a valid aggregation area: what is wrong."""


def _cpus(mask):
    return [i for i in range(64) if mask >> i & 1]


def _pool(row, i):
    wait = row["wait"]
    pool = {"index": i, "name": None, "entries": row["entries"], "concurrency": row["concurrency"],
            "cpus": _cpus(row["cpus"]), "sqpoll_cpu": row["sqpoll_cpu"], "priority": row["priority"],
            "wait": WAITS[wait] if wait < len(WAITS) else f"?{wait}", "wait_limit": row["wait_limit"],
            "wait_timeout_ns": row["wait_timeout_ns"], "mixed": False}
    pool.update((k, row[k]) for k in POOL_COUNTERS)
    pool["batches"] = list(row["batches"])
    return pool


def parse(header):
    """The aggregation record of one process from its file's header bytes, or None when the
    process never created a group; AggAreaError when the area is damaged."""
    area = header[OFFSET:OFFSET + SIZE]
    if len(area) < SIZE:
        raise AggAreaError("truncated aggregation area")
    if area[:len(MAGIC)] != MAGIC:
        if any(area[:16]):
            raise AggAreaError("corrupt aggregation area (bad magic)")
        return None
    a = AREA.unpack(area)
    if a["version"] != VERSION:
        raise AggAreaError(f"unsupported aggregation area version {a['version']}")
    if a["npools"] > MAX_POOLS:
        raise AggAreaError(f"corrupt aggregation area ({a['npools']} pools, at most {MAX_POOLS})")
    # the carrier table is empty in an area written before it existed (slots 0)
    if a["carrier_slots"] > MAX_CARRIERS:
        raise AggAreaError(f"corrupt aggregation area ({a['carrier_slots']} carrier slots, at most "
                           f"{MAX_CARRIERS})")
    record = {k: a[k] for k in COUNTERS}
    record["pools"] = [_pool(row, i) for i, row in enumerate(AREA.rows(area, 0, "pools", POOL, a["npools"]))]
    record["carrier_list"] = [{"index": i, **{k: row[k] for k in CARRIER_COUNTERS}}
                              for i, row in enumerate(AREA.rows(area, 0, "carrier", CARRIER, a["carrier_slots"]))]
    return derive(record)


def derive(record):
    """Add the numbers the reports show: calls, crossings saved, mean queue depth."""
    calls = record["aggregated"] + record["native"] + record["worker"]
    record["calls"] = calls
    record["crossings_saved"] = 1 - record["crossings"] / calls if calls else None
    for p in record["pools"]:
        p["mean_depth"] = p["depth_sum"] / p["enters"] if p["enters"] else None
    return record


def _settings(pool):
    return tuple(tuple(pool[k]) if isinstance(pool[k], list) else pool[k] for k in POOL_SETTINGS)


def summarize(processes, profile_pools=()):
    """The run's "aggregation" entry from [(pid, record)] of its processes (a None record:
    a process without a group), or None if no process aggregated. Pools are matched by
    index; `profile_pools` [(name, settings tuple)] names a pool whose settings are the
    profile's (a group made by the C API with settings of its own stays unnamed).
    Carriers are not merged: each belongs to one process, so each keeps its pid."""
    processes = [(pid, r) for pid, r in processes if r]
    if not processes:
        return None
    records = [r for _, r in processes]
    total = {k: sum(r[k] for r in records) for k in COUNTERS}
    pools = {}
    for r in records:
        for p in r["pools"]:
            mine = pools.get(p["index"])
            if mine is None:
                pools[p["index"]] = dict(p, batches=list(p["batches"]))
                continue
            for k in POOL_COUNTERS:
                mine[k] = max(mine[k], p[k]) if k == "max_depth" else mine[k] + p[k]
            mine["batches"] = [a + b for a, b in zip(mine["batches"], p["batches"])]
            mine["mixed"] = mine["mixed"] or _settings(mine) != _settings(p)
    for i, p in pools.items():
        if i < len(profile_pools) and not p["mixed"] and profile_pools[i][1] == _settings(p):
            p["name"] = profile_pools[i][0]
    total["processes"] = len(records)
    total["pools"] = [pools[i] for i in sorted(pools)]
    total["carrier_list"] = [dict(c, pid=pid) for pid, r in processes for c in r["carrier_list"]]
    return derive(total)


def any_group(run_dir):
    """Whether a process of the run in `run_dir` created an aggregation group (its area has
    the magic); reads only that much of each process record."""
    from pathlib import Path
    from . import procfile
    for path in (Path(run_dir) / "proc").glob("*.ferry"):
        try:
            with open(path, "rb") as f:
                for base in procfile.record_offsets(f):
                    f.seek(base + OFFSET)
                    if f.read(len(MAGIC)) == MAGIC:
                        return True
        except (OSError, procfile.ProcFileError):
            continue
    return False


def profile_pools(profile):
    """[(name, settings tuple as _settings gives it)] of a Profile in mode aggregate."""
    if profile is None or profile.mode != "aggregate":
        return []
    return [(p.name, (p.entries, p.concurrency, p.cpus, -1 if p.sqpoll is None else p.sqpoll,
                      p.priority, p.wait, p.wait_limit, p.wait_timeout_ns))
            for p in profile.agg_pools]
