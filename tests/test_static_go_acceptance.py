"""Issue 13's acceptance for Go, under `strace -f` on `ferry run`: the static
Go programs of tests/programs/static behave as natively and every call is
counted as strace counts it, syscall by syscall, from the moment the shim
started (strace_counts.check).  go_runtime: goroutines, timers, os/exec of
itself (a child that runs enabled, with its calls) and of sh, os/signal, a
panic.  go_http: a net/http server under a few seconds of keep-alive load,
answering byte for byte as the original does."""
import http.client
import os
import re
import shutil
import signal
import subprocess

import pytest

import httpload
import strace_counts
from conftest import FERRY
from ferry.rundata import load_run

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
TIMEOUT = 300


def _masked(stderr):
    """A Go panic's stderr without its addresses and goroutine ids."""
    return re.sub(rb"0x[0-9a-f]+|goroutine \d+", b"N", stderr)


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
    assert (under.stdout, _masked(under.stderr), under.returncode) == \
        (native.stdout, _masked(native.stderr), native.returncode)
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


def _exchange(port, requests):
    """(status, headers but Date, body) of each request, on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for method, target in requests:
        conn.request(method, target)
        resp = conn.getresponse()
        headers = sorted((k, v) for k, v in resp.getheaders() if k.lower() != "date")
        out.append((resp.status, headers, resp.read()))
    conn.close()
    return out


REQUESTS = [("GET", "/"), ("GET", "/size/0"), ("GET", "/size/100000"), ("GET", "/size/x"),
            ("HEAD", "/"), ("GET", "/other/path?q=1"), ("GET", "/size/3000000")]
PAGE = b"<html><body>ferry static go server</body></html>\n"


def _serve(argv, port, load):
    """Starts `argv` (a go_http that prints its listening line), makes the
    REQUESTS and, when `load`, a few seconds of keep-alive load; stops it
    with SIGTERM to the server itself (not to a tracer in front of it).
    (answers, good load responses, the server's output, its exit status)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        got, line = httpload.read_listening_line(proc, TIMEOUT)
        assert got == port, line
        assert httpload.wait_http(port, proc, PAGE, timeout=TIMEOUT) == ""
        answers = _exchange(port, REQUESTS)
        good, problems = httpload.keepalive_load(port, PAGE, connections=6, requests=150) if load else (0, [])
        assert problems == []
        answers += _exchange(port, REQUESTS)
        server = [p for p in httpload.tree(proc.pid)
                  if os.path.basename(os.readlink(f"/proc/{p}/exe")) == "go_http"]
        assert len(server) == 1, httpload.tree(proc.pid)
        os.kill(server[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return answers, good, out, err, proc.returncode


def test_go_http_under_load_answers_as_natively_and_counts_as_strace(tmp_path, static_program):
    path = static_program("go_http")
    port = httpload.free_port()
    native = _serve([str(path), str(port)], port, load=False)
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    port = httpload.free_port()
    under = _serve(["strace", "-f", "-qq", "-o", str(log), *FERRY, "run", "-o", str(run_dir), "--",
                    str(path), str(port)], port, load=True)
    answers, good, out, err, code = under
    assert answers == native[0]
    assert good == 6 * 150
    # every request reaches a handler ("/" takes any path), the first check's too
    served = 1 + 2 * len(REQUESTS) + good
    assert (out, err, code) == (f"served {served} requests\n".encode(), b"", 0)
    counted = strace_counts.check(log, run_dir)
    assert counted["accept4"] + counted["accept"] >= 7
