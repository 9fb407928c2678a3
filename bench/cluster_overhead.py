"""bench/cluster_overhead: the thesis's Table 6.2 on this machine.

Per-call cost of a no-op system call for batch sizes 1, 2, 4, ..., 1024:
  native  getppid, one `syscall` per call
  floor   B io_uring NOPs per io_uring_enter with liburing alone (no Ferry code): the
          kernel's own cost per operation, the floor under raw
  raw     B io_uring NOPs per ferry_submit (one io_uring_enter, WaitAll), same core
  fiber   B fibers on one carrier, each calling sched_yield() through the rewritten
          libc; the shim routes it to an io_uring NOP and parks the fiber; the
          carrier submits the B calls in one io_uring_enter
  remote  as raw, on a pool whose SQPOLL thread is pinned to the other core
Each figure is the median over interleaved rounds of the best of 5 runs
(bench/build/cluster_overhead prints one).  Break-even: the smallest batch
whose per-call cost is at most the native call's.

Then where a fiber call's time goes at batch 1024: `perf record` (cpu-clock
samples, kernel included) of a long fiber run, each sample put in one part of
the path by its symbol (the shim's symbols by the object file that defines
them), each part's share times the measured per-call cost.  Needs perf and
the right to sample the kernel (root, or perf_event_paranoid <= 1); without
them the breakdown is skipped and says why.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
PROGRAM = ROOT / "bench" / "build" / "cluster_overhead"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
BATCHES = [1 << i for i in range(11)]
MODES = ["native", "floor", "raw", "fiber", "remote"]
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def measure(mode, batch, env):
    out = subprocess.run([str(PROGRAM), mode, str(batch)], capture_output=True, text=True,
                         check=True, env=env, timeout=300).stdout
    return float(out)


# The parts of a fiber's call, in path order.  A shim function goes where its object
# file does unless named in PART_OF_FUNCTION (agg_sched.o holds several parts).
PARTS = [
    ("program", "the program's loop, libc's sched_yield and the rewritten site's trampoline"),
    ("entry", "shim entry and exit: entry.S, the C dispatch, the call's count"),
    ("route", "routing and SQE preparation (agg_route, the descriptor checks, agg_sqe)"),
    ("switch", "park, pick the next fiber, switch stacks and thread pointer"),
    ("reap", "completion reaping: CQEs read from the ring, results fixed up, fibers woken"),
    ("submit", "the carrier's round: submit and wait bookkeeping in the shim"),
    ("kernel-uring", "the kernel: io_uring's own work for each NOP (io_* functions)"),
    ("kernel-other", "the kernel: system call entry and exit, interrupts, the rest"),
    ("other", "anything else (set-up, teardown, the sampler)"),
]
PART_OF_OBJECT = {
    "entry.o": "entry", "shim.o": "entry", "store.o": "entry", "catchall.o": "entry",
    "agg_route.o": "route", "agg_group.o": "route", "agg_config.o": "route",
    "agg_stats.o": "route", "agg_switch.o": "switch", "agg_fiber.o": "switch",
    "agg_threads.o": "switch", "agg_runq.o": "switch", "agg_sched.o": "submit",
}
PART_OF_FUNCTION = {
    "agg_sqe": "route", "agg_sqe_room": "route", "agg_post": "route", "agg_post_quiet": "route",
    "agg_park": "switch", "rr_pick": "switch", "rr_push": "switch", "run": "switch",
    "agg_carrier_tls": "switch", "agg_carrier_loop": "switch",
    "reap": "reap", "reap_all": "reap", "complete": "reap", "agg_wake": "reap",
    "agg_fixup": "reap",
}


def shim_symbols():
    """function name -> part, from the shim's object files."""
    parts = {}
    for obj in (ROOT / "shim" / "build").glob("*.o"):
        part = PART_OF_OBJECT.get(obj.name)
        if not part:
            continue
        out = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "tT":
                parts[f[2].split(".")[0]] = part
    parts.update(PART_OF_FUNCTION)
    return parts


def part_of(dso, kind, sym, parts):
    if kind == "[k]":
        return "kernel-uring" if sym.startswith(("io_", "__io_")) else "kernel-other"
    if dso == "libferry.so":
        return parts.get(sym.split(".")[0], "other")
    if dso in ("cluster_overhead", "libc.so.6"):
        return "program"
    return "other"


