"""Go programs built with cgo (tests/programs/static, target cgo): dynamic,
their threads glibc's, and their Go code on goroutine stacks of a few KiB
that call the kernel directly, under every profile.

Under fibers such a program died within seconds: the shim's C path (a
parked fiber's, the exec hook's ~40 KiB) ran on the goroutine's stack and
wrote over the stack below it; the engine's signal pushed its frame there
too; and every thread's sigaltstack, where Go runs its handlers, was one
per carrier, so one thread's handler frames were written over another's.
The C path of a Go module's calls now runs on a stack of the shim's, the
engine's signal on the alternate stack, which is each fiber's own.

A Go program a shell starts before any run made its image (the shim
preloaded, its libraries patched from their plans, its own calls caught by
the catch-all) took each caught call's signal frame and the shim's C path
on the goroutine's stack: it died with "found pointer to free object" or
"traceback did not unwind completely" (Go's own runtime tests under
`trace`, `go tool pprof`).  SIGSYS now runs on the thread's alternate
stack, where Go runs its own handlers, once a Go module is loaded."""
import shutil
import subprocess

import pytest

import go_http
import httpload
from conftest import ALL_PROFILES, FERRY

from ferry.rundata import load_run

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


@pytest.mark.parametrize("profile", ALL_PROFILES)
@pytest.mark.parametrize("part, says", [pytest.param("calls", b"ok 48000\n", id="calls"),
                                         pytest.param("spawns", b"spawns ran 160\n", id="spawns"),
                                         pytest.param("threads", b"threads ended 40\n", id="threads")])
def test_go_with_cgo_a_shell_starts_without_its_image_behaves_as_natively(tmp_path, static_program,
                                                                          profile, part, says):
    """A copy of go_calls-cgo at a path no run has seen, started by sh under
    `--no-learn`: preloaded, its goroutines' own calls caught, three times.
    calls: each run crashed before, `traceback did not unwind completely`;
    spawns: killed by SIGSYS (the let-through clone, catchall.c); and its
    children were not enabled, their exec made bare by the let-through's
    child (catchall.c, vfork_here);
    threads: Go's ending thread disabled its alternate stack from SIGSYS's
    handler, which ran on that stack: EPERM, and Go crashed on it.
    Under fibers its threads stay threads (shim.c)."""
    copy = tmp_path / "fresh" / "go_calls-cgo"
    copy.parent.mkdir()
    shutil.copy2(static_program("go_calls-cgo"), copy)
    native = subprocess.run([str(copy), part], capture_output=True, timeout=TIMEOUT)
    assert (native.stdout, native.returncode) == (says, 0), native
    for i in range(3):
        under = subprocess.run(_ferry(profile, tmp_path / f"run{i}", "sh", "-c", f"exec {copy} {part}"),
                               capture_output=True, timeout=TIMEOUT)
        assert (under.stdout, go_http.masked(under.stderr), under.returncode) == \
            (native.stdout, go_http.masked(native.stderr), 0), \
            under.stderr.decode(errors="replace")[-3000:]
        model = load_run(tmp_path / f"run{i}")
        if part == "spawns" and profile != "off":
            # its children are enabled, as they are once its image is made
            started = [p for p in model["processes"] if p["exe"].endswith("/true")]
            assert len(started) == 160 and all(p["enabled"] for p in started), len(started)
