"""The static test programs of tests/programs/static behave natively as they
say they do, so that comparing a rewritten run with a native one means
something: Go (net/http server; goroutines, timers, os/exec, os/signal, a
panic), musl and glibc C programs (threads, fork/exec, signals, a crash),
each statically linked (built at test time; skipped when the toolchain is
missing)."""
import http.client
import signal
import subprocess

import pytest

import httpload
from ferry.rewriter.elfkind import classify

C_VARIANTS = {"static_c-musl": "static", "static_c-glibc": "static", "static_c-glibc-pie": "static-pie"}
TIMEOUT = 60


def _run(*argv):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT)


def _c_expected(path):
    total = sum(sum(k % 13 for k in range(i * 100000 + 1)) for i in range(8))
    return (f"threads: 8 joined, total {total}\n"
            "child: [a b] [c]\n"
            "from sh\n"
            "forkexec: self exited 0, sh exited 3\n"
            "signals: handler saw SIGUSR1, 0 while blocked, SIGUSR1 after sigsuspend\n"
            "done\n")


@pytest.mark.parametrize("name", sorted(C_VARIANTS))
def test_c_program_is_static_and_runs_every_part(static_program, name):
    path = static_program(name)
    assert classify(path).name == C_VARIANTS[name]
    r = _run(path)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == _c_expected(path)


@pytest.mark.parametrize("name", sorted(C_VARIANTS))
def test_c_program_crash_mode_dies_of_sigsegv(static_program, name):
    r = _run(static_program(name), "crash")
    assert r.returncode == -signal.SIGSEGV
    assert (r.stdout, r.stderr) == ("about to crash\n", "")


def test_go_program_is_static_and_runs_every_part(static_program):
    path = static_program("go_runtime")
    assert classify(path).name == "static"
    r = _run(path)
    total = sum(sum(k % 7 for k in range(i * 1000 + 1)) for i in range(64))
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (
        f"goroutines: 64 results, total {total}, min 0, max {sum(k % 7 for k in range(63 * 1000 + 1))}\n"
        "timers: 5 ticks, after-func fired, long timer stopped true\n"
        'exec: self said "child [\\"a b\\" \\"c\\"]", err <nil>\n'
        'exec: sh said "from sh\\n", exit 3\n'
        "spawns: 32 of 32 ran\n"
        "signals: got user defined signal 1, then hangup\n"
        "done\n")


def test_go_panic_exits_2_with_the_runtime_trace(static_program):
    path = static_program("go_runtime")
    first, second = _run(path, "panic"), _run(path, "panic")
    assert first.returncode == 2 and first.stdout == "about to panic\n"
    assert first.stderr.startswith("panic: assignment to entry in nil map\n\n"
                                   "goroutine 1 [running]:\nmain.main()\n")
    assert "go_runtime.go:" in first.stderr
    # the same binary panics the same way: a rewritten run can be compared byte for byte
    assert (second.returncode, second.stdout, second.stderr) == (2, first.stdout, first.stderr)


def test_go_http_server_serves_and_stops_gracefully(static_program):
    path = static_program("go_http")
    assert classify(path).name == "static"
    port = httpload.free_port()
    proc = subprocess.Popen([str(path), str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        got, line = httpload.read_listening_line(proc, TIMEOUT)
        assert got == port, line
        page = b"<html><body>ferry static go server</body></html>\n"
        assert httpload.wait_http(port, proc, page, timeout=TIMEOUT) == ""
        good, problems = httpload.keepalive_load(port, page, connections=4, requests=50)
        assert problems == [] and good == 200
        size = 100_000
        pattern = bytes(ord("a") + i % 26 for i in range(size))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        conn.request("GET", f"/size/{size}")
        resp = conn.getresponse()
        assert httpload.check_response(resp, resp.read(), pattern, "application/octet-stream") == ""
        conn.close()
    finally:
        code = httpload.stop(proc)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert code == 0 and err == b""
    assert out == f"served {1 + good + 1} requests\n".encode()   # the listening line was read above
