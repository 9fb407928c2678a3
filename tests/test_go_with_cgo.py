"""Go programs built with cgo (tests/programs/static, target cgo): dynamic,
their threads glibc's, and their Go code on goroutine stacks of a few KiB
that call the kernel directly, under every profile.

Under fibers such a program died within seconds: the shim's C path (a
parked fiber's, the exec hook's ~40 KiB) ran on the goroutine's stack and
wrote over the stack below it; the engine's signal pushed its frame there
too; and every thread's sigaltstack, where Go runs its handlers, was one
per carrier, so one thread's handler frames were written over another's.
The C path of a Go module's calls now runs on a stack of the shim's, the
engine's signal on the alternate stack, which is each fiber's own."""
import http.client
import os
import re
import signal
import subprocess

import pytest

import httpload
from conftest import ALL_PROFILES, FERRY

TIMEOUT = 120


def _masked(stderr):
    """A Go panic's stderr without its addresses and goroutine ids, nor
    ferry's own notes (the aggregate profile says that nothing aggregated)."""
    stderr = b"".join(line for line in stderr.splitlines(keepends=True) if not line.startswith(b"ferry: note:"))
    return re.sub(rb"0x[0-9a-f]+|goroutine \d+", b"N", stderr)


def _ferry(profile, run_dir, *argv):
    return [*FERRY, "run", "--no-learn", "-p", profile, "-o", str(run_dir), "--", *map(str, argv)]


@pytest.mark.parametrize("profile", ALL_PROFILES)
@pytest.mark.parametrize("args", [[], ["panic"]], ids=["every-part", "panic"])
def test_go_runtime_with_cgo_behaves_as_natively(tmp_path, static_program, profile, args):
    """Goroutines on several threads, timers, os/exec of itself and of sh,
    os/signal, a panic (tests/programs/static/go_runtime.go)."""
    path = static_program("go_runtime-cgo")
    native = subprocess.run([str(path), *args], capture_output=True, timeout=TIMEOUT)
    under = subprocess.run(_ferry(profile, tmp_path / "run", path, *args), capture_output=True,
                           timeout=TIMEOUT)
    assert (under.stdout, _masked(under.stderr), under.returncode) == \
        (native.stdout, _masked(native.stderr), native.returncode), under.stderr.decode(errors="replace")[-3000:]


REQUESTS = ["/", "/size/0", "/size/100000", "/size/x", "/other/path?q=1", "/size/3000000"]
PAGE = b"<html><body>ferry static go server</body></html>\n"


def _answers(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for target in REQUESTS:
        conn.request("GET", target)
        resp = conn.getresponse()
        out.append((resp.status, resp.read()))
    conn.close()
    return out


def _serve(argv, load):
    """Starts go_http-cgo on a free port (argv ends where the port goes), makes
    REQUESTS and, when `load`, keep-alive load from 32 connections; stops it
    with SIGTERM.  (answers, good responses, problems, stdout, exit status)."""
    port = httpload.free_port()
    proc = subprocess.Popen([*argv, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        got, line = httpload.read_listening_line(proc, TIMEOUT)
        assert got == port, (line, proc.stderr.read(4000) if proc.poll() is not None else b"")
        assert httpload.wait_http(port, proc, PAGE, timeout=TIMEOUT) == ""
        answers = _answers(port)
        good, problems = (httpload.keepalive_load(port, PAGE, connections=32, requests=150)
                          if load else (0, []))
        answers += _answers(port)
        server = [p for p in httpload.tree(proc.pid)
                  if os.path.basename(os.readlink(f"/proc/{p}/exe")) == "go_http-cgo"]
        assert len(server) == 1, httpload.tree(proc.pid)
        os.kill(server[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return answers, good, problems, out, err, proc.returncode


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_go_http_server_with_cgo_answers_load_as_natively(tmp_path, static_program, profile):
    """net/http under keep-alive load from 32 connections: many goroutines
    blocked in the kernel and woken at once, Go's preemption signal, its
    netpoller's epoll."""
    path = static_program("go_http-cgo")
    native = _serve([str(path)], load=False)
    answers, good, problems, out, err, code = _serve(_ferry(profile, tmp_path / "run", path), load=True)
    assert problems == [], err.decode(errors="replace")[-3000:]
    assert answers == native[0]
    assert good == 32 * 150
    served = 2 * len(REQUESTS) + good + 1  # and wait_http's first fetch
    assert (out, code) == (f"served {served} requests\n".encode(), 0), err.decode(errors="replace")[-3000:]
