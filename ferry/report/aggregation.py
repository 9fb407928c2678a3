"""The Aggregation part of a report: calls of fibers aggregated, run natively or by
workers, kernel crossings saved, per pool its settings, traffic, queue depth, wait
time and batch sizes, and per carrier its fibers, switches and calls; as text (rich),
CSV rows (`--by pool`, `--by carrier`) and HTML. The numbers come from the model's
"aggregation" entry (ferry.aggdata)."""
from rich.text import Text

from ..profiles.aggregate import write_duration

BATCH_BUCKETS = 12


def of(model):
    """The model's aggregation entry, or None when no process aggregated calls."""
    return model.get("aggregation")


def bucket_label(i):
    """Batch sizes of histogram bucket i: 2^i .. 2^(i+1)-1, the last one open."""
    lo = 1 << i
    if i == BATCH_BUCKETS - 1:
        return f">={lo}"
    return str(lo) if i == 0 else f"{lo}-{2 * lo - 1}"


def percent(fraction):
    return "-" if fraction is None else f"{100 * fraction:.2f}%"


def _cpus(cpus):
    return ",".join(map(str, cpus)) if cpus else "any"


def settings_text(p):
    """A pool's settings in a few words: 'entries 256, wait some(16, 100us), cpus 1, ...'."""
    wait = p["wait"]
    if wait == "some":
        wait = f"some({p['wait_limit']}, {write_duration(p['wait_timeout_ns'])})"
    parts = [f"entries {p['entries']}", f"wait {wait}",
             f"concurrency {p['concurrency'] or 'default'}", f"cpus {_cpus(p['cpus'])}"]
    if p["sqpoll_cpu"] >= 0:
        parts.append(f"sqpoll cpu {p['sqpoll_cpu']}")
    if p["priority"]:
        parts.append(f"priority {p['priority']}")
    if p.get("mixed"):
        parts.append("(differs between processes; first shown)")
    return ", ".join(parts)


def pool_label(p):
    return f"{p['index']} {p['name']}" if p.get("name") else str(p["index"])


def depth(p):
    return "-" if p.get("mean_depth") is None else f"{p['mean_depth']:.1f}"


def summary(agg):
    """One paragraph: where the fibers' calls went, and the crossings they cost. Savings
    and avoided context switches are claimed only when calls were aggregated, and never
    as a negative saving."""
    n = agg["processes"]
    switches = _n(agg["switches"], "fiber switch", "fiber switches")
    if agg["aggregated"] and agg["switches"]:
        switches += " (kernel context switches avoided)"
    return (f"{agg['calls']} calls of fibers ({n} process{'es' if n != 1 else ''}, "
            f"{agg['groups']} group{'s' if agg['groups'] != 1 else ''}): "
            f"{agg['aggregated']} aggregated, {agg['native']} native, {agg['worker']} by workers; "
            f"{crossings_text(agg)}; "
            f"{_n(agg['fibers'], 'fiber')} on {_n(agg['carriers'], 'carrier')}"
            f"{per_carrier(agg)}, {switches}")


def crossings_text(agg):
    """The kernel crossings, and what they saved against one crossing per call (natively)."""
    crossings, calls = agg["crossings"], agg["calls"]
    text = _n(crossings, "kernel crossing")
    if not agg["aggregated"]:
        lone = agg.get("carrier_list") and all(c["peak"] <= 1 for c in agg["carrier_list"])
        why = "; no carrier ever had two fibers, and a thread alone in its process makes its " \
              "calls natively" if lone else ""
        return f"{text}, none saved (no call was aggregated{why})"
    if crossings > calls:
        return f"{text}, {crossings - calls} more than the calls make natively (none saved)"
    return f"{text}, {percent(agg['crossings_saved'])} saved"


def unfinished(agg):
    """[(pool, calls)] of the pools with calls submitted and no completion recorded."""
    return [(p, p["submitted"] - p["completed"]) for p in agg["pools"]
            if p["submitted"] > p["completed"]]


def unfinished_notes(agg):
    return [f"pool {pool_label(p)}: {n} submitted call{'s' * (n != 1)} with no completion "
            "recorded (still in flight when the process ended, or completed after the engine "
            "last wrote its counts)" for p, n in unfinished(agg)]


def unused_note(model):
    """A note for a run in an aggregating profile where no process created a group (so
    the engine aggregated nothing), or None."""
    profile = (model.get("info") or {}).get("profile") or {}
    if profile.get("mode") != "aggregate" or of(model):
        return None
    return unused_text(profile.get("name") or "aggregate", profile.get("threads") == "fibers",
                       windows=ran_under_wine(model.get("info")))


def ran_under_wine(info):
    """Whether the program of a run (its info.json) was a Windows one, run under wine."""
    return ((info or {}).get("program") or {}).get("how") == "wine"


def unused_text(profile_name, threads_fibers=False, windows=False):
    """Why an aggregating profile aggregated nothing (also said at the end of `ferry run`).
    `windows`: the program ran under wine, whose threads `-p fibers` cannot take."""
    if windows:
        why = ("a Windows program's calls are aggregated for the fibers it makes through "
               "ferry.dll's API (docs/aggregate.md, the Windows engine); its own threads "
               "cannot run as fibers")
    elif threads_fibers:
        why = ("threads become fibers only in processes that were enabled and could set up "
               "io_uring (the report's processes say which were enabled)")
    else:
        why = "`-p fibers` runs a program's own threads as fibers"
    return (f"profile {profile_name}: no process used the aggregation engine (none created a "
            f"group), so no call was aggregated and calls were only counted; {why}")


def per_carrier(agg):
    if not agg["carriers"]:
        return ""
    return f" ({agg['fibers'] / agg['carriers']:.1f} per carrier)"


