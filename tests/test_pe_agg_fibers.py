"""ferry.dll's carriers, fibers and routing under wine: a Windows program
(tests/programs/win/agg_fibers.c) runs fibers through ferry.dll's API with the
group its profile gives (`ferry run -p PROFILE`), and says what happened; the
report of such a run has the aggregation figures an ELF run's has."""
import json

import pytest

from conftest import ferry
from ferry.profiles import load
from ferry.profiles import aggenv, routing
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)

ROUTED = """mode = "aggregate"
[aggregate.pools.main]
wait = "adaptive"
[aggregate.route]
waits = "main"
files = "main"
NtYieldExecution = "main"
"""
NATIVE_WAITS = ROUTED.replace('waits = "main"', 'waits = "native"')


def _profile(tmp_path, text, name="pe.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(wine, win_programs, tmp_path, profile, *args, run="run"):
    r = ferry("run", "-p", profile, "-o", tmp_path / run, "--", win_programs["agg_fibers"], *args,
              env=wine.env, timeout=180)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return r.stdout.splitlines()


def _line(lines, prefix):
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, lines
    return found[0]


def test_without_ferry_dll_the_program_says_so(wine, win_programs):
    r = wine.run(win_programs["agg_fibers"], "seh", text=True)
    assert (r.returncode, r.stdout) == (3, "no ferry.dll\n")


def test_fibers_take_turns_and_join_with_their_results(wine, win_programs, ferry_dll_built, tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "fibers", 5)
    # spawned in order, each yields after every round: round-robin
    order = [f"{i}.{r}" for r in range(3) for i in range(5)]
    assert _line(lines, "order:").split()[1:] == order
    for i in range(5):
        assert f"sum {i} {3 * i * 1000 + 3}" in lines
    assert "fiber API works outside a carrier" not in lines
    carrier = _line(lines, "carrier").split()
    assert carrier[:4] == ["carrier", "0", "fibers", "6"], carrier


def test_seh_and_stack_probes_work_on_a_fiber(wine, win_programs, ferry_dll_built, tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "seh")
    # two exceptions continued, an access violation recovered, a longjmp
    # through 40 frames, 48 pages probed down one 192 KiB frame, all on the
    # fiber's own stack as the TEB gives it
    assert _line(lines, "continued") == "continued 2 recovered 42 longjmp 7 probe 1128 on-own-stack 1"


def test_each_fiber_keeps_its_own_last_error_and_winsock_data(wine, win_programs, ferry_dll_built, tmp_path):
    # Fibers share their thread's TEB; ws2_32 keeps the sync event every
    # blocking Winsock call waits on in its WinSockData: one per fiber, as
    # one per thread.
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "teb")
    for i in range(3):
        assert f"fiber {i} last-error {1000 + i} winsock {0x5000 + i:#x}" in lines, lines


def test_routed_calls_park_their_fiber_while_others_run(wine, win_programs, ferry_dll_built, tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "park")
    # Each first fiber's call can only end once the second fiber ran (the read
    # needs its write, the wait its SetEvent): natively the carrier would block
    # for ever.  The sleep ends on its own, after the other fiber ran.
    assert _line(lines, "order:").split()[1:] == [
        "read-starts", "writer-runs", "read-got:1:hello",
        "wait-starts", "setter-runs", "wait-got:0",
        "sleep-starts", "other-runs", "sleep-done:0"]


def test_a_native_route_blocks_the_carrier(wine, win_programs, ferry_dll_built, tmp_path):
    routed = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "park", "sleep")
    native = _run(wine, win_programs, tmp_path, _profile(tmp_path, NATIVE_WAITS, "native.toml"), "park",
                  "sleep", run="native")
    assert _line(routed, "order:").split()[1:] == ["sleep-starts", "other-runs", "sleep-done:0"]
    assert _line(native, "order:").split()[1:] == ["sleep-starts", "sleep-done:0", "other-runs"]


def test_a_stored_call_leaves_while_another_fiber_only_yields(wine, win_programs, ferry_dll_built,
                                                              tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "park", "spin")
    assert _line(lines, "order:").split()[1:] == ["sleep-starts", "spinner-runs", "sleep-done:0",
                                                  "spinner-saw-sleep-done"]