def breakdown(env, per_call_ns):
    """Lines of the fiber path's breakdown at batch 1024, or one line saying why none."""
    if not shutil.which("perf"):
        return ["breakdown: skipped, perf is not installed (apt install linux-perf)"]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.run(["perf", "record", "-q", "-F", "20000", "-o", data, "--",
                              str(PROGRAM), "fiber", "1024", "4000000"],
                             capture_output=True, text=True, env=env, timeout=600)
        if rec.returncode != 0:
            return [f"breakdown: skipped, perf record failed: {rec.stderr.strip().splitlines()[-1:]}"]
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym"],
                             capture_output=True, text=True, timeout=300).stdout
    parts = shim_symbols()
    share = {p: 0.0 for p, _ in PARTS}
    kernel_seen = False
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(\[[k.]\])\s+(\S+)", line)
        if m:
            pct, dso, kind, sym = float(m[1]), m[2], m[3], m[4]
            kernel_seen |= kind == "[k]"
            share[part_of(dso, kind, sym, parts)] += pct
    total = sum(share.values())
    if not total:
        return ["breakdown: skipped, perf recorded no samples"]
    lines = [f"where a fiber's call goes at batch 1024 ({per_call_ns:.1f} ns per call; perf "
             f"cpu-clock samples, shares scaled to that cost)"]
    for p, what in PARTS:
        lines.append(f"  {share[p] / total * per_call_ns:>6.1f} ns {share[p] / total * 100:>5.1f}%  "
                     f"{p:<12} {what}")
    if not kernel_seen:
        lines.append("  (no kernel samples: perf_event_paranoid forbids them; run as root)")
    return lines


def break_even(costs, native):
    for b in BATCHES:
        if costs[b] <= native[b]:
            return b
    return None


def main():
    built.make("bench", "cluster_overhead")
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(os.environ, FERRY_CACHE=os.path.join(tmp, "cache"))
        base.pop("FERRY_MODE", None)
        libc_dir = Path(tmp) / "libc"
        subprocess.run([FERRY, "instrument", "-q", LIBC, "-o", str(libc_dir)], check=True,
                       capture_output=True, env=dict(base, FERRY_CACHE=os.path.join(tmp, "icache")))
        envs = {m: base for m in MODES}
        envs["fiber"] = dict(base, LD_LIBRARY_PATH=str(libc_dir))
        runs = {m: {b: [] for b in BATCHES} for m in MODES}
        for _ in range(ROUNDS):
            for b in BATCHES:
                for m in MODES:
                    runs[m][b].append(measure(m, b, envs[m]))
        # while the rewritten libc is still there
        split = breakdown(envs["fiber"], statistics.median(runs["fiber"][1024]))
    med = {m: {b: statistics.median(runs[m][b]) for b in BATCHES} for m in MODES}
    # the native call does not depend on the batch: one figure for all
    native_all = statistics.median([x for b in BATCHES for x in runs["native"][b]])
    native = {b: native_all for b in BATCHES}

    print(f"no-op call, ns per call (median of {ROUNDS} interleaved rounds, each best of 5)")
    print(f"{'batch':>6} {'native':>9} {'floor':>9} {'raw':>9} {'ratio':>6} {'fiber':>9} {'ratio':>6} "
          f"{'remote':>9} {'ratio':>6}")
    for b in BATCHES:
        print(f"{b:>6} {native[b]:>9.1f} {med['floor'][b]:>9.1f} {med['raw'][b]:>9.1f} "
              f"{med['raw'][b] / native[b]:>6.2f} "
              f"{med['fiber'][b]:>9.1f} {med['fiber'][b] / native[b]:>6.2f} "
              f"{med['remote'][b]:>9.1f} {med['remote'][b] / native[b]:>6.2f}")
    res = {}
    for m in ("raw", "fiber", "remote"):
        res[f"{m}_ratio_1024"] = med[m][1024] / native_all
        res[f"{m}_break_even"] = break_even(med[m], native)
    for m in ("raw", "fiber", "remote"):
        be = res[f"{m}_break_even"]
        print(f"{m:>6}: {res[f'{m}_ratio_1024']:.2f} of native at 1024 "
              f"({(1 - res[f'{m}_ratio_1024']) * 100:+.0f}% saved), break-even at "
              f"{be if be else 'none up to 1024'}")
    res["raw_floor_ratio_1024"] = med["raw"][1024] / med["floor"][1024]
    res["fiber_floor_ratio_1024"] = med["fiber"][1024] / med["floor"][1024]
    print(f" floor: {med['floor'][1024]:.1f} ns per NOP at 1024 (liburing alone); raw is "
          f"{res['raw_floor_ratio_1024']:.2f}x the floor, fiber {res['fiber_floor_ratio_1024']:.2f}x")
    print("thesis (Table 6.2): 0.42 at 1024, break-even 17; remote: -49% at 1024, break-even 120")
    print()
    for line in split:
        print(line)

    def fmt(v):
        return "none" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    print(f"RESULT raw_ratio_1024={fmt(res['raw_ratio_1024'])} raw_break_even={fmt(res['raw_break_even'])} "
          f"raw_floor_ratio_1024={fmt(res['raw_floor_ratio_1024'])} "
          f"fiber_floor_ratio_1024={fmt(res['fiber_floor_ratio_1024'])} "
          f"fiber_ratio_1024={fmt(res['fiber_ratio_1024'])} fiber_break_even={fmt(res['fiber_break_even'])} "
          f"remote_ratio_1024={fmt(res['remote_ratio_1024'])}")


if __name__ == "__main__":
    main()
