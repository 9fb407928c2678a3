"""`ferry report` on real runs: min/max latency, the per-thread view, what count mode does
not record, names that look like markup (`[vdso]`), the shim's own calls explained, and
`ferry runs` without a terminal."""
import csv
import io
import json
import re

import pytest

from conftest import ferry
from test_report import DATA, MODEL, render_text, strace_rows
from ferry.report import table

PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def threads_run(tmp_path_factory, test_programs):
    d = tmp_path_factory.mktemp("threads") / "run"
    ferry("run", "-o", d, "--", test_programs / "threads", check=True)
    return d


@pytest.fixture(scope="module")
def count_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("count") / "run"
    r = ferry("run", "-p", "count", "-o", d, "--", "/bin/ls", "/nonexistent-ferry")
    assert r.returncode == 2, r.stderr       # as ls: the failing stat is an error natively
    return d


# -- min and max -----------------------------------------------------------------------

def test_syscall_table_has_the_shortest_and_longest_call():
    minmax = {}
    found, _ = strace_rows(render_text(table.render(MODEL)), minmax)
    assert set(found) == {s["name"] for s in MODEL["syscalls"]} | {"total"}
    for s in MODEL["syscalls"]:
        if s["min_ns"] is None:                        # counted, never timed
            assert minmax[s["name"]] == (None, None), s["name"]
        else:
            assert minmax[s["name"]] == (pytest.approx(s["min_ns"] / 1e3, abs=0.005),
                                         pytest.approx(s["max_ns"] / 1e3, abs=0.005)), s["name"]
    timed = [s for s in MODEL["syscalls"] if s["min_ns"] is not None]
    assert minmax["total"] == (pytest.approx(min(s["min_ns"] for s in timed) / 1e3, abs=0.005),
                               pytest.approx(max(s["max_ns"] for s in timed) / 1e3, abs=0.005))


def test_min_and_max_of_a_real_run_bracket_the_mean(threads_run):
    minmax = {}
    found, _ = strace_rows(ferry("report", threads_run, check=True).stdout, minmax)
    assert found["getpid"][3] == 6000
    for name, (pct, secs, usecs, calls, errors) in found.items():
        mn, mx = minmax[name]
        if name in ("clone3", "exit", "exit_group"):
            assert (mn, mx) == (None, None)
        else:
            assert mn <= usecs + 0.01 and usecs <= mx + 0.01, name


# -- per thread --------------------------------------------------------------------------

def thread_rows(text):
    """{tid: words of its row} from the text report's thread table."""
    lines = text.split("\nthreads")[1].splitlines()[3:]
    return {line.split()[1]: line.split() for line in lines if re.match(r"^\s*\d+\s+\d+\s", line)}


def test_by_thread_has_a_row_per_thread_with_its_top_syscalls():
    out = ferry("report", "--by", "thread", "--sort", "calls", DATA, check=True).stdout
    rows = thread_rows(out)
    assert set(rows) == {"4100", "4102", "4101"}
    assert rows["4102"][:6] == ["4100", "4102", "python3.11", "130", "7", "0.001502"]
    assert "futex 53, write 40, read 25, ..." in " ".join(rows["4102"])
    assert [r[1] for r in rows.values()] == ["4100", "4101", "4102"]      # most calls first


def test_threads_of_a_real_run_add_up_to_their_process(threads_run):
    model = json.loads(ferry("report", "--json", threads_run, check=True).stdout)
    (proc,) = model["processes"]
    threads = model["threads"]
    assert len(threads) == proc["threads"] == 7           # main + 6 workers
    assert {t["pid"] for t in threads} == {proc["pid"]}
    assert len({t["tid"] for t in threads}) == 7 and proc["pid"] in {t["tid"] for t in threads}
    for key in ("calls", "errors"):
        assert sum(t[key] for t in threads) == proc[key], key
    assert sum(t["time_ns"] for t in threads) == pytest.approx(proc["time_ns"], abs=8)
    workers = [t for t in threads if t["tid"] != proc["pid"]]
    assert all(t["syscalls"]["getpid"] == 1000 for t in workers)   # each worker's loop
    rows = thread_rows(ferry("report", "--by", "thread", threads_run, check=True).stdout)
    assert len(rows) == 7
    for t in workers:
        assert rows[str(t["tid"])][3] == str(t["calls"])
        assert "getpid 1000" in " ".join(rows[str(t["tid"])])
    got = list(csv.DictReader(io.StringIO(ferry("report", "--by", "thread", "--csv",
                                                threads_run, check=True).stdout)))
    assert sorted(int(g["tid"]) for g in got) == sorted(t["tid"] for t in threads)


def test_diff_by_thread_is_a_usage_error():
    r = ferry("report", "--by", "thread", "--diff", DATA, DATA)
    assert r.returncode == 2 and "not by thread" in r.stderr


def test_a_model_without_threads_says_so(tmp_path):
    model = dict(MODEL)
    del model["threads"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(model))
    out = ferry("report", "--by", "thread", path, check=True).stdout
    assert "no thread data" in out
    assert ferry("report", "--by", "thread", "--csv", path, check=True).stdout.count("\n") == 1


# -- count mode ----------------------------------------------------------------------------

