"""Issue 13's acceptance for Go, under `strace -f` on `ferry run`: the static
Go programs of tests/programs/static behave as natively and every call is
counted as strace counts it, syscall by syscall, from the moment the shim
started (strace_counts.check).  go_runtime: goroutines, timers, os/exec of
itself (a child that runs enabled, with its calls) and of sh, os/signal, a
panic.  go_http: a net/http server under a few seconds of keep-alive load,
answering byte for byte as the original does."""
import shutil
import subprocess

import pytest

import go_http
import httpload
import strace_counts
from conftest import FERRY
from ferry.rundata import load_run

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
TIMEOUT = go_http.TIMEOUT


def _traced_run(tmp_path, argv):
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    r = subprocess.run(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                        *map(str, argv)], capture_output=True, timeout=TIMEOUT)
    return r, log, run_dir


@pytest.mark.parametrize("args", [[], ["panic"]], ids=["every-part", "panic"])
def test_go_runtime_behaves_as_natively_and_counts_as_strace(tmp_path, static_program, args):
    path = static_program("go_runtime")
    native = subprocess.run([str(path), *args], capture_output=True, timeout=60)
    under, log, run_dir = _traced_run(tmp_path, [path, *args])
    assert (under.stdout, go_http.masked(under.stderr), under.returncode) == \
        (native.stdout, go_http.masked(native.stderr), native.returncode)
    counted = strace_counts.check(log, run_dir)
    if args:
        assert counted["exit_group"] == 1
        return
    procs = load_run(run_dir)["processes"]
    # os/exec of itself: the child runs its rewritten image, in the run, with calls
    child = [p for p in procs if p["argv"] and p["argv"][1:] == ["child", "a b", "c"]]
    assert len(child) == 1 and child[0]["enabled"] and child[0]["calls"] > 0, procs
    # sh: enabled, or (its libraries not in the cache yet) its calls caught
    shell = [p for p in procs if p["argv"] and p["argv"][-2:] == ["-c", "echo from sh; exit 3"]]
    assert shell and shell[-1]["calls"] > 0, procs
    assert counted["rt_sigreturn"] >= 2  # os/signal: SIGUSR1 and SIGHUP, handled


def test_go_http_under_load_answers_as_natively_and_counts_as_strace(tmp_path, static_program):
    path = static_program("go_http")
    port = httpload.free_port()
    native = go_http.serve([str(path), str(port)], port, "go_http")
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    port = httpload.free_port()
    under = go_http.serve(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                           str(path), str(port)], port, "go_http", load=(6, 150))
    answers, good, out, err, code = under
    assert answers == native[0]
    assert good == 6 * 150
    # every request reaches a handler ("/" takes any path), the first check's too
    served = 1 + 2 * len(go_http.REQUESTS) + good
    assert (out, err, code) == (f"served {served} requests\n".encode(), b"", 0)
    counted = strace_counts.check(log, run_dir)
    assert counted["accept4"] + counted["accept"] >= 7
