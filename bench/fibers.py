"""bench/fibers: unmodified threaded servers, native vs fiber mode (issue 6).

Three servers that were written thread-per-connection (or with a thread
pool) and know nothing of Ferry: examples/net in its `thread` and `pool`
models, and Debian's apache2 with mpm_worker serving the same 4,729-byte
page.  Each runs twice, natively and under `ferry run -p fibers` (its
threads become fibers; apache2's children are enabled by the injector), and
wrk drives both with keep-alive connections at concurrency 1, 10, 100, 256,
1000 and 2000.  Servers are pinned to CPU 0 and wrk to CPU 1.

With N carriers (`--smp`, on by default; N = the CPUs this process may use)
net-thread and apache run once more, natively and with `carriers = N`, both
on every CPU (wrk shares CPU 1 with them): the program's threads as fibers
on N carriers against the kernel's threads on N CPUs.

Every server is started once and stays up; at each concurrency all six are
measured in interleaved rounds (rotating order), so that a drifting machine
moves them alike, and the medians are compared.  Per server and level:
requests/s, p99 latency (wrk --latency), CPU time per request of the server's
process tree (utime+stime from /proc, children included) and its peak RSS
(sampled from /proc during the run).

The last line is the RESULT line, fiber mode over native (throughput: higher
is better; p99: lower is better); the net_* keys use the `thread` model:

    RESULT net_ratio_c256=… net_ratio_c1=… net_p99_ratio_c256=… net_p99_ratio_c2000=…
           apache_ratio_c256=… apache_ratio_c1=… net_smp_ratio_c256=… net_smp_ratio_c1=…
           net_smp_p99_ratio_c256=… apache_smp_ratio_c256=… smp_carriers=N

Until fiber mode exists (profiles/fibers.toml missing) the benchmark says so
and exits 1.  `--profile NAME` measures another profile in its place (e.g.
`trace`, to check the harness end to end); the RESULT keys stay the same and
the output says which profile they were computed against.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import httpload  # noqa: E402
from wrkload import (CLIENT_CPU, NAN, SERVER_CPU, BenchError, add_options, fmt, med,  # noqa: E402
                     ratio, settings, subset, wrk)

FERRY = str(Path(sys.executable).parent / "ferry")
NET_SERVER = ROOT / "examples" / "build" / "net_server"
PAGE = (ROOT / "examples" / "net" / "index.html").read_bytes()
FIBERS = ROOT / "profiles" / "fibers.toml"
KINDS = ["net-thread", "net-pool", "apache"]
SMP_KINDS = ["net-thread", "apache"]
LEVELS = [1, 10, 100, 256, 1000, 2000]
QUICK_LEVELS = [1, 10, 256]
# The first `ferry run` of a fresh cache rewrites libc and the server's libraries.
START_TIMEOUT = 180
APACHE_THREADS = 256     # per child; children = enough for the highest level


# ---------------------------------------------------------------- servers

class Server:
    """One server, natively (profile None) or under `ferry run -p profile`,
    pinned to `cpus`, in a session of its own."""

    def __init__(self, kind, variant, profile, tmp, env, pool_threads, max_level, cpus=SERVER_CPU):
        self.kind, self.profile = kind, profile
        self.label = f"{kind} ({'native' if profile is None else profile_name(profile)}, CPUs {cpus})"
        self.run_dir = tmp / f"run-{kind}-{variant}"
        self.apache_root = None
        if kind == "apache":
            # Its children run as nobody: the directory must be reachable by others.
            self.apache_root = Path(tempfile.mkdtemp(prefix="ferry-bench-apache-"))
            self.port = httpload.free_port()
            processes = max(1, math.ceil((max_level + 64) / APACHE_THREADS))
            conf = httpload.write_apache_conf(self.apache_root, self.port, PAGE, processes=processes,
                                              threads=APACHE_THREADS)
            argv, comm = httpload.apache_cmd(conf), "apache2"
        else:
            self.port = None
            argv = [str(NET_SERVER), "--model", kind.split("-")[1], "--port", "0",
                    "--threads", str(pool_threads)]
            comm = "net_server"
        if profile is not None:
            argv = [FERRY, "run", "--no-learn", "-p", str(profile), "-o", str(self.run_dir), "--", *argv]
        self.proc = subprocess.Popen(["taskset", "-c", cpus, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        try:
            if self.port is None:
                self.port = self._read_port()
            problem = httpload.wait_http(self.port, self.proc, PAGE, timeout=START_TIMEOUT)
            if problem:
                raise BenchError(f"{self.label} did not start: {problem}{self._stderr_tail()}")
            # taskset execs in place; under ferry run the server is its child.
            self.pid = httpload.find_descendant(self.proc.pid, comm)
            if self.pid is None:
                raise BenchError(f"{self.label}: no {comm} process under pid {self.proc.pid}")
        except BaseException:
            self.stop()
            raise

    def _read_port(self):
        port, line = httpload.read_listening_line(self.proc, START_TIMEOUT)
        if port is None:
            raise BenchError(f"{self.label} did not start (exit {self.proc.poll()}): {line!r}"
                             f"{self._stderr_tail()}")
        return port

    def _stderr_tail(self):
        if self.proc.poll() is None:
            return ""
        err = self.proc.stderr.read().decode(errors="replace").strip()
        return f"; stderr: {err[-2000:]}" if err else ""

    def alive(self):
        return self.proc.poll() is None

    def usage(self):
        return httpload.tree_usage(self.pid)

    def stop(self):
        status = httpload.stop(self.proc)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
        if self.apache_root:
            shutil.rmtree(self.apache_root, ignore_errors=True)
            self.apache_root = None
        return status


def profile_name(profile):
    return Path(profile).stem if str(profile).endswith(".toml") or "/" in str(profile) else str(profile)


# ---------------------------------------------------------------- wrk

def measure(server, conns, seconds):
    """One wrk run: wrk's figures, the tree's CPU seconds, its peak RSS."""
    if not server.alive():
        raise BenchError(f"{server.label} died (exit {server.proc.returncode})")
    peak, done = [server.usage()[1]], threading.Event()

    def sample():
        while not done.wait(0.2):
            peak[0] = max(peak[0], server.usage()[1])

    sampler = threading.Thread(target=sample, daemon=True)
    cpu0 = server.usage()[0]
    sampler.start()
    try:
        r = wrk(server.port, conns, seconds)
    finally:
        done.set()
        sampler.join()
    r["cpu_s"] = server.usage()[0] - cpu0
    r["rss"] = max(peak[0], server.usage()[1])
    return r


# ---------------------------------------------------------------- reporting

def summarize(rs):
    reqs = sum(r["requests"] for r in rs)
    return {"rps": med([r["rps"] for r in rs]), "p99_ms": med([r["p99_ms"] for r in rs]),
            "cpu_us_req": 1e6 * sum(r["cpu_s"] for r in rs) / reqs if reqs else NAN,
            "rss_mb": max(r["rss"] for r in rs) / 2**20, "errors": sum(r["errors"] + r["non2xx"] for r in rs),
            "rounds": [r["rps"] for r in rs]}


def print_table(table, levels, pname):
    for kind in [*KINDS, *(k + "-smp" for k in SMP_KINDS)]:
        if kind not in table:
            continue
        print(f"\n{kind}: native vs {pname}")
        print(f"  {'conc':>5} {'req/s nat':>10} {pname[:9]:>9} {'ratio':>6} {'p99 nat':>8} "
              f"{'p99 ' + pname[:4]:>8} {'ratio':>6} {'cpu us/req':>12} {'RSS MB':>11} {'errors':>9}")
        for lv in levels:
            n, f = table[kind].get((lv, "native")), table[kind].get((lv, "ferry"))
            if not n or not f:
                continue
            print(f"  {lv:>5} {fmt(n['rps'], '10.0f')} {fmt(f['rps'], '9.0f')} "
                  f"{fmt(ratio(f['rps'], n['rps']), '6.3f')} {fmt(n['p99_ms'], '8.2f')} "
                  f"{fmt(f['p99_ms'], '8.2f')} {fmt(ratio(f['p99_ms'], n['p99_ms']), '6.3f')} "
                  f"{fmt(n['cpu_us_req'], '5.1f'):>5}/{fmt(f['cpu_us_req'], '<6.1f')} "
                  f"{fmt(n['rss_mb'], '5.0f'):>5}/{fmt(f['rss_mb'], '<5.0f')} "
                  f"{n['errors']:>4}/{f['errors']:<4}")
    print("\n  (cpu us/req and RSS: native/profile; RSS is the process tree's peak, shared pages "
          "counted per process)")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(ap, QUICK_LEVELS, "threads of the net pool model (default 64)")
    ap.add_argument("--profile", help="measure this profile instead of fibers (a shipped name or a "
                                      "file), e.g. trace to check the harness")
    ap.add_argument("--no-smp", dest="smp", action="store_false",
                    help="leave out the runs on every CPU with one carrier per CPU")
    ap.add_argument("--levels", help="comma-separated concurrency levels to measure (default: "
                                     + ", ".join(map(str, LEVELS)) + "; keys of the others are -)")
    ap.add_argument("--servers", default=",".join(KINDS),
                    help="comma-separated subset of " + ", ".join(KINDS) + " (the RESULT line needs "
                         "net-thread and apache)")
    args = ap.parse_args()
    kinds = subset(ap, "--servers", args.servers, KINDS, "server")
    levels, seconds, rounds = settings(ap, args, LEVELS, QUICK_LEVELS)
    if args.levels:
        try:
            levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
        except ValueError:
            ap.error("--levels: expected comma-separated numbers, e.g. 1,2000")
        if not levels or levels[0] < 1:
            ap.error("--levels: expected levels of 1 or more")

    if args.profile is None:
        if not FIBERS.is_file():
            print(f"bench/fibers: fiber mode is not built yet ({FIBERS.relative_to(ROOT)} is missing): "
                  "nothing to measure, no figures reported (--profile trace checks the harness)",
                  file=sys.stderr)
            return 1
        profile = str(FIBERS)
    else:
        profile = args.profile
    pname = profile_name(profile)
    r = subprocess.run([FERRY, "profile", "check", profile], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"bench/fibers: profile {profile}: {(r.stderr or r.stdout).strip()}", file=sys.stderr)
        return 1
    if os.cpu_count() < 2:
        print("bench/fibers: needs 2 CPUs (servers on CPU 0, wrk on CPU 1)", file=sys.stderr)
        return 1
    if "apache" in kinds and not Path(httpload.APACHE).is_file():
        print("bench/fibers: apache2 is missing (apt-get install apache2-bin)", file=sys.stderr)
        return 1
    if not shutil.which("wrk"):
        print("bench/fibers: wrk is missing (apt-get install wrk)", file=sys.stderr)
        return 1
    built.make("examples", "fibers")

    print(f"profile: {pname} ({profile})" + ("" if Path(profile) == FIBERS else
                                             "  -- not fiber mode: a harness check, not issue 6's figures"))
    cpus = sorted(os.sched_getaffinity(0))
    smp_kinds = ([k for k in SMP_KINDS if k in kinds]
                 if args.smp and len(cpus) > 1 and Path(profile).is_file() else [])
    t_start = time.monotonic()
    servers, runs = {}, {}
    with tempfile.TemporaryDirectory(prefix="ferry-bench-fibers-") as tmp:
        tmp = Path(tmp)
        # Benchmark runs stay out of the user's run index.
        env = dict(os.environ, FERRY_DATA=str(tmp / "data"))
        try:
            for kind in kinds:
                for variant, prof in (("native", None), ("ferry", profile)):
                    servers[(kind, variant)] = Server(kind, variant, prof, tmp, env, args.threads,
                                                      max(levels))
            if smp_kinds:
                smp_profile = built.with_carriers(profile, len(cpus), tmp)
                every = ",".join(map(str, cpus))
                for kind in smp_kinds:
                    for variant, prof in (("native-smp", None), ("ferry-smp", smp_profile)):
                        servers[(kind, variant)] = Server(kind, variant, prof, tmp, env, args.threads,
                                                          max(levels), cpus=every)
                print(f"smp: net-thread and apache also on CPUs {every}, natively and with "
                      f"carriers = {len(cpus)}")
            order = list(servers)
            print(f"servers on CPU {SERVER_CPU}, wrk -t1 on CPU {CLIENT_CPU}; {rounds} interleaved round(s) "
                  f"of {seconds} s per level; net pool: {args.threads} threads; apache: mpm_worker, "
                  f"{APACHE_THREADS} threads per child")
            for s in servers.values():
                wrk(s.port, 10, 1)   # warm up: first connections, page faults, lazy binding
            for li, level in enumerate(levels):
                for rnd in range(rounds):
                    k = (li * rounds + rnd) % len(order)
                    for key in order[k:] + order[:k]:
                        runs.setdefault((key, level), []).append(measure(servers[key], level, seconds))
                line = "  ".join(f"{kind}{suffix} "
                                 f"{med([x['rps'] for x in runs[((kind, 'native' + suffix), level)]]):.0f}/"
                                 f"{med([x['rps'] for x in runs[((kind, 'ferry' + suffix), level)]]):.0f}"
                                 for kind, suffix in [(k, "") for k in kinds] + [(k, "-smp") for k in smp_kinds])
                print(f"  c={level:<5} req/s native/{pname}: {line}   ({time.monotonic() - t_start:.0f} s)",
                      flush=True)
        except BenchError as e:
            print(f"bench/fibers: {e}", file=sys.stderr)
            return 1
        finally:
            stops = {s.label: s.stop() for s in servers.values()}
            bad = {k: v for k, v in stops.items() if v != 0}
            if bad:
                print(f"bench/fibers: servers that did not stop cleanly on SIGTERM: {bad}", file=sys.stderr)

    table = {}
    for ((kind, variant), level), rs in runs.items():
        smp = variant.endswith("-smp")
        table.setdefault(kind + ("-smp" if smp else ""), {})[(level, variant.removesuffix("-smp"))] = \
            summarize(rs)
    print_table(table, levels, pname)
    print(f"total time {time.monotonic() - t_start:.0f} s")
    if "net-thread" not in table or "apache" not in table:
        print("bench/fibers: no RESULT line: it needs the net-thread and apache servers", file=sys.stderr)
        return 1

    def r(kind, level, key="rps"):
        t = table[kind]
        if (level, "ferry") not in t:      # a level left out with --levels
            return NAN
        return ratio(t[(level, "ferry")][key], t[(level, "native")][key])

    print(f"RESULT net_ratio_c256={fmt(r('net-thread', 256), '.3f')} net_ratio_c1={fmt(r('net-thread', 1), '.3f')} "
          f"net_p99_ratio_c256={fmt(r('net-thread', 256, 'p99_ms'), '.3f')} "
          f"net_p99_ratio_c2000={fmt(r('net-thread', 2000, 'p99_ms'), '.3f')} "
          f"apache_ratio_c256={fmt(r('apache', 256), '.3f')} apache_ratio_c1={fmt(r('apache', 1), '.3f')}"
          + (f" net_smp_ratio_c256={fmt(r('net-thread-smp', 256), '.3f')} "
             f"net_smp_ratio_c1={fmt(r('net-thread-smp', 1), '.3f')} "
             f"net_smp_p99_ratio_c256={fmt(r('net-thread-smp', 256, 'p99_ms'), '.3f')} "
             f"apache_smp_ratio_c256={fmt(r('apache-smp', 256), '.3f')} smp_carriers={len(cpus)}"
             if "net-thread-smp" in table and "apache-smp" in table else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
