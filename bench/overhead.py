"""bench/overhead: what interposition costs per call, and what rewriting costs.

getppid through libc in a loop, the original program and the rewritten one
(pass-through shim, counting) measured alternately in the same run; each
figure is the median over rounds of the best-of-5 inner loops.  Also: the time
to instrument libc the first time and from the image cache, and, for scale,
the same loop under `strace -c -f`.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
PROGRAM = ROOT / "bench" / "build" / "overhead"
STATIC_PROGRAM = ROOT / "bench" / "build" / "overhead-static"
GO_PROGRAM = ROOT / "tests" / "programs" / "static_go.go"   # its `loop N` mode
N, ROUNDS = 1_000_000, 7


def ns_per_call(cmd, n=N, env=None):
    out = subprocess.run([*map(str, cmd), str(n), "5"], capture_output=True, text=True, check=True,
                         env=env).stdout
    return float(out)


def _go():
    return shutil.which("go") or next((g for g in ["/usr/local/go/bin/go"] if os.access(g, os.X_OK)), None)


def static_added(tmp, env):
    """Static programs carry the shim inside them: the getppid loop of a
    `gcc -static` build and of a static Go program (syscall.Getppid(), when
    Go is installed), each native and rewritten, alternately.  Returns
    {name: (native_ns, rewritten_ns)}."""
    programs = {"static": [STATIC_PROGRAM]}
    go = _go()
    if go:
        built = Path(tmp) / "go_getppid"
        go_env = dict(os.environ, CGO_ENABLED="0", GO111MODULE="off", GOCACHE=os.path.join(tmp, "gocache"))
        subprocess.run([go, "build", "-o", str(built), str(GO_PROGRAM)], check=True, capture_output=True,
                       env=go_env)
        programs["go_static"] = [built, "loop"]
    results = {}
    for name, (prog, *args) in programs.items():
        out = Path(tmp) / f"{name}-out"
        subprocess.run([FERRY, "instrument", "-q", str(prog), "-o", str(out)], check=True,
                       capture_output=True, env=env)
        rewritten = out / Path(prog).name
        native_runs, rewritten_runs = [], []
        for _ in range(ROUNDS):
            native_runs.append(ns_per_call([prog, *args]))
            rewritten_runs.append(ns_per_call([rewritten, *args]))
        results[name] = (statistics.median(native_runs), statistics.median(rewritten_runs))
    return results


def main():
    built.make("bench", "overhead")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FERRY_CACHE=os.path.join(tmp, "cache"))
        first = json.loads(subprocess.run([FERRY, "instrument", "--json", "/lib/x86_64-linux-gnu/libc.so.6"],
                                          capture_output=True, text=True, check=True, env=env).stdout)
        cached = json.loads(subprocess.run([FERRY, "instrument", "--json", "/lib/x86_64-linux-gnu/libc.so.6"],
                                           capture_output=True, text=True, check=True, env=env).stdout)
        assert cached["from_cache"]
        out = Path(tmp) / "overhead"
        subprocess.run([FERRY, "instrument", "-q", str(PROGRAM), "-o", str(out)], check=True,
                       capture_output=True, env=env)
        rewritten = out / "overhead"
        native_runs, rewritten_runs, caught_runs = [], [], []
        # The catch-all (Syscall User Dispatch) puts every call of the process,
        # patched or not, on the kernel's slower entry path: measured apart.
        catch_env = dict(env, FERRY_CATCH_ALL="1")
        for _ in range(ROUNDS):
            native_runs.append(ns_per_call([PROGRAM]))
            rewritten_runs.append(ns_per_call([rewritten]))
            caught_runs.append(ns_per_call([rewritten], env=catch_env))
        static = static_added(tmp, env)
        strace_ns = None
        if shutil.which("strace"):
            strace_ns = ns_per_call(["strace", "-c", "-f", "-o", os.devnull, PROGRAM], n=20_000)

    native, rewr = statistics.median(native_runs), statistics.median(rewritten_runs)
    caught = statistics.median(caught_runs)
    added = rewr - native
    print(f"getppid through libc, median of {ROUNDS} rounds (each best of 5 x {N:,} calls)")
    print(f"  native     {native:8.1f} ns/call   rounds: {' '.join(f'{x:.1f}' for x in native_runs)}")
    print(f"  rewritten  {rewr:8.1f} ns/call   rounds: {' '.join(f'{x:.1f}' for x in rewritten_runs)}")
    print(f"  added      {added:8.1f} ns/call   ratio {rewr / native:.3f}")
    print(f"  rewritten + catch-all {caught:8.1f} ns/call   ratio {caught / native:.3f}   "
          f"rounds: {' '.join(f'{x:.1f}' for x in caught_runs)}")
    if strace_ns:
        print(f"  strace -c  {strace_ns:8.1f} ns/call   ratio {strace_ns / native:.1f} (for scale)")
    print(f"instrument libc: {first['seconds']:.2f} s the first time, {cached['seconds']:.3f} s from the cache")
    result = (f"RESULT native_ns={native:.1f} rewritten_ns={rewr:.1f} added_ns={added:.1f} "
              f"ratio={rewr / native:.3f} instrument_libc_s={first['seconds']:.2f} "
              f"instrument_libc_cached_s={cached['seconds']:.3f} catch_all_ns={caught:.1f} "
              f"catch_all_ratio={caught / native:.3f}")
    if strace_ns:
        result += f" strace_ratio={strace_ns / native:.1f}"
    for name, (nat, rw) in static.items():
        print(f"{name:>10}: native {nat:.1f} ns/call, rewritten {rw:.1f} ns/call, added {rw - nat:.1f}")
        result += f" {name}_added_ns={rw - nat:.1f}"
    print(result)


if __name__ == "__main__":
    main()