def _n(count, one, many=None):
    return f"{count} {one if count == 1 else many or one + 's'}"


def carriers(agg):
    """The carriers of every process, each with its pid; none in a run recorded before
    the carrier table existed."""
    return agg.get("carrier_list", [])


def several_carriers(agg):
    """Whether a process ran more than one carrier (only then is the table worth a look):
    carriers are numbered from 0 in each process."""
    return any(c["index"] for c in carriers(agg))


def carrier_columns(agg):
    """[(title, key)] of the carrier table: the pid only when processes could be confused."""
    pid = [("pid", "pid")] if agg["processes"] > 1 else []
    return pid + [("carrier", "index"), ("fibers", "fibers"), ("peak", "peak"),
                  ("switches", "switches"), ("crossings", "crossings"),
                  ("completed calls", "completed")]


def carrier_rows(agg):
    keys = [k for _, k in carrier_columns(agg)]
    return [[c[k] for k in keys] for c in carriers(agg)]


def used_buckets(agg):
    """Buckets up to the largest batch size seen (at least one)."""
    last = max((i for p in agg["pools"] for i, n in enumerate(p["batches"]) if n), default=0)
    return range(last + 1)


# --- text -------------------------------------------------------------------------------

def text(model, make_table):
    """Rich renderables of the section, or [] without aggregation; `make_table(title,
    columns)` draws tables in the look of the rest of the report."""
    agg = of(model)
    if not agg:
        return []
    out = [Text("aggregation", style="bold"), Text(summary(agg))]
    if several_carriers(agg):
        out.append(carrier_table(agg, make_table))
    if not agg["pools"]:
        return out
    t = make_table("pools", [("pool", "left"), ("submitted", "right"), ("completed", "right"),
                             ("enters", "right"), ("mean depth", "right"),
                             ("max depth", "right"), ("wait s", "right"), ("settings", "left")])
    for p in agg["pools"]:
        t.add_row(pool_label(p), str(p["submitted"]), str(p["completed"]), str(p["enters"]),
                  depth(p), str(p["max_depth"]), f"{p['wait_ns'] / 1e9:.6f}", settings_text(p))
    out.append(t)
    out += [Text(note, style="yellow") for note in unfinished_notes(agg)]
    buckets = used_buckets(agg)
    h = make_table("batch sizes", [("pool \\ calls per enter", "left")]
                   + [(bucket_label(i), "right") for i in buckets])
    for p in agg["pools"]:
        h.add_row(pool_label(p), *(str(p["batches"][i]) for i in buckets))
    out.append(h)
    return out


def carrier_table(agg, make_table):
    t = make_table("carriers", [(title, "right") for title, _ in carrier_columns(agg)])
    for row in carrier_rows(agg):
        t.add_row(*map(str, row))
    return t


def carrier_text(model, make_table):
    """`--by carrier`: the summary and the carrier table, or [] when no carrier was recorded."""
    agg = of(model)
    if not agg or not carriers(agg):
        return []
    return [Text("aggregation", style="bold"), Text(summary(agg)), carrier_table(agg, make_table)]


# --- CSV (--by pool, --by carrier) --------------------------------------------------------

RUN_COLUMNS = ("aggregated", "native", "worker", "calls", "crossings", "crossings_saved",
               "fibers", "switches", "carriers", "groups", "processes")
POOL_COLUMNS = ("entries", "concurrency", "cpus", "sqpoll_cpu", "priority", "wait",
                "wait_limit", "wait_timeout_ns", "mixed", "submitted", "completed", "enters",
                "mean_depth", "max_depth", "wait_ns")


def csv_header():
    return (["pool", "name", *POOL_COLUMNS, *(f"batch_{i}" for i in range(BATCH_BUCKETS)),
             *RUN_COLUMNS])


def _pool_value(p, k):
    if k == "cpus":
        return ";".join(map(str, p["cpus"]))
    if k == "mean_depth":
        return None if p["mean_depth"] is None else round(p["mean_depth"], 2)
    return p[k]


def csv_rows(model):
    """A row "all" with the run's totals (pool counters summed), then a row per pool."""
    agg = of(model)
    if not agg:
        return []
    pools = agg["pools"]
    summed = {k: sum(p[k] for p in pools)
              for k in ("submitted", "completed", "enters", "wait_ns", "depth_sum")}
    if summed["enters"]:
        summed["mean_depth"] = round(summed["depth_sum"] / summed["enters"], 2)
    first = ["all", None] + [summed.get(k) for k in POOL_COLUMNS]
    first[POOL_COLUMNS.index("max_depth") + 2] = max((p["max_depth"] for p in pools), default=0)
    first += [sum(p["batches"][i] for p in pools) for i in range(BATCH_BUCKETS)]
    saved = agg["crossings_saved"]
    first += [round(saved, 6) if k == "crossings_saved" and saved is not None else agg[k]
              for k in RUN_COLUMNS]
    rows = [first]
    for p in pools:
        rows.append([p["index"], p.get("name")] + [_pool_value(p, k) for k in POOL_COLUMNS]
                    + list(p["batches"]) + [None] * len(RUN_COLUMNS))
    return rows


CARRIER_COLUMNS = ("fibers", "peak", "switches", "crossings", "completed")
CARRIER_CSV_HEADER = ["pid", "carrier", *CARRIER_COLUMNS]


def carrier_csv_rows(model):
    """A row per carrier of every process; the pid always: the columns of a CSV do not
    depend on the run."""
    agg = of(model)
    return [[c["pid"], c["index"], *(c[k] for k in CARRIER_COLUMNS)]
            for c in (carriers(agg) if agg else [])]