def test_count_mode_says_errors_and_times_are_not_recorded(count_run):
    out = " ".join(ferry("report", count_run, check=True).stdout.split())
    assert "(errors and times not recorded in count mode)" in out
    assert "0 errors" not in out and "0.000000" not in out and "% time" not in out
    found = re.findall(r"^\s*(\d+)\s+(\w+)\s*$", ferry("report", count_run, check=True).stdout, re.M)
    model = json.loads(ferry("report", "--json", count_run, check=True).stdout)
    assert dict((n, int(c)) for c, n in found)["total"] == model["totals"]["calls"] > 0
    procs = ferry("report", "--by", "process", count_run, check=True).stdout
    (row,) = [line.split() for line in procs.splitlines() if line.strip().startswith(
        str(model["processes"][0]["pid"]))]
    assert row[-3:] == ["-", "-", "-"]                 # errors, syscall s, % time
    sites = " ".join(ferry("report", "--by", "site", count_run, check=True).stdout.split())
    assert "sites not recorded in count mode" in sites


def test_a_trace_run_keeps_its_zero_errors(threads_run, tmp_path):
    """Zero errors in trace mode are a recorded zero, shown as such."""
    text = ferry("report", threads_run, check=True).stdout
    assert "not recorded" not in text and "errors," in text


# -- names that look like markup -----------------------------------------------------------

def test_a_site_in_the_vdso_is_named_as_in_proc_maps(tmp_path):
    # The vDSO's clock_gettime falls back to a real system call for the CPU-time clocks:
    # the catch-all sees it in the vDSO, which /proc/PID/maps names [vdso].
    d = tmp_path / "run"
    ferry("run", "-o", d, "--", PYTHON, "-c",
          "import time\nfor _ in range(7): time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)", check=True)
    model = json.loads(ferry("report", "--json", d, check=True).stdout)
    (vdso,) = [s for s in model["catch_all"]["sites"] if s["path"] == "[vdso]"]
    assert vdso["syscalls"]["clock_gettime"] >= 7
    out = ferry("report", d, check=True).stdout
    (row,) = [line for line in out.split("caught by the catch-all")[1].splitlines()
              if "clock_gettime" in line]
    assert "[vdso]" in row.split()


def test_text_that_looks_like_markup_is_printed_as_it_is():
    model = json.loads(DATA.read_text())
    model["sites"][0]["function"] = "[bold]f[/bold]"
    model["sites"][0]["module"] = "[vdso]"
    model["processes"][0]["exe"] = "/opt/[x]/prog"
    text = render_text(table.render(model, "site")) + render_text(table.render(model, "process"))
    assert "[bold]f[/bold]" in text and "[vdso]" in text and "/opt/[x]/prog" not in text
    assert re.search(r"4100\s+4099\s+prog\s", text)


# -- the shim's own calls ------------------------------------------------------------------

def test_the_shims_own_calls_are_explained(threads_run):
    out = " ".join(ferry("report", threads_run, check=True).stdout.split())
    model = json.loads(ferry("report", "--json", threads_run, check=True).stdout)
    shim = model["shim_calls"]
    top = max(shim, key=shim.get)
    assert f"the shim's own calls, not in the tables: {sum(shim.values())} ({top} {shim[top]}," in out
    assert "calls the shim makes itself, not the program" in out


# -- ferry runs ----------------------------------------------------------------------------

def test_runs_without_a_terminal_is_one_line_per_run(tmp_path, own_index):
    long = [f"argument-number-{i}" for i in range(40)]
    ferry("run", "-o", tmp_path / "a", "--", "/bin/echo", *long, check=True)
    ferry("run", "-o", tmp_path / "b", "--", "/bin/true", check=True)
    lines = ferry("runs", check=True).stdout.splitlines()
    assert len(lines) == 3                                   # a header, then a line per run
    assert lines[0].split() == ["#", "start", "profile", "exit", "seconds", "calls",
                                "processes", "directory", "command"]
    assert lines[1].split()[0] == "2" and lines[1].endswith(" /bin/true")
    assert lines[2].split()[0] == "1" and lines[2].endswith(" /bin/echo " + " ".join(long))
    assert lines[2].split()[7] == str(tmp_path / "a")
    assert lines[1].index("/bin/true") == lines[2].index("/bin/echo")   # aligned columns


def test_diff_prints_bracketed_names_as_they_are(tmp_path):
    model = json.loads(DATA.read_text())
    model["sites"][0]["id"] = "[vdso]#0"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(model))
    out = ferry("report", "--diff", DATA, "--by", "site", path, check=True).stdout
    assert "[vdso]#0" in out


def test_a_child_wine_started_again_is_said_in_the_notes():
    """ferry.dll's start_retries (a child wine could not start, started again)
    is a line of the report's notes, beside any other reason of the process."""
    model = {"processes": [
        {"pid": 40, "exe": "C:\\spawn_tree.exe", "enabled": True, "state": "exited", "start_retries": 2},
        {"pid": 41, "exe": "C:\\spawn_tree.exe", "enabled": True, "state": "unfinished", "start_retries": 1},
        {"pid": 42, "exe": "C:\\cmd.exe", "enabled": True, "state": "exited", "start_retries": 0},
    ]}
    notes = table.process_notes(model)
    assert any("40" in n and "started a child again 2 times" in n for n in notes)
    assert any("41" in n and "started a child again 1 time:" in n for n in notes)
    assert any("41" in n and "never finished" in n for n in notes)
    assert not any("42" in n for n in notes)
