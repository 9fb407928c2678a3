"""bench/trace_overhead: what `ferry run --profile trace` costs a whole program,
next to native and next to `strace -f -c`, side by side in one run.

Two workloads:

* walk: bench/build/walk (bench/walk.c) walks /usr/include twice with
  opendir/readdir/lstat and reads every file with open/read/close: ~90k
  syscalls.  Rounds interleave native, `ferry run -p trace`, `ferry run -p
  count` and `strace -f -c -o /dev/null`; each figure is the median over the
  rounds.  Native and strace are timed from the spawn of the process to its
  reaping; the ferry figure is the program's own `duration_s` from the run
  directory's info.json (also spawn to reap, measured by `ferry run`), so
  ferry's Python start-up and the image-cache lookup are not counted.  The
  whole `ferry run` command time is printed too.
* redis: Debian's redis-server on loopback, under redis-benchmark (50 clients,
  100k requests, GET and SET); natively, under `ferry run -p trace`, and under
  `strace -f -c` (20k requests there, as it is ~5x slower), interleaved over
  rounds; the figure is the median of the mean of GET and SET req/s.

Ratios are traced over native for walk time, native over traced for redis
throughput: 1.00 means no cost, 1.10 means 10% slower.  Programs are
instrumented (into the image cache) before anything is timed.  The run index
goes to a temporary $FERRY_DATA, so benchmark runs do not show up in `ferry
runs`.
"""
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FERRY = str(Path(sys.executable).parent / "ferry")
WALK = ROOT / "bench" / "build" / "walk"
WALK_DIR, WALK_PASSES, WALK_ROUNDS = "/usr/include", 2, 7
# Loopback redis on 2 vCPUs is bursty (anything else running moves it by 2x):
# several short interleaved rounds rather than a few long ones.
REDIS_ROUNDS, REDIS_CLIENTS, REDIS_REQUESTS = 5, 50, 100_000
# Under strace the server runs ~5x slower: fewer requests keep the bench near
# 2 minutes; req/s is a rate, and each test still lasts a few seconds.
REDIS_REQUESTS_STRACE = 20_000
NAN = float("nan")


def median(xs):
    return statistics.median(xs) if xs else NAN


def fmt(x, spec):
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def ratio(a, b):
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else NAN


def top_syscalls(model, n=3):
    by_calls = sorted(model["syscalls"], key=lambda s: -s["calls"])[:n]
    return ", ".join(f"{s['name']} {s['calls']:,}" for s in by_calls)


def total_calls(model):
    return sum(s["calls"] for s in model["syscalls"])


# ---------------------------------------------------------------- walk

def timed(cmd, env):
    t = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         timeout=120)
    dt = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return dt, out.stdout


def ferry_run_walk(profile, run_dir, env, expect):
    cmd = [FERRY, "run", "-p", profile, "-o", str(run_dir), "--", str(WALK), WALK_DIR, str(WALK_PASSES)]
    whole, out = timed(cmd, env)
    if out != expect:
        raise SystemExit(f"walk under ferry ({profile}) printed {out!r}, natively {expect!r}")
    info = json.loads((run_dir / "info.json").read_text())
    return info["duration_s"], whole


