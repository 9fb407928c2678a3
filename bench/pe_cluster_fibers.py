"""bench/pe_cluster_fibers: the fiber half of bench/pe_cluster (Table 6.2's shape under
wine): the per-call cost of NtYieldExecution made by N fibers on one carrier of
ferry.dll, each call routed to a pool (stored, the fiber parks, the stored calls
leave in one wake of the pool's workers when no fiber is ready), at N = 1..1024,
against the same call made natively; and what a fiber switch costs.

bench/pe_fibers.c (built here with mingw-w64) times the calls inside the program
(best of 3 runs); each figure is the median over ROUNDS interleaved runs.

`column(exe, env, tmp)` gives bench/pe_cluster.py its fiber column ({fibers: ns});
run alone it ends with: RESULT pe_fiber_ratio_1024=... pe_break_even=...
pe_fiber_switch_ns=... (ratio: aggregated over native per call at 1024 fibers;
break-even: the fewest fibers at which an aggregated call costs no more than a
native one, or "none").  The pool has WORKERS threads (1 unless set), as
pe_cluster's raw batches.

What is wine's: a worker runs the call through the same stub the program would
(wagg_native), and under wine NtYieldExecution is not a kernel crossing that a
batch could share: it is wine's own dispatch into its Unix side and a
sched_yield (~400-650 ns), paid in full by the worker for every call.  So under
wine a batch saves none of the call's cost and adds the route, the ring and the
hand-over between threads; the thesis's saving was the Windows kernel's mode
switch, which wine does not have to save.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pe_wine import session

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
FIBERS = tuple(1 << i for i in range(11))
CALLS = 40_000          # per run, spread over the fibers
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WORKERS = int(os.environ.get("WORKERS", "1"))
PROFILE = f"""mode = "aggregate"
[aggregate]
fiber_stack = "64KiB"
[aggregate.pools.main]
wait = "adaptive"
concurrency = {WORKERS}
[aggregate.route]
NtYieldExecution = "main"
"""


def build(tmp):
    exe = Path(tmp) / "pe_fibers.exe"
    subprocess.run(["x86_64-w64-mingw32-gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "pe_fibers.c")],
                   check=True)
    return exe


def _one(command, env):
    r = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({r.returncode}): {r.stderr}")
    return float(r.stdout.split()[-1])


def _runs(tmp, env, native=True, switch=True):
    """{"native": ns, "fibers": {N: ns}, "switch_ns": ns}, medians over ROUNDS."""
    tmp = Path(tmp)
    exe = build(tmp)
    profile = tmp / "pe_fibers.toml"
    profile.write_text(PROFILE)
    run = [FERRY, "run", "-p", str(profile), "-o", str(tmp / "run-fibers"), "--", str(exe)]
    natives, fibers, switches = [], {n: [] for n in FIBERS}, []
    for _ in range(ROUNDS):
        if native:
            natives.append(_one(["wine", str(exe), "native", str(CALLS)], env))
        for n in FIBERS:
            fibers[n].append(_one(run + ["fibers", str(n), str(CALLS)], env))
        if switch:
            switches.append(_one(run + ["switch", "1024", str(CALLS * 5)], env))
    return {"native": statistics.median(natives) if natives else None,
            "fibers": {n: statistics.median(v) for n, v in fibers.items()},
            "switch_ns": statistics.median(switches) if switches else None}


def column(exe, env, tmp):
    """pe_cluster.py's FIBER: {fibers: ns per call} (`exe`, pe_cluster's own program,
    has no fibers: pe_fibers.exe is built beside it)."""
    return _runs(tmp, env, native=False, switch=False)["fibers"]


def figures(env, tmp, progress=print):
    """{"native": ns, "fibers": {N: ns}, "switch_ns": ns, "ratio_1024": x, "break_even": N or
    None} under wine with `env` (its WINEPREFIX set up, its wineserver running)."""
    out = _runs(tmp, env)
    out["ratio_1024"] = out["fibers"][1024] / out["native"]
    out["break_even"] = next((n for n in FIBERS if out["fibers"][n] <= out["native"]), None)
    progress(f"NtYieldExecution native {out['native']:.1f} ns/call")
    for n in FIBERS:
        progress(f"  {n:5d} fibers, routed to a pool: {out['fibers'][n]:9.1f} ns/call "
                 f"({out['fibers'][n] / out['native']:.2f}x)")
    progress(f"fiber switch (ferry_fiber_yield, 1024 fibers): {out['switch_ns']:.1f} ns")
    return out


def result_fields(f):
    """The RESULT line's fields of `figures`."""
    return (f"pe_fiber_ratio_1024={f['ratio_1024']:.2f} "
            f"pe_break_even={f['break_even'] if f['break_even'] else 'none'} "
            f"pe_fiber_switch_ns={f['switch_ns']:.1f}")


def main():
    missing = [t for t in ("wine", "wineserver", "x86_64-w64-mingw32-gcc") if not shutil.which(t)]
    if missing or not (ROOT / "shim" / "build" / "ferry.dll").is_file():
        print(f"SKIP pe_cluster_fibers: needs {', '.join(missing) or 'ferry.dll (make shim)'}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pe_cluster_fibers.") as tmp, session(Path(tmp)) as env:
        print("RESULT " + result_fields(figures(env, tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
