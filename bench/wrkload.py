"""What the HTTP benchmarks (bench/net.py, bench/fibers.py) share: wrk pinned to the
client CPU and its figures read back, the options every such benchmark takes, and the
small statistics of their tables."""
import math
import re
import statistics
import subprocess

SERVER_CPU, CLIENT_CPU = "0", "1"
NAN = float("nan")
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


class BenchError(Exception):
    """A benchmark that cannot go on; `subject` names the server or model concerned."""

    def __init__(self, message, subject=None):
        super().__init__(message)
        self.subject = subject


def _ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if not m:
        raise BenchError(f"cannot read wrk's time {text!r}")
    return float(m.group(1)) * UNIT[m.group(2)]


def parse_wrk(out):
    """wrk --latency's output: mean and p99 latency (ms), requests, requests/s, socket
    errors, and non-2xx/3xx responses."""
    r = {"errors": 0, "non2xx": 0}
    m = re.search(r"^\s*Latency\s+(\S+)\s", out, re.M)
    p99 = re.search(r"^\s*99%\s+(\S+)", out, re.M)
    n = re.search(r"^\s*(\d+) requests in ([\d.]+)(\w+)", out, re.M)
    rps = re.search(r"^Requests/sec:\s*([\d.]+)", out, re.M)
    if not (m and p99 and n and rps):
        raise BenchError(f"cannot read wrk's output:\n{out}")
    r["mean_ms"], r["p99_ms"] = _ms(m.group(1)), _ms(p99.group(1))
    r["requests"], r["rps"] = int(n.group(1)), float(rps.group(1))
    e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if e:
        r["errors"] = sum(int(x) for x in e.groups())
    x = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if x:
        r["non2xx"] = int(x.group(1))
    return r


def wrk(port, conns, seconds):
    """One wrk run of `conns` keep-alive connections against 127.0.0.1:`port`."""
    cmd = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s",
           "--latency", f"http://127.0.0.1:{port}/"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise BenchError(f"wrk failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return parse_wrk(p.stdout)


def add_options(ap, quick_levels, threads_help):
    """--quick, --duration, --rounds, --threads."""
    ap.add_argument("--quick", action="store_true",
                    help=f"concurrency {', '.join(map(str, quick_levels))} only; 1 round of 2 s")
    ap.add_argument("--duration", type=int, help="seconds per wrk run (default 3; quick 2)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per level (default 2; quick 1)")
    ap.add_argument("--threads", type=int, default=64, help=threads_help)


def subset(ap, option, given, known, what):
    """The comma-separated names of `given`, each one of `known`; a usage error otherwise."""
    names = [x.strip() for x in given.split(",") if x.strip()]
    bad = [x for x in names if x not in known]
    if bad or not names:
        ap.error(f"{option}: unknown {what} {bad[0] if bad else '(none)'!r}; known: {', '.join(known)}")
    return names


def settings(ap, args, levels, quick_levels):
    """(levels, seconds per run, rounds) from the options, checked."""
    if args.duration is not None and not 1 <= args.duration <= 600:
        ap.error("--duration: expected 1..600 seconds")
    if args.rounds is not None and not 1 <= args.rounds <= 20:
        ap.error("--rounds: expected 1..20")
    if args.threads < 1:
        ap.error("--threads: expected at least 1")
    return (quick_levels if args.quick else levels, args.duration or (2 if args.quick else 3),
            args.rounds or (1 if args.quick else 2))


def med(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else NAN


def ratio(a, b):
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else NAN


def fmt(x, spec, none="-"):
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
