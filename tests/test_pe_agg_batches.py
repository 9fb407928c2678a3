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


@pytest.mark.parametrize("mode", POLICIES + ["invalid", "stats", "big", "affinity", "priority"])
def test_batch_contract(wine, win_programs, ferry_dll_built, tmp_path, mode):  # noqa: F811
    r = _run(wine, win_programs["agg_batches"], tmp_path / "run", mode)
    assert r.stdout.splitlines()[-1] == f"ok {mode}", r.stdout


def test_each_thread_reaps_its_own(wine, win_programs, ferry_dll_built, tmp_path):  # noqa: F811
    """Four threads batch on one pool while the main thread's read of an
    empty pipe is pending: every thread reaps exactly its 8 calls per batch,
    and no completion of theirs reaches the main thread's ring."""
    r = _run(wine, win_programs["agg_batches"], tmp_path / "run", "threads", _win_path(tmp_path))
    assert r.stdout.splitlines()[-1] == "ok threads", r.stdout


def test_no_group_in_mode_off(wine, win_programs, ferry_dll_built, tmp_path):  # noqa: F811
    """-p off: ferry.dll is there but runs none of the program's calls, so a
    group cannot be made (-ENOSYS, mingw's number)."""
    r = ferry("run", "-p", "off", "-o", tmp_path / "run", "--", win_programs["agg_batches"], "off",
              env=wine.env, timeout=180)
    assert (r.returncode, r.stdout.splitlines()[-1:]) == (0, ["ok off"]), (r.stdout, r.stderr)


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


def _profile(wine, exe, run_dir, agg=None):
    env = dict(wine.env, **({"FERRY_AGG": agg} if agg is not None else {}))
    r = ferry("run", "-p", "count", "-o", run_dir, "--", exe, "profile", env=env, timeout=180)
    assert r.returncode == 0, (r.stdout, r.stderr)
    routes = {w[1]: (int(w[2]), int(w[3])) for w in map(str.split, r.stdout.splitlines()) if w[0] == "route"}
    return r, routes


def test_ferry_agg_reaches_the_group(wine, win_programs, ferry_dll_built, tmp_path):  # noqa: F811
    """FERRY_AGG in aggenv.py's format, route numbers being stub indices:
    ferry_group_config_default(cfg, 1) gives its pools, workers and routes
    (the others keep the default), and the program never sees the variable."""
    exe = win_programs["agg_batches"]
    plain, routes = _profile(wine, exe, tmp_path / "plain")
    assert "aggregating 0 workers 4 npools 1" in plain.stdout
    assert routes["NtReadFile"][1] == 0 and routes["NtLockFile"][1] == 0xfe, routes   # pool 0, workers
    read, yld = routes["NtReadFile"][0], routes["NtYieldExecution"][0]
    agg = f"workers=3;pool=64,2,1,-1,5,some,4,1000;pool=0,0,0,-1,0,none,0,0;route={read}:1,{yld}:w"
    r, got = _profile(wine, exe, tmp_path / "agg", agg)
    lines = r.stdout.splitlines()
    assert "aggregating 1 workers 3 npools 2" in lines
    assert "pool 0 entries 64 concurrency 2 cpus 1 priority 5 wait 2 limit 4 timeout 1000" in lines
    assert "pool 1 entries 0 concurrency 0 cpus 0 priority 0 wait 0 limit 0 timeout 0" in lines
    assert got["NtReadFile"][1] == 1 and got["NtYieldExecution"][1] == 0xfe, got
    assert got["NtClose"] == routes["NtClose"] and got["NtLockFile"] == routes["NtLockFile"]
    assert "env -" in lines, r.stdout
    bad, got = _profile(wine, exe, tmp_path / "bad", "pool=64,2;route=1:9")
    assert "FERRY_AGG is malformed" in bad.stderr and "workers 4 npools 1" in bad.stdout, (bad.stdout, bad.stderr)
    assert got == routes


def test_workers_take_no_block_of_the_programs(wine, win_programs, ferry_dll_built, tmp_path):  # noqa: F811
    """80 worker threads over 40 groups, more than the process file's 64
    thread blocks: every call the report counts is the program's own (the
    5 yields of a thread it starts last are there, none is a worker's)."""
    _run(wine, win_programs["agg_batches"], tmp_path / "run", "groups", "40")
    r = ferry("report", "--json", tmp_path / "run", env=wine.env, timeout=180)
    assert r.returncode == 0, r.stderr
    threads = [t for t in json.loads(r.stdout)["threads"] if t["calls"]]
    assert [t["syscalls"].get("NtYieldExecution") for t in threads[1:]] == [5], threads


def test_a_group_serves_threads_past_its_table_as_earlier_ones_end(wine, win_programs, ferry_dll_built,
                                                                    tmp_path):  # noqa: F811
    """300 threads, one after the other, each submitting a batch to one
    group: a group knows 256 threads at once, and a thread that has ended
    with nothing in flight makes room.  Before, the 257th and every later
    thread's submit was refused (-ENOMEM)."""
    r = _run(wine, win_programs["agg_batches"], tmp_path / "run", "turnover", "300")
    assert r.stdout.splitlines()[-1] == "ok turnover", r.stdout