def bench_walk(tmp, env):
    walk_args = [str(WALK), WALK_DIR, str(WALK_PASSES)]
    strace = shutil.which("strace")
    _, expect = timed(walk_args, env)          # warm the page cache; the reference output
    t = time.perf_counter()
    subprocess.run([FERRY, "instrument", "-q", str(WALK)], check=True, capture_output=True, env=env,
                   timeout=300)
    instrument_s = time.perf_counter() - t
    trace_dir, count_dir = tmp / "walk-trace", tmp / "walk-count"
    ferry_run_walk("trace", trace_dir, env, expect)   # one untimed run of each: warm everything
    ferry_run_walk("count", count_dir, env, expect)

    r = {k: [] for k in ("native", "trace", "trace_whole", "count", "count_whole", "strace")}
    for _ in range(WALK_ROUNDS):
        r["native"].append(timed(walk_args, env)[0])
        d, whole = ferry_run_walk("trace", trace_dir, env, expect)
        r["trace"].append(d)
        r["trace_whole"].append(whole)
        d, whole = ferry_run_walk("count", count_dir, env, expect)
        r["count"].append(d)
        r["count_whole"].append(whole)
        if strace:
            r["strace"].append(timed([strace, "-f", "-c", "-o", os.devnull, *walk_args], env)[0])

    from ferry.rundata import load_run
    model = load_run(trace_dir)
    files, nbytes = expect.split()[:2]
    m = {k: median(v) for k, v in r.items()}
    print(f"walk: {WALK_DIR} x{WALK_PASSES} ({files} files, {int(nbytes) / 1e6:.0f} MB per pass), "
          f"median of {WALK_ROUNDS} interleaved rounds ({time.perf_counter() - t:.0f} s); "
          f"instrument {instrument_s:.2f} s (cache)")
    calls = total_calls(model)
    print(f"  traced run: {calls:,} calls; top: {top_syscalls(model)}; trace adds "
          f"{(m['trace'] - m['native']) / calls * 1e9:.0f} ns/call, count "
          f"{(m['count'] - m['native']) / calls * 1e9:.0f} ns/call (difference of medians / calls)")
    print(f"  {'':24} {'median s':>9} {'ratio':>6}   rounds (s)")
    rows = [("native", "native"), ("ferry trace (program)", "trace"), ("ferry count (program)", "count"),
            ("ferry trace (whole cmd)", "trace_whole"), ("ferry count (whole cmd)", "count_whole"),
            ("strace -f -c", "strace")]
    for label, k in rows:
        if not r[k]:
            print(f"  {label:24} {'nan':>9}          (strace not installed)")
            continue
        print(f"  {label:24} {m[k]:9.3f} {ratio(m[k], m['native']):6.2f}   "
              + " ".join(f"{x:.3f}" for x in r[k]))
    return m


# ---------------------------------------------------------------- redis

def ensure_redis():
    """None if redis-server and redis-benchmark are usable, else why not."""
    if shutil.which("redis-server") and shutil.which("redis-benchmark") and shutil.which("redis-cli"):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "redis-server/redis-tools not installed (install: apt-get install -y redis-server redis-tools)"
    print("installing redis-server redis-tools with apt-get ...", flush=True)
    try:
        p = subprocess.run(["apt-get", "install", "-y", "redis-server", "redis-tools"], capture_output=True,
                           text=True, timeout=300,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    except subprocess.TimeoutExpired:
        return "apt-get install redis-server redis-tools timed out"
    if p.returncode != 0 or not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        return f"apt-get install redis-server redis-tools failed: {p.stderr.strip()[-300:]}"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args, timeout=5):
    try:
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True,
                              text=True, timeout=timeout).stdout.strip()
    except subprocess.TimeoutExpired:
        return ""


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def redis_round(kind, tmp, env, tag):
    """Start redis-server natively / under ferry / under strace, benchmark it, stop it.
    Returns ({"SET": rps, "GET": rps}, run_dir or None)."""
    port = free_port()
    server = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--daemonize", "no"]
    run_dir = None
    if kind == "ferry":
        run_dir = tmp / f"redis-{tag}"
        cmd = [FERRY, "run", "-p", "trace", "-o", str(run_dir), "--", *server]
    elif kind == "strace":
        cmd = [shutil.which("strace"), "-f", "-c", "-o", os.devnull, *server]
    else:
        cmd = server
    log = open(tmp / f"redis-{tag}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while cli(port, "ping", timeout=2) != "PONG":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server ({kind}) never answered PING; "
                                   f"log: {(tmp / f'redis-{tag}.log').read_text()[-500:]}")
            time.sleep(0.1)
        requests = REDIS_REQUESTS_STRACE if kind == "strace" else REDIS_REQUESTS
        out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(REDIS_CLIENTS),
                              "-n", str(requests), "-t", "get,set", "--csv"],
                             capture_output=True, text=True, timeout=180)
        rps = {}
        for line in out.stdout.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if len(cells) >= 2 and cells[0] in ("GET", "SET"):
                rps[cells[0]] = float(cells[1])
        if set(rps) != {"GET", "SET"}:
            raise RuntimeError(f"redis-benchmark ({kind}) gave no GET/SET figures: "
                               f"{out.stdout[-300:]} {out.stderr[-300:]}")
    finally:
        cli(port, "shutdown", "nosave")
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the server's process group (strace's tracee, say) goes too.
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    return rps, run_dir


