"""The plots of the HTML report, drawn with matplotlib (Agg, no display) as PNG bytes:
calls per syscall, latency distributions, timeline, aggregation batch sizes, fibers and
switches per carrier."""
import io
from datetime import datetime

from . import rows as R

WIDTH = 9.0        # inches; at DPI this is the image width in pixels / 100
DPI = 100
TOP_SYSCALLS = 30  # bars in the calls plot
TOP_LATENCY = 6    # syscalls whose latency histogram is drawn
TOP_COLORS = 9     # syscalls with their own color in the timeline
TICKS_MAX = 5000   # up to this many events, each also gets a tick mark
OK, ERR = "#4c78a8", "#e45756"


def _figure(height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(WIDTH, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def calls_per_syscall(model):
    """Horizontal bars: calls per syscall, the failed part in red; None if no calls."""
    rows = [r for r in R.rows(model, "syscall", "calls") if r["calls"]][:TOP_SYSCALLS]
    if not rows:
        return None
    rows.reverse()  # barh draws bottom up: most calls on top
    fig = _figure(0.8 + 0.28 * len(rows))
    ax = fig.add_subplot()
    names = [r["name"] for r in rows]
    ok = [r["calls"] - r["errors"] for r in rows]
    err = [r["errors"] for r in rows]
    ax.barh(names, ok, color=OK, label="succeeded")
    ax.barh(names, err, left=ok, color=ERR, label="failed")
    for y, r in enumerate(rows):
        ax.annotate(f" {r['calls']}", (r["calls"], y), va="center", fontsize=8)
    ax.set_xlabel("calls")
    ax.margins(x=0.08)
    ax.spines[["top", "right"]].set_visible(False)
    if any(err):
        ax.legend(loc="lower right", frameon=False)
    title = "calls per syscall"
    if len(model["syscalls"]) > TOP_SYSCALLS:
        title += f" (the {TOP_SYSCALLS} most called)"
    ax.set_title(title, loc="left")
    return _png(fig)


def _ns_axis(ax):
    ticks = [1, 1e3, 1e6, 1e9]
    ax.set_xscale("log", base=10)
    ax.set_xticks(ticks, ["1 ns", "1 µs", "1 ms", "1 s"])
    ax.set_xlim(1, 2 ** 32)


def latency(model):
    """One histogram per syscall that took the most time: hist[i] counts calls between
    2^i and 2^(i+1) ns; bars over those spans on a log axis. None if no histograms."""
    rows = [r for r in R.rows(model, "syscall", "time") if any(r.get("hist") or ())]
    rows = rows[:TOP_LATENCY]
    if not rows:
        return None
    cols = 2 if len(rows) > 1 else 1
    nrows = (len(rows) + cols - 1) // cols
    fig = _figure(0.4 + 2.1 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, rows):
        hist = r["hist"]
        lefts = [2.0 ** i for i in range(len(hist))]
        ax.bar(lefts, hist, width=lefts, align="edge", color=OK, edgecolor="white", linewidth=0.5)
        _ns_axis(ax)
        n = r["calls"]
        ax.set_title(f"{r['name']}: {n} call{'s' if n != 1 else ''}, "
                     f"avg {r['avg_ns'] / 1e3:.2f} µs", loc="left", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle("latency distribution (calls per duration bucket)", x=0.01, ha="left")
    fig.tight_layout()
    return _png(fig)


def _when(text):
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _merge(spans, gap):
    """(start, width) spans with those closer than `gap` (under a pixel) joined: many
    thousand calls draw as fast as a few, and look the same."""
    out = []
    for start, width in sorted(spans):
        if out and start <= out[-1][0] + out[-1][1] + gap:
            last_start, last_width = out[-1]
            out[-1] = (last_start, max(last_width, start + width - last_start))
        else:
            out.append((start, width))
    return out


def _event_timeline(model, events):
    lanes = sorted({(e["pid"], e["tid"]) for e in events})
    lane_of = {lane: y for y, lane in enumerate(lanes)}
    by_time = [r["name"] for r in R.rows(model, "syscall", "time")]
    named = [n for n in by_time if any(e["name"] == n for e in events)][:TOP_COLORS]
    palette = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#eeca3b", "#9d755d", "#72b7b2",
               "#ff9da6", "#bab0ac"]
    color = {n: palette[i] for i, n in enumerate(named)}
    fig = _figure(1.0 + 0.45 * len(lanes))
    ax = fig.add_subplot()
    end = max(e["start_ns"] + e["dur_ns"] for e in events) / 1e6 or 1.0
    spans, failed = {}, {}
    for e in events:                       # one pass: spans per lane and syscall
        lane = lane_of[(e["pid"], e["tid"])]
        spans.setdefault((lane, e["name"]), []).append((e["start_ns"] / 1e6, e["dur_ns"] / 1e6))
        if e.get("result") is not None and -4095 <= e["result"] < 0:
            failed.setdefault(lane, []).append(e["start_ns"] / 1e6)
    ticks = len(events) <= TICKS_MAX
    for (y, name), bars in spans.items():
        c = color.get(name, "#999999")
        ax.broken_barh(bars if ticks else _merge(bars, end / 2000), (y - 0.35, 0.7), color=c)
        if ticks:   # a tick per call, so calls too short for a pixel still show
            ax.scatter([s for s, _ in bars], [y] * len(bars), marker="|", s=120, color=c)
    for y, starts in failed.items():
        ax.scatter(starts, [y + 0.45] * len(starts), marker="v", s=18, color=ERR)
    ax.set_yticks(range(len(lanes)), [f"pid {p}" + (f" tid {t}" if t != p else "")
                                      for p, t in lanes])
    ax.set_ylim(-0.8, len(lanes) - 0.2)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.02)
    ax.set_xlabel("ms since the start of the run")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=color[n], label=n) for n in named]
    if len(color) < len({e["name"] for e in events}):
        handles.append(Patch(color="#999999", label="other"))
    if any(e.get("result") is not None and -4095 <= e["result"] < 0 for e in events):
        handles.append(Line2D([], [], linestyle="", marker="v", color=ERR, label="failed"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
              fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(f"timeline: {len(events)} recorded calls", loc="left")
    return _png(fig)


def _process_timeline(model):
    procs = model["processes"]
    info = model.get("info") or {}
    starts = [_when(p.get("start")) for p in procs]
    known = [s for s in starts if s is not None]
    try:   # the first process's start is more precise than the run's (whole seconds)
        t0 = min(known) if known else _when(info.get("start"))
    except TypeError:      # one time with a zone, one without
        t0 = None
    fig = _figure(1.0 + 0.4 * len(procs))
    ax = fig.add_subplot()
    for y, (p, s) in enumerate(zip(procs, starts)):
        try:
            left = (s - t0).total_seconds() * 1e3 if s is not None and t0 is not None else 0.0
        except TypeError:   # one time with a zone, one without
            left = 0.0
        width = (p.get("duration_s") or 0) * 1e3
        failed = p.get("state") in ("killed", "unfinished") or p.get("enabled") is False
        ax.broken_barh([(left, width)], (y - 0.35, 0.7), color=ERR if failed else OK)
        ax.annotate(f" {R.program(p)} ({R.state_text(p)})", (left + width, y),
                    va="center", fontsize=8)
    ax.set_yticks(range(len(procs)), [f"pid {p['pid']}" for p in procs])
    ax.invert_yaxis()
    ax.margins(x=0.2)
    ax.set_xlim(left=0)
    ax.set_xlabel("ms since the first process started")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("processes (no event trace recorded)", loc="left")
    return _png(fig)


def batch_sizes(model):
    """Bars per batch-size bucket (calls submitted per io_uring_enter), one color per pool;
    None when no pool submitted a batch."""
    from .aggregation import bucket_label, pool_label, used_buckets
    agg = model.get("aggregation")
    pools = [p for p in (agg or {}).get("pools", []) if any(p["batches"])]
    if not pools:
        return None
    buckets = list(used_buckets(agg))
    fig = _figure(3.2)
    ax = fig.add_subplot()
    width = 0.8 / len(pools)
    palette = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#eeca3b", "#9d755d", "#72b7b2",
               "#ff9da6"]
    for k, p in enumerate(pools):
        ax.bar([i - 0.4 + width * (k + 0.5) for i in buckets], [p["batches"][i] for i in buckets],
               width=width, color=palette[k % len(palette)], label=f"pool {pool_label(p)}")
    ax.set_xticks(buckets, [bucket_label(i) for i in buckets])
    ax.set_xlabel("calls submitted per io_uring_enter")
    ax.set_ylabel("enters")
    ax.spines[["top", "right"]].set_visible(False)
    if len(pools) > 1:
        ax.legend(frameon=False, fontsize=8)
    ax.set_title("batch sizes", loc="left")
    return _png(fig)


def carriers(model):
    """Fibers and switches per carrier, side by side (switches outnumber fibers by orders of
    magnitude, so they get an axis of their own); None without carriers."""
    from .aggregation import carriers as carrier_list
    agg = model.get("aggregation")
    cs = carrier_list(agg) if agg else []
    if not cs:
        return None
    several = agg["processes"] > 1
    labels = [f"{c['pid']}/{c['index']}" if several else str(c["index"]) for c in cs]
    fig = _figure(2.6)
    for k, (key, color) in enumerate((("fibers", OK), ("switches", "#f58518"))):
        ax = fig.add_subplot(1, 2, k + 1)
        ax.bar(range(len(cs)), [c[key] for c in cs], color=color)
        ax.set_xticks(range(len(cs)), labels, rotation=90 if len(cs) > 16 else 0, fontsize=8)
        ax.set_xlabel("pid/carrier" if several else "carrier")
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_title(key, loc="left")
    return _png(fig)


def timeline(model):
    """Recorded calls per pid/tid over time; without events, one bar per process lifetime.
    None if there is nothing to draw."""
    events = model.get("events") or []
    if events:
        return _event_timeline(model, events)
    if model["processes"]:
        return _process_timeline(model)
    return None
