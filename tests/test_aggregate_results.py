"""A fiber's calls give exactly what the synchronous calls give.

tests/programs/agg_results.c runs one sequence of calls (files, sockets,
pipes, timers, futexes: successes, errors, short reads and writes, file
positions) twice: natively on the main thread, and as a fiber whose calls
go through io_uring, workers or run natively as routed.  Every result and
errno must match, under every wait policy of the pool.
"""
import pytest

from aggregate_helpers import agg, engine_stats, pool_setting  # noqa: F401

SUITES = ["files", "stat", "sockets", "pipes", "timers", "futex"]
POLICIES = {
    "adaptive": pool_setting("adaptive"),
    "any": pool_setting("any"),
    "all": pool_setting("all"),
    "none": pool_setting("none"),
    "some": pool_setting("some", 4, 200000),
    # reads and polls on a second pool: its completions wake the carrier
    # through the eventfd read that waits in pool 0
    "two_pools": pool_setting("adaptive") + ";pool=64,2,0,-1,0,any,0,0;route=0:1,7:1,45:1",
    # the quiet path: the suites' fiber is alone on its carrier
    "quiet": pool_setting("adaptive") + ";quiet=direct",
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("suite", SUITES)
def test_fiber_results_match_native(agg, suite, policy, tmp_path):
    (tmp_path / "n").mkdir()
    (tmp_path / "f").mkdir()
    native = agg("agg_results", "native", suite, tmp_path / "n")
    fiber = agg("agg_results", "fiber", suite, tmp_path / "f",
                env={"FERRY_MODE": "aggregate", "FERRY_AGG": POLICIES[policy]})
    assert native.stdout.strip(), "the native run printed nothing"
    assert fiber.stdout.splitlines() == native.stdout.splitlines()
    stats = engine_stats(fiber.stderr)
    assert stats["aggregated"] > 0, "no call went through io_uring"


def test_results_match_without_aggregate_mode(agg, tmp_path):
    """The API works in count mode too: the group's table decides."""
    (tmp_path / "n").mkdir()
    (tmp_path / "f").mkdir()
    native = agg("agg_results", "native", "pipes", tmp_path / "n")
    fiber = agg("agg_results", "fiber", "pipes", tmp_path / "f")
    assert fiber.stdout == native.stdout
    assert engine_stats(fiber.stderr)["aggregated"] > 0


def test_calls_routed_to_workers_by_the_profile(agg, tmp_path):
    """route=0:w sends read(2) to the workers: same results, counted there."""
    (tmp_path / "n").mkdir()
    (tmp_path / "f").mkdir()
    (tmp_path / "w").mkdir()
    native = agg("agg_results", "native", "files", tmp_path / "n")
    ring = agg("agg_results", "fiber", "files", tmp_path / "f", env={"FERRY_MODE": "aggregate"})
    worker = agg("agg_results", "fiber", "files", tmp_path / "w",
                 env={"FERRY_MODE": "aggregate", "FERRY_AGG": "workers=2;route=0:w,17:w"})
    assert ring.stdout == native.stdout == worker.stdout
    assert engine_stats(worker.stderr)["worker"] > engine_stats(ring.stderr)["worker"]


def _stat_suite_as_routed_and_with(agg, tmp_path, settings):
    """The engine's figures of the stat suite in a fiber, routed by default and
    with FERRY_AGG `settings`; their outputs must be the same."""
    (tmp_path / "r").mkdir()
    (tmp_path / "o").mkdir()
    ring = agg("agg_results", "fiber", "stat", tmp_path / "r", env={"FERRY_MODE": "aggregate"})
    other = agg("agg_results", "fiber", "stat", tmp_path / "o",
                env={"FERRY_MODE": "aggregate", "FERRY_AGG": settings})
    assert other.stdout == ring.stdout
    return engine_stats(ring.stderr), engine_stats(other.stderr)


def test_fstat_of_a_stack_buffer_goes_through_the_ring(agg, tmp_path):
    """fstat and newfstatat are STATX operations made a struct stat after,
    when the buffer is on the fiber's stack (the copy cannot fault there):
    the suite's nine such calls leave the process in the ring's crossings;
    routed native, the same answers, nine fewer calls aggregated."""
    ring, native = _stat_suite_as_routed_and_with(agg, tmp_path, "route=5:n,262:n")
    assert ring["aggregated"] - native["aggregated"] == 9


def test_quiet_path_makes_a_lone_fibers_calls_at_once(agg, tmp_path):
    """quiet=direct: a fiber alone on its carrier makes the calls that cannot
    block as system calls (fstat here), with the same answers."""
    r, q = _stat_suite_as_routed_and_with(agg, tmp_path, "quiet=direct")
    assert r["aggregated"] - q["aggregated"] >= 9 and q["native"] - r["native"] >= 9, (r, q)
