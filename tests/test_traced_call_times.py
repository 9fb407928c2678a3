"""Trace mode times each call with the TSC: the record keeps ticks, and the
shim files each call in a histogram bucket by its time in nanoseconds,
turned from ticks with the record's calibration (a factor derived once per
process, not a division in every call).  Whatever the reader makes of the
ticks, each call's bucket is the power of two of its time, in a program and
in its fork child, which keeps its parent's factor."""
import math

from conftest import ferry
from ferry.rundata import load_run

PYTHON = "/usr/bin/python3"
FORKED_SLEEP = ("import os, time\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    time.sleep(0.3)\n"
                "    os._exit(0)\n"
                "os.waitpid(pid, 0)\n")


def _calls(tmp_path, *argv):
    """The run's calls by name, and how long `ferry run` saw the program
    live (spawn to reap, its own clock): no call took longer."""
    run_dir = tmp_path / "run"
    ferry("run", "-p", "trace", "-o", run_dir, "--", *argv, check=True, timeout=300)
    model = load_run(run_dir)
    return {s["name"]: s for s in model["syscalls"]}, model["info"]["duration_s"] * 1e9


def _buckets(figures):
    """The buckets the shim filed `figures`' calls in: [2^k, 2^(k+1)) ns."""
    return [k for k, n in enumerate(figures["hist"]) if n]


def _bucket(ns):
    return int(math.log2(max(ns, 1)))


def _around(ns):
    """The buckets a call the reader makes `ns` long may be in: the shim
    files it by a fixed-point conversion that may come out up to ~1 ns
    shorter than the reader's."""
    return range(_bucket(ns - 2), _bucket(ns + 2) + 1)


def test_a_sleeps_time_and_its_bucket_are_its_duration(tmp_path):
    calls, lived = _calls(tmp_path, "sleep", "0.3")
    sleep = calls["clock_nanosleep"]
    assert sleep["calls"] == 1
    assert 0.3e9 <= sleep["time_ns"] <= lived, (sleep, lived)
    (bucket,) = _buckets(sleep)
    assert bucket in _around(sleep["time_ns"]), sleep


def test_a_fork_childs_calls_are_filed_with_its_parents_calibration(tmp_path):
    calls, lived = _calls(tmp_path, PYTHON, "-c", FORKED_SLEEP)
    for name in ("clock_nanosleep", "wait4"):      # the child's, the parent's
        figures = calls[name]
        assert 0.3e9 <= figures["max_ns"] <= lived, (figures, lived)
        assert _buckets(figures)[-1] in _around(figures["max_ns"]), figures


def test_every_calls_bucket_lies_between_its_fastest_and_slowest(tmp_path):
    calls, _ = _calls(tmp_path, PYTHON, "-c", "import os\nfor _ in range(1000): os.getppid()")
    assert calls["getppid"]["calls"] >= 1000
    for name, figures in calls.items():
        if not figures["min_ns"]:
            continue                                # counted, not timed
        assert sum(figures["hist"]) == figures["calls"], name
        lo, hi = _bucket(figures["min_ns"] - 2), _bucket(figures["max_ns"] + 2)
        assert all(lo <= k <= hi for k in _buckets(figures)), (name, figures)
