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
"""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def break_even(costs, native):
    for b in BATCHES:
        if costs[b] <= native[b]:
            return b
    return None


def main():
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

    def fmt(v):
        return "none" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    print(f"RESULT raw_ratio_1024={fmt(res['raw_ratio_1024'])} raw_break_even={fmt(res['raw_break_even'])} "
          f"raw_floor_ratio_1024={fmt(res['raw_floor_ratio_1024'])} "
          f"fiber_floor_ratio_1024={fmt(res['fiber_floor_ratio_1024'])} "
          f"fiber_ratio_1024={fmt(res['fiber_ratio_1024'])} fiber_break_even={fmt(res['fiber_break_even'])} "
          f"remote_ratio_1024={fmt(res['remote_ratio_1024'])}")


if __name__ == "__main__":
    main()
