"""bench/pe_cluster: the thesis's Table 6.2 for Windows programs, under wine.

Per-call cost of NtYieldExecution for batch sizes 1, 2, 4, ..., 1024:
  wine     the call under plain wine (no Ferry)
  native   the call made directly, under `ferry run -p count` (ferry.dll's
           counting trampoline on the way): what the pool is compared with
  raw      B calls per ferry_submit (FERRY_WAIT_ALL) on a pool of WORKERS of
           ferry.dll's worker threads, each running its calls one by one
  nop      as raw with FERRY_NR_NOP, which makes no system call: the pool's
           own cost per call (rings, wakes, completions), the floor under raw
  linux    sched_yield(2) from a Linux program: the kernel's part of `wine`
Each figure is the median over interleaved rounds of the best of 5 runs.
Break-even: the smallest batch whose per-call cost is at most native's.

What is wine's: a Windows system call under wine is wine's syscall dispatcher
(the switch from PE to Unix code and back) plus the Linux call it makes; the
table shows `linux` next to `wine`, so their difference is wine's own.  A
worker pays the whole of that per call: a raw batch moves the calls off the
program's thread, it does not make them cheaper.  The kernel's own batched
path (overlapped I/O completed through an I/O completion port) is not
measured here (ferry.dll does not use it yet).

Ends with: RESULT pe_raw_ratio_1024=... pe_raw_break_even=... native_ns=...
(then the fiber figures, pe_fiber_ratio_1024 and pe_break_even, once the
fiber engine exists: see FIBER below).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pe_cluster_fibers import column as fiber_column
from pe_wine import session

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
BATCHES = [1 << i for i in range(11)]
CALLS = 20_000                      # per figure and run (about: batches round down)
WORKERS = int(os.environ.get("WORKERS", "1"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
# The fiber columns (issue 18, helper O): a function (exe, env, tmp) -> {batch: ns}
# measuring B fibers on one carrier each calling NtYieldExecution, or None.
FIBER = fiber_column


def break_even(costs, native):
    for b in BATCHES:
        if costs[b] <= native:
            return b
    return None


def fmt(v):
    return "none" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def main():
    missing = [t for t in ("wine", "wineserver", "x86_64-w64-mingw32-gcc", "gcc") if not shutil.which(t)]
    if missing or not (ROOT / "shim" / "build" / "ferry.dll").is_file():
        print(f"SKIP pe_cluster: needs {', '.join(missing) or 'ferry.dll (make shim)'}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pe_cluster.") as tmp:
        tmp = Path(tmp)
        exe, linux = tmp / "pe_cluster.exe", tmp / "pe_cluster_linux"
        subprocess.run(["x86_64-w64-mingw32-gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "pe_cluster.c")],
                       check=True)
        subprocess.run(["gcc", "-O2", "-o", str(linux), str(ROOT / "bench" / "pe_cluster_linux.c")], check=True)
        with session(tmp) as env:
            return measure(exe, linux, env, tmp)


def run(argv, env):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed ({r.returncode}): {r.stderr}")
    return r.stdout


def table(out):
    return {int(b): float(ns) for b, ns in (line.split() for line in out.splitlines())}


def measure(exe, linux, env, tmp):
    under = [FERRY, "run", "-p", "count", "-o", str(tmp / "run"), "--", str(exe)]
    runs = {k: [] for k in ("wine", "native", "linux")}
    cols = {k: {b: [] for b in BATCHES} for k in ("raw", "nop")}
    for _ in range(ROUNDS):
        shutil.rmtree(tmp / "run", ignore_errors=True)
        runs["wine"].append(float(run(["wine", str(exe), "native", str(CALLS)], env)))
        runs["native"].append(float(run(under + ["native", str(CALLS)], env)))
        runs["linux"].append(float(run([str(linux), str(CALLS)], env)))
        for kind in cols:
            for b, ns in table(run(under + ["raw", str(CALLS), str(WORKERS), "yield" if kind == "raw" else "nop"],
                                   env)).items():
                cols[kind][b].append(ns)
    med = {k: statistics.median(v) for k, v in runs.items()}
    col = {k: {b: statistics.median(v[b]) for b in BATCHES} for k, v in cols.items()}
    fiber = FIBER(exe, env, tmp) if FIBER else None
    native = med["native"]
    print(f"NtYieldExecution, ns per call (median of {ROUNDS} interleaved rounds, each best of 5); "
          f"pool of {WORKERS} worker(s)")
    print(f"wine {med['wine']:.1f} (of which Linux sched_yield {med['linux']:.1f}, wine's own "
          f"{med['wine'] - med['linux']:.1f}); native under ferry.dll {native:.1f}")
    head = f"{'batch':>6} {'native':>9} {'raw':>9} {'ratio':>6} {'nop':>9}"
    print(head + (f" {'fiber':>9} {'ratio':>6}" if fiber else ""))
    for b in BATCHES:
        line = f"{b:>6} {native:>9.1f} {col['raw'][b]:>9.1f} {col['raw'][b] / native:>6.2f} {col['nop'][b]:>9.1f}"
        if fiber:
            line += f" {fiber[b]:>9.1f} {fiber[b] / native:>6.2f}"
        print(line)
    ratio, be = col["raw"][1024] / native, break_even(col["raw"], native)
    print(f"   raw: {ratio:.2f} of native at 1024, break-even at {be if be else 'none up to 1024'}; "
          f"the pool's own cost at 1024: {col['nop'][1024]:.1f} ns per call")
    print("thesis (Table 6.2, Windows kernel): 0.42 at 1024, break-even 17")
    result = f"RESULT pe_raw_ratio_1024={fmt(ratio)} pe_raw_break_even={fmt(be)} native_ns={native:.1f}"
    if fiber:
        result += (f" pe_fiber_ratio_1024={fmt(fiber[1024] / native)} "
                   f"pe_break_even={fmt(break_even(fiber, native))}")
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
