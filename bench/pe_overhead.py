"""bench/pe_overhead: what ferry.dll adds to a Windows system call under wine.

bench/pe_overhead.c (built here with mingw-w64) times a loop of
NtYieldExecution and one of 1-byte WriteFile calls (best of 5 runs inside the
program, ns per call), under plain wine, under `ferry run -p count` and under
`ferry run -p trace`; each figure is the median over interleaved rounds.  One
wine prefix and one persistent wineserver serve every run.  Added ns is the
mean over both loops of (ferry - plain); ratios are ferry over plain.

Ends with: RESULT pe_count_added_ns=... pe_trace_added_ns=... pe_count_ratio=... pe_trace_ratio=...
Target (issue 12): count adds at most 10 ns per call, trace at most 60 ns.
"""
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pe_wine import session

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
CALLS = {"yield": 200_000, "write": 50_000}
ROUNDS = 5


def main():
    missing = [t for t in ("wine", "wineserver", "x86_64-w64-mingw32-gcc") if not shutil.which(t)]
    if missing or not (ROOT / "shim" / "build" / "ferry.dll").is_file():
        print(f"SKIP pe_overhead: needs {', '.join(missing) or 'ferry.dll (make shim)'}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pe_overhead.") as tmp:
        tmp = Path(tmp)
        exe = tmp / "pe_overhead.exe"
        subprocess.run(["x86_64-w64-mingw32-gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "pe_overhead.c")],
                       check=True)
        with session(tmp) as env:
            return measure(exe, env, tmp)


def measure(exe, env, tmp):
    commands = {
        "plain": ["wine"],
        "count": [FERRY, "run", "-p", "count", "-o", str(tmp / "run-count"), "--"],
        "trace": [FERRY, "run", "-p", "trace", "-o", str(tmp / "run-trace"), "--"],
    }
    results = {(how, loop): [] for how in commands for loop in CALLS}
    for _ in range(ROUNDS):
        for loop, n in CALLS.items():
            for how, prefix in commands.items():
                args = [str(exe), loop, str(n)] + ([str(tmp / "out.bin")] if loop == "write" else [])
                r = subprocess.run(prefix + args, env=env, capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise SystemExit(f"{how} {loop} failed ({r.returncode}): {r.stderr}")
                results[how, loop].append(float(r.stdout.split()[-1]))
    med = {k: statistics.median(v) for k, v in results.items()}
    for loop in CALLS:
        print(f"{loop:6s} plain {med['plain', loop]:8.1f} ns  count {med['count', loop]:8.1f} ns  "
              f"trace {med['trace', loop]:8.1f} ns")
    added = {how: statistics.mean(med[how, loop] - med["plain", loop] for loop in CALLS)
             for how in ("count", "trace")}
    ratio = {how: statistics.mean(med[how, loop] / med["plain", loop] for loop in CALLS)
             for how in ("count", "trace")}
    print(f"RESULT pe_count_added_ns={added['count']:.1f} pe_trace_added_ns={added['trace']:.1f} "
          f"pe_count_ratio={ratio['count']:.3f} pe_trace_ratio={ratio['trace']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