def test_a_child_aggregates_by_the_same_profile(wine, win_programs, ferry_dll_built, tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "child", "park", "sleep")
    assert _line(lines, "order:").split()[1:] == ["sleep-starts", "other-runs", "sleep-done:0"]
    r = ferry("report", "--json", tmp_path / "run", env=wine.env, timeout=180)
    model = json.loads(r.stdout)
    assert len(model["processes"]) == 2 and model["aggregation"]["processes"] == 1, model["aggregation"]


def test_every_routed_result_is_the_native_one(wine, win_programs, ferry_dll_built, tmp_path):
    lines = _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "results")
    native, fiber = _line(lines, "native "), _line(lines, "fiber ")
    assert native.split()[1:] == fiber.split()[1:], (native, fiber)
    # not all successes: a timeout, a bad handle, and the data read
    assert "wait_timeout=102" in native and "wait_bad=c0000008" in native and "read=0/4/abcd" in native
    carrier = _line(lines, "carrier").split()
    assert int(carrier[-1]) >= 7, carrier     # every call above went through the pool


def test_report_of_a_pe_aggregate_run_has_the_figures(wine, win_programs, ferry_dll_built, tmp_path):
    _run(wine, win_programs, tmp_path, _profile(tmp_path, ROUTED), "fibers", 4)
    r = ferry("report", "--json", tmp_path / "run", env=wine.env, timeout=180)
    assert r.returncode == 0, r.stderr
    agg = json.loads(r.stdout)["aggregation"]
    assert agg["carriers"] == 1 and agg["fibers"] == 5 and agg["groups"] == 1, agg
    assert agg["switches"] > 12            # 3 yields of 4 fibers, and their joins
    assert agg["aggregated"] > 0
    pool = agg["pools"][0]
    assert pool["name"] == "main" and pool["submitted"] == pool["completed"] == agg["aggregated"], pool
    assert sum(pool["batches"]) > 0 and pool["enters"] > 0
    assert agg["crossings"] >= pool["enters"]
    row, = agg["carrier_list"]
    assert row["fibers"] == 5 and row["completed"] == agg["aggregated"], row
    text = ferry("report", tmp_path / "run", env=wine.env, timeout=180).stdout
    assert "aggregation" in text and "batch sizes" in text


# --- the profile's routes for a Windows program (no wine needed) --------------------------

def test_windows_groups_are_disjoint_and_hold_no_must_native_call():
    seen = {}
    for group, names in routing.WIN_GROUPS.items():
        assert group in routing.ROUTE_KEYS
        for name in names:
            assert routing.is_nt_name(name) and not routing.must_stay_native(name), name
            assert name not in seen, f"{name} in {group} and {seen.get(name)}"
            seen[name] = group


def test_windows_routes_by_name_override_groups_and_default():
    route = routing.expand_windows({"default": "worker", "files": "p1", "NtReadFile": "native"},
                                   {"p1": 1})
    assert route["NtReadFile"] == "n" and route["NtWriteFile"] == 1
    assert route["NtWaitForSingleObject"] == "w"
    assert not routing.WIN_MUST_NATIVE & set(route)
    # a Linux name means nothing to a Windows program, and an Nt name nothing to Linux
    assert "read" not in route and not routing.expand({"NtReadFile": "p1", "waits": "p1"}, {"p1": 1})


def test_pe_ferry_agg_names_calls_and_parses_back(tmp_path):
    p = load(_profile(tmp_path, ROUTED))
    text = aggenv.encode(p, windows=True)
    assert "NtWaitForSingleObject:0" in text and "NtYieldExecution:0" in text
    assert aggenv.decode(text) == aggenv.config(p, windows=True)


def test_profile_refuses_routing_a_must_native_nt_call(tmp_path):
    from ferry.base.errors import FerryError
    with pytest.raises(FerryError) as e:
        load(_profile(tmp_path, ROUTED + 'NtContinue = "main"\n'))
    assert "NtContinue must stay native" in str(e.value)
