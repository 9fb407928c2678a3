"""bench/net: the thesis's web server benchmark (seed 000, section 6.3.2).

examples/net serves its 4,729-byte page in four thread models (by default
read from its file for every request, as the thesis's server did: open,
fstat, read, close, then the send; `--page memory` serves the copy linked
into the server): a dedicated
thread per connection, a thread pool, an io_uring event loop, and cluster
calls (fibers on a carrier, their blocking calls aggregated onto io_uring by
the shim under `ferry run -p profiles/net.toml`).  wrk drives each model with
keep-alive connections at concurrency 1, 10, 100, 400, 1000 and 2000; the
server is pinned to CPU 0 and wrk to CPU 1.

Every server is started once and stays up; at each concurrency the models
are measured in interleaved rounds (rotating order), so that a drifting
machine moves all of them alike.  Per model: requests/s, mean and p99
latency (wrk --latency), server CPU time (utime+stime of /proc/PID/stat
around each wrk run), system calls per request and kernel crossings.

The native models' throughput is measured without Ferry.  Their call counts
come from a second copy of each server running under `ferry run -p count`,
read from its live process file before and after a wrk run at each level.
The cluster model only exists under Ferry: its throughput run is also its
counting run, and its crossings come from the process file's aggregation
area (docs/aggregate.md): every io_uring_enter a carrier makes, every call
it makes at once, every call a worker makes, and the system calls the
engine makes for the fibers (a descriptor's kind, a fiber's stack); the
calls the engine never sees (other threads', and fibers' calls the routing
table leaves native) are crossings each.  Crossings saved = 1 - crossings /
calls of the server, the thesis's measure (99.89% there); the RESULT line gives it in
percent, the throughput ratios as cluster / other (higher is better) and the
p99 ratio as cluster / pool (lower is better).

Figures: Figure 6.3 (throughput vs concurrency) and latency vs concurrency
(the thesis's Table 6.5 as a plot; the brief calls it Figure 6.4), plus the
thesis's actual Figure 6.4 subject, CPU time, as a third plot; all in
bench/out/.  The last line is the RESULT line.

`--windows` runs the same measurement on net_server.exe (examples/net built
with mingw-w64 and Winsock) under wine: thread, pool and async (overlapped
I/O on a completion port) under plain wine, cluster under `ferry run -p
profiles/net.toml`, where ferry.dll routes its fibers' Winsock calls to its
pools.  One wine prefix and one persistent wineserver, pinned with the server
to CPU 0, serve every run; the server's CPU time includes the wineserver's,
which does much of wine's socket work.  Calls per request are Nt calls,
counted by ferry.dll under `ferry run -p count` (the cluster model's by its
own run).  The figures are wine's as much as the models': under wine every
Winsock call is an Nt call that wine turns into wineserver round trips and
Linux system calls.  The RESULT line's keys carry a `pe_` prefix; the
figures go to bench/out/pe_*.png.
"""
import argparse
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import built

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
import httpload  # noqa: E402
from pe_wine import session as wine_session  # noqa: E402
from wrkload import (CLIENT_CPU, NAN, SERVER_CPU, BenchError, add_options, fmt, med,  # noqa: E402
                     ratio, settings, subset, wrk)
FERRY = str(Path(sys.executable).parent / "ferry")
SERVER = ROOT / "examples" / "build" / "net_server"
SERVER_EXE = ROOT / "examples" / "build" / "net_server.exe"
PROFILE = ROOT / "profiles" / "net.toml"
OUT = ROOT / "bench" / "out"
MODELS = ["thread", "pool", "async", "cluster"]
NATIVE = ["thread", "pool", "async"]
LEVELS = [1, 10, 100, 400, 1000, 2000]
QUICK_LEVELS = [1, 100, 400]
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The first `ferry run` of a fresh cache rewrites libc and the server.
START_TIMEOUT = 180


# ---------------------------------------------------------------- servers

