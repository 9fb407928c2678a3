"""The engine's crossings are the kernel's: every io_uring_enter a carrier
makes is counted, and only those it makes.

liburing's submit calls enter the kernel or not as they see fit (with an
SQPOLL thread a submit enters only to wake it); the enters the engine
reports (tests/programs/agg_results.c prints pool 0's) must be the
io_uring_enter calls strace sees, with and without SQPOLL.
"""
import shutil

import pytest

from aggregate_helpers import agg, engine_stats, pool_setting  # noqa: F401

pytestmark = pytest.mark.skipif(not shutil.which("strace"), reason="needs strace")

SETTINGS = {
    "ring": pool_setting("adaptive"),
    # pool=entries,concurrency,cpus,sqpoll_cpu,...: an SQPOLL thread on CPU 0
    "sqpoll": "workers=4;pool=256,0,0,0,0,adaptive,0,0",
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("suite", ["files", "sockets"])
def test_enters_counted_are_the_kernels(agg, test_programs, suite, setting, tmp_path):
    trace = tmp_path / "strace.out"
    (tmp_path / "d").mkdir()
    r = agg("/usr/bin/strace", "-f", "-qq", "-e", "trace=io_uring_enter", "-o", trace,
            "--", test_programs / "agg_results", "fiber", suite, tmp_path / "d",
            env={"FERRY_MODE": "aggregate", "FERRY_AGG": SETTINGS[setting]})
    stats = engine_stats(r.stderr)
    assert stats["aggregated"] > 0
    enters = sum(1 for line in trace.read_text().splitlines() if "io_uring_enter(" in line)
    assert stats["enters"] == enters


def test_figures_are_current_while_the_carrier_never_waits(agg):
    """A carrier whose fibers keep it busy never waits; the figures read
    while it runs show the calls its fibers completed all the same."""
    r = agg("agg_stats_live", "busy", env={"FERRY_MODE": "aggregate"})
    got = dict(kv.split("=") for kv in r.stdout.split())
    assert int(got["aggregated"]) >= int(got["calls"]), r.stdout


def _stack_maps(agg, test_programs, tmp_path, waves):
    """(fiber stacks mapped, as strace sees them, and the figures' crossings)."""
    trace = tmp_path / f"strace-{waves}.out"
    r = agg("/usr/bin/strace", "-f", "-qq", "-e", "trace=mmap,munmap", "-o", trace,
            "--", test_programs / "agg_stats_live", "waves", waves, env={"FERRY_MODE": "aggregate"})
    got = dict(kv.split("=") for kv in r.stdout.split())
    maps = sum(1 for line in trace.read_text().splitlines() if "MAP_STACK" in line)
    return maps, int(got["crossings"])


def test_fiber_stacks_are_reused_and_counted(agg, test_programs, tmp_path):
    """A server's connections come and go by the hundred: a wave of fibers
    after the first maps no stack of its own, and the stacks a carrier maps
    (a mapping and its guard page) are crossings it made."""
    one, crossings = _stack_maps(agg, test_programs, tmp_path, 1)
    three, _ = _stack_maps(agg, test_programs, tmp_path, 3)
    assert one >= 100
    assert three == one
    assert crossings >= 2 * 100