def bench_redis(tmp, env):
    why = ensure_redis()
    if why:
        print(f"redis: skipped: {why}")
        return None
    strace = shutil.which("strace")
    t = time.perf_counter()
    subprocess.run([FERRY, "instrument", "-q", shutil.which("redis-server")], check=True, capture_output=True,
                   env=env, timeout=300)
    instrument_s = time.perf_counter() - t
    kinds = ["native", "ferry"] + (["strace"] if strace else [])
    r = {k: [] for k in kinds}
    run_dir = None
    for i in range(REDIS_ROUNDS):
        for k in kinds:
            rps, d = redis_round(k, tmp, env, f"{k}{i}")
            r[k].append(rps)
            run_dir = d or run_dir
    mean = {k: [(x["GET"] + x["SET"]) / 2 for x in v] for k, v in r.items()}
    m = {k: median(v) for k, v in mean.items()}
    print(f"redis: redis-server on 127.0.0.1, redis-benchmark -c {REDIS_CLIENTS} -n {REDIS_REQUESTS:,} "
          f"(strace: {REDIS_REQUESTS_STRACE:,}) -t get,set; median of {REDIS_ROUNDS} interleaved rounds "
          f"({time.perf_counter() - t:.0f} s); instrument {instrument_s:.2f} s (cache)")
    from ferry.rundata import load_run
    model = load_run(run_dir)
    procs = model["processes"]
    print(f"  traced run (last round): {total_calls(model):,} calls in {len(procs)} process(es), "
          f"{sum(p['threads'] for p in procs)} thread(s); top: {top_syscalls(model)}")
    print(f"  {'':14} {'req/s':>9} {'ratio':>6}   rounds, mean of GET/SET (GET, SET)")
    for k, label in (("native", "native"), ("ferry", "ferry trace"), ("strace", "strace -f -c")):
        if k not in r:
            print(f"  {label:14} {'nan':>9}          (strace not installed)")
            continue
        print(f"  {label:14} {m[k]:9.0f} {ratio(m['native'], m[k]):6.2f}   "
              + "  ".join(f"{a:.0f} ({x['GET']:.0f}, {x['SET']:.0f})" for a, x in zip(mean[k], r[k])))
    return m


def main():
    built.make("bench", "trace_overhead")
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, FERRY_DATA=str(tmp / "data"))
        w = bench_walk(tmp, env)
        print()
        rd = bench_redis(tmp, env) or {}
    nat = rd.get("native", NAN)
    print()
    print(f"RESULT walk_ferry_ratio={fmt(ratio(w['trace'], w['native']), '.3f')} "
          f"walk_strace_ratio={fmt(ratio(w['strace'], w['native']), '.2f')} "
          f"redis_ferry_ratio={fmt(ratio(nat, rd.get('ferry', NAN)), '.3f')} "
          f"redis_strace_ratio={fmt(ratio(nat, rd.get('strace', NAN)), '.2f')} "
          f"walk_ferry_count_ratio={fmt(ratio(w['count'], w['native']), '.3f')} "
          f"walk_native_s={w['native']:.3f} walk_ferry_s={w['trace']:.3f} "
          f"walk_ferry_whole_s={w['trace_whole']:.3f} walk_strace_s={fmt(w['strace'], '.3f')} "
          f"redis_native_rps={fmt(nat, '.0f')} redis_ferry_rps={fmt(rd.get('ferry', NAN), '.0f')} "
          f"redis_strace_rps={fmt(rd.get('strace', NAN), '.0f')}")


if __name__ == "__main__":
    main()