class Server:
    """A net_server, natively or under `ferry run`, pinned to SERVER_CPU; with
    `wine` (a Wine), net_server.exe under wine."""

    def __init__(self, model, profile=None, run_dir=None, threads=64, env=None, docroot=None, wine=None):
        self.model, self.profile, self.run_dir, self.wine = model, profile, run_dir, wine
        cmd = [str(SERVER_EXE if wine else SERVER), "--model", model, "--port", "0", "--threads", str(threads)]
        if docroot:
            # wine's Z: drive is the Linux root
            cmd += ["--docroot", f"Z:{docroot}" if wine else str(docroot)]
        if profile:
            cmd = [FERRY, "run", "--no-learn", "-p", str(profile), "-o", str(run_dir), "--", *cmd]
        elif wine:
            cmd = ["wine", *cmd]
        if wine:
            env = wine.env
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *cmd], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        self.port = self._read_port()
        self.pid = self._server_pid()

    def _read_port(self):
        port, line = httpload.read_listening_line(self.proc, START_TIMEOUT)
        if port is None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
            err = self.proc.stderr.read().decode(errors="replace").strip()
            self.stop()
            if self.proc.returncode < 0:
                err = f"killed by {signal.Signals(-self.proc.returncode).name}. {err}"
            how = "under `ferry run -p " + Path(self.profile).stem + "`" if self.profile else "natively"
            raise BenchError(f"the {self.model} model did not start {how} "
                             f"(exit {self.proc.returncode}): {err or line!r}", self.model)
        return port

    def _server_pid(self):
        """The net_server process: our child natively, ferry run's child under it
        (taskset execs in place, so the Popen pid is taskset's = the program's)."""
        if self.wine:
            return self._windows_pid()
        if not self.profile:
            return self.proc.pid
        for _ in range(100):
            kids = []
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                try:
                    kids += (task / "children").read_text().split()
                except OSError:
                    pass
            for k in kids:
                try:
                    if Path(f"/proc/{k}/comm").read_text().strip().startswith("net_server"):
                        return int(k)
                except OSError:
                    pass
            time.sleep(0.05)
        raise BenchError(f"cannot find the {self.model} server under ferry run (pid {self.proc.pid})")

    def _windows_pid(self):
        """The net_server.exe process: wine starts a Windows program's children
        detached from their parent's tree (ferry-launch.exe's, under ferry run),
        but in its session, which Popen made ours."""
        for _ in range(100):
            for d in Path("/proc").iterdir():
                try:
                    if (d.name.isdigit() and (d / "comm").read_text().startswith("net_server") and
                            int((d / "stat").read_text().rsplit(")", 1)[1].split()[3]) == self.proc.pid):
                        return int(d.name)
                except (OSError, IndexError, ValueError):
                    pass
            time.sleep(0.05)
        raise BenchError(f"cannot find the {self.model} server of session {self.proc.pid}", self.model)

    def cpu_s(self):
        """utime + stime of the server, and under wine of the wineserver too
        (one request in flight at a time: only the measured server uses it)."""
        total = 0
        for pid in [self.pid] + ([self.wine.server_pid] if self.wine else []):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def proc_record(self):
        from ferry import procfile
        if self.wine:
            records = _windows_records(Path(self.run_dir) / "proc")
        else:
            records = procfile.records_of(Path(self.run_dir) / "proc", self.pid)
        if not records:
            raise BenchError(f"no process record of pid {self.pid} in {self.run_dir}")
        return records[-1]

    def counts(self):
        """(calls, overflow, aggregation record or None) from the live process record."""
        f = self.proc_record()
        calls = sum(sum(b.calls) + b.invalid for b in f.blocks)
        return calls, f.overflow, f.aggregation

    def can_count(self):
        """Whether the live process record gives this server's counts."""
        try:
            self.counts()
            return True
        except (BenchError, OSError, ValueError):
            return False

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.wine and self.proc.poll() is None:
            # wine ends a process on SIGTERM at once; SIGINT is its Ctrl-C, the
            # server's graceful stop, sent to the session (ferry run and wine's
            # detached child alike)
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        status = httpload.stop(self.proc)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
        return status


class Wine:
    """The wine session's environment and its wineserver, pinned to
    SERVER_CPU with the servers: it does much of wine's socket work."""

    def __init__(self, env):
        self.env = env
        prefix = str(Path(env["WINEPREFIX"]).resolve())
        self.server_pid = next((p for p in _pids("wineserver")   # wineserver64 too
                                if f"WINEPREFIX={prefix}".encode() in _environ(p)), None)
        if self.server_pid is None:
            raise BenchError(f"no wineserver of the prefix {prefix}")
        os.sched_setaffinity(self.server_pid, {int(SERVER_CPU)})


def _windows_records(proc_dir):
    """The net_server.exe records of a run's proc/ (ferry.dll records a
    process under its Windows pid), oldest first; those that cannot be read
    are passed over (the process may be writing)."""
    from ferry import procfile
    found = []
    for p in sorted(Path(proc_dir).glob("*.ferry")):
        try:
            found.extend(r for r in procfile.read_all(p) if r.windows and "net_server" in r.exe)
        except procfile.ProcFileError:
            continue
    return sorted(found, key=lambda r: r.start_mono_ns)


