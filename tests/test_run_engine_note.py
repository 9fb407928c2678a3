"""`ferry run` in a profile that aggregates, on a program that never uses the engine: one
line on stderr after the program's own output, the program's exit status kept, and the
report says the same."""
import json

import pytest

from conftest import ferry

NOTE = "ferry: note: profile {}: no process used the aggregation engine"


pytestmark = pytest.mark.usefixtures("own_index")


@pytest.mark.parametrize("profile", ["aggregate", "net"])
def test_an_unused_engine_is_said_once_after_the_program(tmp_path, profile):
    r = ferry("run", "-p", profile, "-o", "run", "--", "/bin/sh", "-c",
              "echo out; echo err >&2; exit 3", cwd=tmp_path)
    assert r.returncode == 3
    assert r.stdout == "out\n"
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0] == "err", r.stderr
    assert lines[1].startswith(NOTE.format(profile))
    report = " ".join(ferry("report", "run", cwd=tmp_path).stdout.split())
    assert NOTE.format(profile).removeprefix("ferry: note: ") in report


def test_a_program_killed_by_a_signal_still_dies_of_it(tmp_path):
    r = ferry("run", "-p", "aggregate", "-o", "run", "--", "/bin/sh", "-c", "kill -TERM $$",
              cwd=tmp_path)
    assert r.returncode in (-15, 143), r.stderr
    assert NOTE.format("aggregate") in r.stderr


def test_no_note_when_a_process_made_a_group_or_the_profile_does_not_aggregate(tmp_path):
    r = ferry("run", "-p", "fibers", "-o", "fib", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    model = json.loads(ferry("report", "--json", "fib", cwd=tmp_path).stdout)
    # fibers makes a group in every process it enables (when the engine is built)
    assert (model["aggregation"] is None) == ("no process used the aggregation engine" in r.stderr)
    r = ferry("run", "-p", "trace", "-o", "trace", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == ""


def test_a_profile_that_makes_threads_fibers_does_not_suggest_itself(tmp_path):
    r = ferry("run", "-p", "fibers", "-o", "fib", "--", "/bin/true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / "fib" / "info.json").read_text())
    assert info["profile"]["threads"] == "fibers"
    # a fibers run that made no group (its program not enabled, say)
    from ferry.report.aggregation import unused_note
    note = unused_note({"info": {"profile": info["profile"]}})
    assert note.startswith("profile fibers: no process used the aggregation engine")
    assert "-p fibers" not in note
    # runs recorded before `threads` was kept still read, as native threads
    del info["profile"]["threads"]
    info["profile"]["name"] = "aggregate"
    assert "`-p fibers` runs" in unused_note({"info": {"profile": info["profile"]}})
