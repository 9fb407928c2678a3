"""Issue 16, items 11 and 2 of helper B's brief: the calls the aggregation engine runs have
their errors and times recorded as the trace profile records them, and a process that
ends in the middle of a round (exit_group right after its last call, or a signal whose
handler exits) leaves every call it submitted counted as completed.

tests/programs/agg_engine_calls.c makes reads on closed descriptors (EBADF), opens of a
missing file (ENOENT) and reads of /dev/zero: on its main thread with a second thread
alive (both fibers under -p fibers) or in a fiber of a group made through the API
(-p aggregate)."""
import json

import pytest

from conftest import PROGRAMS, ROOT, ferry

ROUNDS = 100
TIMEOUT = 120
ENGINE_SYSCALLS = ("read", "openat")


def ferry_run(profile, out, *argv):
    r = ferry("run", "--no-learn", "-p", profile, "-o", out, "--", *argv, check=True, timeout=TIMEOUT)
    assert r.stdout == f"failed {2 * ROUNDS}\n", r.stdout
    return r


def report(*args):
    return ferry("report", *args, check=True, timeout=TIMEOUT).stdout


def by_name(model):
    return {s["name"]: s for s in model["syscalls"]}


@pytest.fixture(scope="module")
def traced(tmp_path_factory, test_programs):
    out = tmp_path_factory.mktemp("trace") / "run"
    ferry_run("trace", out, test_programs / "agg_engine_calls", "native", ROUNDS, "exit")
    return by_name(json.loads(report("--json", out)))


def engine_run(profile, end, tmp_path):
    # a program's only thread makes its calls natively under -p fibers
    how = "thread" if profile == "fibers" else "fiber"
    out = tmp_path / "run"
    ferry_run(profile, out, PROGRAMS / "agg_engine_calls", how, ROUNDS, end)
    return out, json.loads(report("--json", out))


@pytest.mark.parametrize("profile", ["fibers", "aggregate"])
def test_errors_and_times_of_engine_calls_as_in_trace(profile, traced, tmp_path):
    out, model = engine_run(profile, "return", tmp_path)
    got = by_name(model)
    assert model["aggregation"]["aggregated"] >= 3 * ROUNDS, model["aggregation"]
    for name in ENGINE_SYSCALLS:
        assert got[name]["calls"] == traced[name]["calls"], name
        assert got[name]["errors"] == traced[name]["errors"], (name, got[name], traced[name])
        assert got[name]["errnos"] == traced[name]["errnos"], name
        # every call recorded, each with a time (a bucket of the histogram) and min <= max
        assert sum(got[name]["hist"]) == got[name]["calls"], name
        assert got[name]["time_ns"] > 0 and 0 < got[name]["min_ns"] <= got[name]["max_ns"]
    text = report(out)
    assert "not recorded" not in text, text
    assert "EBADF 100" in text and "ENOENT 100" in text, text


@pytest.mark.parametrize("profile", ["fibers", "aggregate"])
def test_calls_the_engine_did_not_see_are_marked_not_recorded(profile, tmp_path):
    out, model = engine_run(profile, "return", tmp_path)
    unseen = [s["name"] for s in model["syscalls"] if not any(s["hist"])]
    assert unseen, "every syscall went through the shim: nothing to check"
    text = report(out)
    rows = {line.split()[-1]: line.split() for line in text.splitlines()
            if line.split() and line.split()[-1] in unseen}
    for name in unseen:
        # % time, seconds, usecs/call, min, max, then calls, errors
        assert rows[name][:5] == ["-"] * 5 and rows[name][6] == "-", rows[name]
    assert "errors and times recorded for" in " ".join(text.split()), text


@pytest.mark.parametrize("profile", ["fibers", "aggregate"])
@pytest.mark.parametrize("end", ["exit", "signal"])
def test_no_call_lost_when_the_process_ends_mid_round(profile, end, traced, tmp_path):
    """The carrier adds its completions to the file once per wait: the last batch's used
    to be lost when the process ended before the carrier waited again."""
    _, model = engine_run(profile, end, tmp_path)
    agg = model["aggregation"]
    for pool in agg["pools"]:
        assert pool["completed"] == pool["submitted"], pool
    assert agg["aggregated"] == sum(p["submitted"] for p in agg["pools"]), agg
    got = by_name(model)
    for name in ENGINE_SYSCALLS:
        assert got[name]["calls"] == traced[name]["calls"], name
        assert got[name]["errors"] == traced[name]["errors"], name


def test_a_call_a_signal_cut_short_and_ran_again_is_one_call(tmp_path):
    """A read a SIGALRM handler with SA_RESTART interrupted runs again: the
    kernel restarts it within one call, so the fibers profile must count
    one read, with its final result, as the trace profile does."""
    program = [ROOT / "tests" / "programs" / "py_never_hang.py", "restart"]
    reads = {}
    for profile in ("trace", "fibers"):
        out = tmp_path / profile
        r = ferry("run", "--no-learn", "-p", profile, "-o", out, "--", "/usr/bin/python3", *program,
                  timeout=TIMEOUT)
        assert r.returncode == 0 and "read 1" in r.stdout, r.stderr
        read = by_name(json.loads(report("--json", out)))["read"]
        reads[profile] = (read["calls"], read["errors"])
    assert reads["fibers"] == reads["trace"], reads


def test_a_programs_only_thread_makes_its_calls_natively(traced, tmp_path):
    """Under -p fibers the calls of a process whose only thread is the program's first
    do not go to the engine: no other fiber could run while one waits, nor join it in a
    batch, so the ring only added a crossing and two switches to each (postgres's
    backends ran a third fewer transactions).  They are counted and recorded as before."""
    out = tmp_path / "run"
    ferry_run("fibers", out, PROGRAMS / "agg_engine_calls", "native", ROUNDS, "return")
    model = json.loads(report("--json", out))
    agg = model["aggregation"]
    assert agg["aggregated"] == 0 and agg["worker"] == 0 and agg["switches"] == 0, agg
    assert "io_uring_enter" not in model["shim_calls"], model["shim_calls"]
    got = by_name(model)
    for name in ENGINE_SYSCALLS:
        assert (got[name]["calls"], got[name]["errors"]) == \
            (traced[name]["calls"], traced[name]["errors"]), name
    assert "a thread alone in its process makes its calls natively" in " ".join(report(out).split())