def _pids(comm):
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().startswith(comm):
                yield int(d.name)
        except OSError:
            pass


def _environ(pid):
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


# ---------------------------------------------------------------- wrk

def measure(server, conns, seconds, counting=False):
    """One wrk run against `server`: wrk's figures, CPU seconds, and with
    `counting` the process file's deltas."""
    if not server.alive():
        raise BenchError(f"the {server.model} server died (exit {server.proc.returncode})")
    before = server.counts() if counting else None
    cpu0 = server.cpu_s()
    r = wrk(server.port, conns, seconds)
    r["cpu_s"] = server.cpu_s() - cpu0
    if counting:
        after = server.counts()
        r["calls"] = after[0] - before[0]
        r["overflow"] = after[1]
        a0, a1 = before[2], after[2]
        if a1:
            z = {"aggregated": 0, "native": 0, "worker": 0, "crossings": 0}
            a0 = a0 or z
            r["agg"] = {k: a1[k] - a0[k] for k in z}
    return r


# ---------------------------------------------------------------- reporting

def summarize(runs, counts):
    """{model: {level: figures}} from the raw wrk runs and counting runs."""
    table = {}
    for (model, level), rs in runs.items():
        reqs = sum(r["requests"] for r in rs)
        row = {
            "rps": med([r["rps"] for r in rs]),
            "mean_ms": med([r["mean_ms"] for r in rs]),
            "p99_ms": med([r["p99_ms"] for r in rs]),
            "cpu_us_req": 1e6 * sum(r["cpu_s"] for r in rs) / reqs if reqs else NAN,
            "cpu_util": med([r["cpu_s"] / r["seconds"] for r in rs]),
            "errors": sum(r["errors"] + r["non2xx"] for r in rs),
            "rounds": [r["rps"] for r in rs],
            "calls_req": NAN, "cross_req": NAN, "saved": NAN, "batch": NAN, "incomplete": False,
        }
        crs = counts.get((model, level), [])
        creq = sum(c["requests"] for c in crs)
        if creq:
            calls = sum(c["calls"] for c in crs)
            row["calls_req"] = calls / creq
            row["incomplete"] = any(c["overflow"] for c in crs)
            aggs = [c["agg"] for c in crs if c.get("agg")]
            if aggs:
                tot = {k: sum(a[k] for a in aggs) for k in aggs[0]}
                fiber_calls = tot["aggregated"] + tot["native"] + tot["worker"]
                # Calls the engine never sees (threads that are not fibers, and
                # fibers' calls routed native by the table, such as malloc's
                # mprotect) go straight to the kernel: each is a crossing.
                other = max(calls - fiber_calls, 0)
                row["cross_req"] = (tot["crossings"] + other) / creq
                row["saved"] = 1 - (tot["crossings"] + other) / (fiber_calls + other) if fiber_calls else NAN
                row["fiber_calls_req"] = fiber_calls / creq
            else:
                row["cross_req"] = row["calls_req"]
        table.setdefault(model, {})[level] = row
    return table


def print_tables(table, levels, windows=False, profile="net"):
    native = ("  (plain wine, its CPU time with the wineserver's; Nt calls counted in a second copy "
              "under ferry run -p count)" if windows else
              "  (native; calls counted in a second copy under ferry run -p count)")
    for model in MODELS:
        if model not in table:
            continue
        print(f"\n{model}" + (f"  (under ferry run -p {profile}: aggregation)" if model == "cluster" else native))
        print(f"  {'conc':>5} {'req/s':>9} {'mean ms':>8} {'p99 ms':>8} {'cpu us/req':>10} {'cpu %':>6} "
              f"{'calls/req':>9} {'cross/req':>9} {'saved':>8} {'err':>5}  rounds req/s")
        for level in levels:
            r = table[model].get(level)
            if not r:
                continue
            star = "*" if r["incomplete"] else " "
            print(f"  {level:>5} {fmt(r['rps'], '9.0f')} {fmt(r['mean_ms'], '8.2f')} {fmt(r['p99_ms'], '8.2f')} "
                  f"{fmt(r['cpu_us_req'], '10.1f')} {fmt(100 * r['cpu_util'], '6.0f')} "
                  f"{fmt(r['calls_req'], '8.2f')}{star} {fmt(r['cross_req'], '9.3f')} "
                  f"{fmt(100 * r['saved'], '7.2f') + '%' if not math.isnan(r['saved']) else '       -'} "
                  f"{r['errors']:>5}  {' '.join(f'{x:.0f}' for x in r['rounds'])}")
    if any(r["incomplete"] for t in table.values() for r in t.values()):
        print(f"  * more threads alive at once than {'ferry.dll' if windows else 'the shim'} has per-thread "
              "count blocks for: calls of the threads beyond were not counted (a lower bound)")


