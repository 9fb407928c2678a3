"""ferry.dll's pools and raw batches (issue 18): ferry_submit under every wait
policy, ferry_reap, the group's figures, pools pinned to a CPU, and every
call's result as the synchronous call gives it, under wine.

tests/programs/win/agg_batches.c finds the API in ferry.dll with
GetProcAddress and runs under `ferry run`.  Facts come from pipes: a read of
an empty pipe stays pending on a worker until the program writes, so "the
submit returned before the read completed" needs no clock (the Windows port
of test_aggregate_wait_policies.py and of test_aggregate_results.py)."""
import json

import pytest

from conftest import ferry
from test_pe_run import ferry_dll_built  # noqa: F401  (the fixture)

POLICIES = ["none", "any", "some_limit", "some_timeout", "all", "adaptive"]


def _run(wine, exe, run_dir, *args):
    r = ferry("run", "-p", "count", "-o", run_dir, "--", exe, *args, env=wine.env, timeout=180)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r


@pytest.mark.parametrize("mode", POLICIES + ["invalid", "stats", "affinity"])
def test_batch_contract(wine, win_programs, ferry_dll_built, tmp_path, mode):  # noqa: F811
    r = _run(wine, win_programs["agg_batches"], tmp_path / "run", mode)
    assert r.stdout.splitlines()[-1] == f"ok {mode}", r.stdout


def _win_path(path):
    return "Z:" + str(path).replace("/", "\\")


@pytest.mark.parametrize("wait", ["all", "none", "some", "any", "adaptive"])
def test_results_match_native(wine, win_programs, ferry_dll_built, tmp_path, wait):  # noqa: F811
    """Reads at offsets (one past the end), writes at offsets, a size query,
    a flush and, in the middle of the batch, NtClose of a bad handle: every
    status, byte count and byte as the calls made one by one give them."""
    out = {}
    for how in ("native", wait):
        d = tmp_path / how
        d.mkdir()
        out[how] = _run(wine, win_programs["agg_batches"], tmp_path / f"run-{how}", "results", how,
                        _win_path(d)).stdout
    assert out[wait] == out["native"]
    lines = out["native"].splitlines()
    assert " NtClose " in lines[5] and "status c0000008" in lines[5], lines   # STATUS_INVALID_HANDLE
    assert "status c0000011" in lines[4], lines                                # STATUS_END_OF_FILE
    assert all("status 00000000" in line for line in lines[:4] + lines[6:12]), lines
    assert lines[-2] == "dst 12 w06w07w08w09", lines


def _counts(wine, run_dir, *names):
    r = ferry("report", "--json", run_dir, env=wine.env, timeout=180)
    assert r.returncode == 0, r.stderr
    calls = json.loads(r.stdout)["syscalls"]
    return [sum(s["calls"] for s in calls if s["name"] == name) for name in names]


def test_batch_calls_are_not_counted_again(wine, win_programs, ferry_dll_built, tmp_path):  # noqa: F811
    """300 NtYieldExecution run by a pool's workers and 300
    NtQueryInformationThread(NtCurrentThread()) run at once on the calling
    thread add nothing to the program's counts (nor do ferry.dll's own waits
    and wakes): the report counts the 7 yields the program makes itself."""
    counts = []
    for n in (0, 300):
        _run(wine, win_programs["agg_batches"], tmp_path / f"run{n}", "counted", str(n))
        counts.append(_counts(wine, tmp_path / f"run{n}", "NtYieldExecution", "NtQueryInformationThread"))
    assert counts[0][0] == 7 and counts[1] == counts[0], counts
