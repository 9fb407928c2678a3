"""bench/wake: how soon a waiting thread runs again while another thread of
its process computes, natively and under `ferry run -p fibers`, side by side.

Under fibers the threads share a carrier, and a thread that computes makes no
call that would hand the carrier over: the engine's tick preempts it.  Three
workloads of bench/build/wake (bench/wake.c), each figure the median over
interleaved rounds:

  sleep    a thread spins; the main thread sleeps 2 ms, 50 times: the median
           overshoot of a sleep (us)
  echo     a thread spins; the main thread and an echo thread exchange a byte
           over a socketpair, 50 times: the median round trip (us)
  compute  a thread computes a fixed amount while another waits in a read:
           its time (us), so fibers/native is what the ticks cost it
  pipeline a producer computes 20000 items (~3 us each) and hands each to a
           consumer that computes as much on it, under fibers on *two*
           carriers (`fibers2`): its time, so fibers2/native says whether the
           consumer the producer wakes gets the idle carrier while the
           producer goes on computing (natively it gets the other CPU)

With WAKE_BASELINE_SHIM=<another libferry.so>, fibers also run with that shim
(`baseline`), in the same rounds.  The run index goes to a temporary
$FERRY_DATA.
"""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
PROGRAM = ROOT / "bench" / "build" / "wake"
ROUNDS = int(os.environ.get("ROUNDS", "5"))
BASELINE = os.environ.get("WAKE_BASELINE_SHIM")
WORKLOADS = [("sleep", ["sleep", "50"]), ("echo", ["echo", "50"]), ("compute", ["compute"]),
             ("pipeline", ["pipeline", "20000"])]
FIBERS = ROOT / "profiles" / "fibers.toml"


def modes_of(workload):
    """The pipeline needs two carriers to run as natively; the others one."""
    if workload == "pipeline":
        return ["native", "fibers2"] + (["baseline2"] if BASELINE else [])
    return ["native", "fibers"] + (["baseline"] if BASELINE else [])


def measure(mode, args, tmp, env):
    cmd = [str(PROGRAM), *args]
    if mode != "native":
        if mode.startswith("baseline"):
            env = dict(env, FERRY_SHIM=BASELINE)
        profile = built.with_carriers(FIBERS, 2, tmp) if mode.endswith("2") else "fibers"
        cmd = [FERRY, "run", "--no-learn", "-p", str(profile), "-o", str(tmp / f"run-{mode}"), "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return float(out.stdout.split()[-1])


def main():
    built.make("bench", "wake")
    with tempfile.TemporaryDirectory(prefix="ferry-wake-") as d:
        tmp = Path(d)
        env = dict(os.environ, FERRY_DATA=str(tmp / "data"))
        figures = {(w, m): [] for w, _ in WORKLOADS for m in modes_of(w)}
        for r in range(ROUNDS):
            for w, args in WORKLOADS:
                for m in modes_of(w):
                    figures[(w, m)].append(measure(m, args, tmp, env))
            print(f"round {r + 1}/{ROUNDS} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"{'workload':10}{'native':>12}{'ferry':>12}" + (f"{'baseline':>12}" if BASELINE else "")
          + f"   (median us, {ROUNDS} rounds; ferry: fibers, fibers2 for the pipeline)")
    for w, _ in WORKLOADS:
        print(f"{w:10}" + "".join(f"{med[(w, m)]:12.0f}" for m in modes_of(w)))
    keys = [f"sleep_overshoot_us={med[('sleep', 'fibers')]:.0f}",
            f"sleep_overshoot_us_native={med[('sleep', 'native')]:.0f}",
            f"echo_us={med[('echo', 'fibers')]:.0f}",
            f"echo_us_native={med[('echo', 'native')]:.0f}",
            f"compute_ratio={med[('compute', 'fibers')] / med[('compute', 'native')]:.3f}",
            f"pipeline_ratio_2carriers={med[('pipeline', 'fibers2')] / med[('pipeline', 'native')]:.3f}"]
    if BASELINE:
        keys += [f"baseline_sleep_overshoot_us={med[('sleep', 'baseline')]:.0f}",
                 f"baseline_echo_us={med[('echo', 'baseline')]:.0f}",
                 f"baseline_compute_ratio={med[('compute', 'baseline')] / med[('compute', 'native')]:.3f}",
                 f"baseline_pipeline_ratio_2carriers="
                 f"{med[('pipeline', 'baseline2')] / med[('pipeline', 'native')]:.3f}"]
    print("RESULT " + " ".join(keys))


if __name__ == "__main__":
    main()