def plot(table, levels, out, windows=False):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no figures (pip install matplotlib into .venv)")
        return []
    out.mkdir(parents=True, exist_ok=True)
    labels = {"thread": "dedicated thread", "pool": "thread pool",
              "async": "async (completion port)" if windows else "async (io_uring)",
              "cluster": "cluster calls (Ferry)"}
    # the Windows server's figures under their own names, beside the Linux ones
    name, under = ("pe_", ", net_server.exe under wine") if windows else ("", "")
    models = [m for m in MODELS if m in table]
    files = []

    def series(model, key):
        return [table[model][lv][key] if lv in table[model] else NAN for lv in levels]

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in models:
        ax.plot(levels, series(m, "rps"), marker="o", label=labels[m])
    ax.set_xscale("log")
    ax.set_xticks(levels, [str(lv) for lv in levels])
    ax.set_xlabel("concurrent connections")
    ax.set_ylabel("requests / s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Figure 6.3: throughput vs concurrency (4,729-byte page, loopback{under})")
    ax.grid(alpha=.3)
    ax.legend()
    fig.tight_layout()
    files.append(out / f"{name}fig6_3_throughput.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for m in models:
        a1.plot(levels, series(m, "mean_ms"), marker="o", label=labels[m])
        a2.plot(levels, series(m, "p99_ms"), marker="o", label=labels[m])
    for a, what in ((a1, "mean"), (a2, "p99")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xticks(levels, [str(lv) for lv in levels])
        a.set_xlabel("concurrent connections")
        a.set_ylabel(f"{what} latency (ms)")
        a.grid(alpha=.3, which="both")
    a1.legend()
    fig.suptitle(f"Figure 6.4: latency vs concurrency (the thesis's Table 6.5 as a plot{under})")
    fig.tight_layout()
    files.append(out / f"{name}fig6_4_latency.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in models:
        ax.plot(levels, series(m, "cpu_us_req"), marker="o", label=labels[m])
    ax.set_xscale("log")
    ax.set_xticks(levels, [str(lv) for lv in levels])
    ax.set_xlabel("concurrent connections")
    ax.set_ylabel("server CPU time per request (µs)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Server CPU time (the thesis's Figure 6.4 subject{under})")
    ax.grid(alpha=.3)
    ax.legend()
    fig.tight_layout()
    files.append(out / f"{name}fig_cpu_time.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    return files


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(ap, QUICK_LEVELS, "pool model's threads (default 64)")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated subset (the RESULT line needs all four)")
    ap.add_argument("--page", choices=["disk", "memory"], default="disk",
                    help="disk (default): the page is read from its file for every request "
                         "(open, fstat, read, close), the thesis's pattern; memory: the page "
                         "linked into the server")
    ap.add_argument("--profile", type=Path, default=PROFILE,
                    help=f"the cluster model's profile (default {PROFILE.relative_to(ROOT)})")
    ap.add_argument("--windows", action="store_true",
                    help="net_server.exe (mingw-w64, Winsock) under wine instead of the Linux server")
    args = ap.parse_args()
    models = subset(ap, "--models", args.models, MODELS, "model")
    levels, seconds, rounds = settings(ap, args, LEVELS, QUICK_LEVELS)
    count_seconds = max(1, min(seconds, 2))
    if os.cpu_count() < 2:
        print("bench/net: needs 2 CPUs (server on CPU 0, wrk on CPU 1)", file=sys.stderr)
        return 1

    built.make("examples", "net")
    if args.windows:
        missing = [t for t in ("wine", "wineserver") if not shutil.which(t)]
        if missing or not SERVER_EXE.is_file():
            print(f"bench/net: --windows needs {', '.join(missing) or 'mingw-w64 (x86_64-w64-mingw32-gcc) '}"
                  f"{'' if missing else 'to build ' + str(SERVER_EXE.relative_to(ROOT))}", file=sys.stderr)
            return 1
    if "cluster" in models and not args.profile.is_file():
        print(f"bench/net: the cluster model cannot run: {args.profile} is missing", file=sys.stderr)
        return 1

    servers, counters = {}, {}
    runs, counts = {}, {}
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ferry-bench-net-") as tmp:
        tmp = Path(tmp)
        # Benchmark runs stay out of the user's run index.
        env = dict(os.environ, FERRY_DATA=str(tmp / "data"))
        wine = None
        docroot = None
        if args.page == "disk":
            docroot = tmp / "docroot"
            docroot.mkdir()
            (docroot / "index.html").write_bytes((ROOT / "examples" / "net" / "index.html").read_bytes())
        stack = contextlib.ExitStack()
        try:
            if args.windows:
                (tmp / "wine").mkdir()
                wine = Wine(stack.enter_context(wine_session(tmp / "wine")))
            for m in models:
                if m == "cluster":
                    servers[m] = Server(m, args.profile, tmp / "run-cluster", args.threads, env, docroot, wine)
                    counters[m] = servers[m]
                else:
                    servers[m] = Server(m, threads=args.threads, env=env, docroot=docroot, wine=wine)
                    counters[m] = Server(m, "count", tmp / f"run-{m}", args.threads, env, docroot, wine)
            # under wine, the cluster's calls are counted where ferry.dll writes its figures
            count_cluster = "cluster" in servers and (not wine or servers["cluster"].can_count())
            print(f"{'net_server.exe under wine; ' if wine else ''}"
                  f"page: {'read from disk per request' if docroot else 'in memory'}; "
                  f"servers on CPU {SERVER_CPU}, wrk -t1 on CPU {CLIENT_CPU}; {rounds} interleaved round(s) "
                  f"of {seconds} s per level{'' if wine else f', counting runs of {count_seconds} s'}; "
                  f"pool: {args.threads} threads")
            for s in list(servers.values()) + [c for m, c in counters.items() if m != "cluster"]:
                wrk(s.port, 10, 1)   # warm up: first connections, page faults, lazy binding
            for li, level in enumerate(levels):
                for rnd in range(rounds):
                    k = (li + rnd) % len(models)
                    for m in models[k:] + models[:k]:
                        res = measure(servers[m], level, seconds, counting=(m == "cluster" and count_cluster))
                        res["seconds"] = seconds
                        runs.setdefault((m, level), []).append(res)
                        if m == "cluster" and count_cluster:
                            counts.setdefault((m, level), []).append(res)
                for m in models:
                    if m != "cluster":
                        counts.setdefault((m, level), []).append(
                            measure(counters[m], level, count_seconds, counting=True))
                line = "  ".join(f"{m} {med([x['rps'] for x in runs[(m, level)]]):.0f}" for m in models)
                print(f"  c={level:<5} req/s: {line}   ({time.monotonic() - t_start:.0f} s)", flush=True)
        except BenchError as e:
            print(f"bench/net: {e}", file=sys.stderr)
            if e.subject == "cluster":
                print("bench/net: the cluster model cannot run (the aggregation engine is missing or "
                      "failing); no figures are reported", file=sys.stderr)
            return 1
        finally:
            stops = {}
            for m, s in list(servers.items()) + [(m + " (count)", c) for m, c in counters.items()
                                                  if m != "cluster"]:
                stops[m] = s.stop()
            bad = {m: rc for m, rc in stops.items() if rc not in (0, None)}
            if bad:
                print(f"bench/net: servers that did not stop cleanly on {'SIGINT' if wine else 'SIGTERM'}: "
                      f"{bad}", file=sys.stderr)
            stack.close()

    table = summarize(runs, counts)
    print_tables(table, levels, windows=bool(wine), profile=args.profile.stem)
    files = plot(table, levels, OUT, windows=bool(wine))
    for f in files:
        print(f"figure: {f.relative_to(ROOT)}")
    print(f"total time {time.monotonic() - t_start:.0f} s")
    if "cluster" not in table or "pool" not in table or "async" not in table or 400 not in levels:
        print("bench/net: no RESULT line: it needs the cluster, pool and async models at concurrency 400",
              file=sys.stderr)
        return 1
    cc, pool, asy = table["cluster"], table["pool"], table["async"]
    k = "pe_" if wine else ""
    print(f"RESULT {k}page={args.page} {k}crossings_saved_c400={fmt(100 * cc[400]['saved'], '.2f')} "
          f"{k}cc_vs_pool_c400={fmt(ratio(cc[400]['rps'], pool[400]['rps']), '.3f')} "
          f"{k}cc_vs_async_c400={fmt(ratio(cc[400]['rps'], asy[400]['rps']), '.3f')} "
          f"{k}cc_vs_pool_c1={fmt(ratio(cc[1]['rps'], pool[1]['rps']), '.3f')} "
          f"{k}p99_cc_vs_pool_c400={fmt(ratio(cc[400]['p99_ms'], pool[400]['p99_ms']), '.3f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
