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
import subprocess

import pytest

import go_http
import httpload
from conftest import ALL_PROFILES, FERRY

TIMEOUT = 120


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
    assert (under.stdout, go_http.masked(under.stderr), under.returncode) == \
        (native.stdout, go_http.masked(native.stderr), native.returncode), under.stderr.decode(errors="replace")[-3000:]


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_go_http_server_with_cgo_answers_load_as_natively(tmp_path, static_program, profile):
    """net/http under keep-alive load from 32 connections: many goroutines
    blocked in the kernel and woken at once, Go's preemption signal, its
    netpoller's epoll."""
    path = static_program("go_http-cgo")
    port = httpload.free_port()
    native = go_http.serve([str(path), str(port)], port, "go_http-cgo")
    port = httpload.free_port()
    answers, good, out, err, code = go_http.serve(_ferry(profile, tmp_path / "run", path, port), port,
                                                  "go_http-cgo", load=(32, 150))
    assert answers == native[0]
    assert good == 32 * 150
    served = 1 + 2 * len(go_http.REQUESTS) + good  # and wait_http's first fetch
    assert (out, code) == (f"served {served} requests\n".encode(), 0), err.decode(errors="replace")[-3000:]
