"""examples/net for Windows: net_server.exe (mingw-w64, Winsock) answers under
wine exactly as the Linux server does, in every thread model.

Each model is started under the session's wine on a free loopback port and
driven by concurrent keep-alive clients (tests/httpload.py) that check every
response byte for byte against index.html; then the 404/405/400 cases,
pipelining and the disk mode.  The server stops on Ctrl-C (SIGINT under wine)
with exit 0.  The cluster model runs under `ferry run -p profiles/net.toml`,
as bench/net.py --windows runs it, and must show in its process file that
its calls went through ferry.dll's aggregation engine; under plain wine, or
with a ferry.dll that is not aggregating, it refuses in one line (exit 3).
No timing is asserted.
"""
import os
import signal
import subprocess

import pytest

import httpload
from conftest import FERRY, ROOT, ferry, make
from test_net_server import BAD_ARGUMENTS, NET_PROFILE, PAGE, Server, aggregation_area, raw_exchange, split_responses
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)

SERVER = ROOT / "examples" / "build" / "net_server.exe"
NATIVE = ["thread", "pool", "async"]
MODELS = NATIVE + ["cluster"]


@pytest.fixture(scope="session")
def net_server_exe(wine):
    make(ROOT / "examples", "build/net_server.exe")
    return SERVER


def win_path(path):
    """`path` as the program sees it: wine's Z: drive is the Linux root."""
    return "Z:" + str(path)


class WinServer(Server):
    """A server under wine (the session's), stopped as Windows stops it."""

    def __init__(self, wine, cmd, run_dir=None):
        super().__init__(cmd, run_dir, env=wine.env)
        assert self.line == f"listening on {self.port}\n".encode(), self.line   # the Linux server's line

    def stop(self):
        """Ctrl-C (wine turns SIGINT into CTRL_C_EVENT), and the exit status;
        None when it had to be killed.  To the session: under `ferry run` the
        program is a process wine detached from ferry-launch.exe's tree."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
                return None
        return self.proc.returncode

    def close(self):
        self.stop()
        self.proc.stdout.close()
        self.proc.stderr.close()


def started(wine, exe, model, *extra, run_dir=None):
    cmd = [exe, "--model", model, "--port", "0", *extra]
    if model == "cluster":
        return WinServer(wine, [*FERRY, "run", "--no-learn", "-p", NET_PROFILE, "-o", run_dir, "--", *cmd],
                         run_dir)
    return WinServer(wine, ["wine", *cmd])


@pytest.fixture(params=MODELS)
def server(request, wine, net_server_exe, tmp_path):
    s = started(wine, net_server_exe, request.param, run_dir=tmp_path / "run")
    s.model = request.param
    yield s
    s.close()


def check_aggregated(s, calls_at_least):
    """The cluster model's calls went through ferry.dll's pools."""
    area = aggregation_area(s.run_dir)
    assert area is not None, "the cluster server never created a Ferry group"
    aggregated, crossings, calls = area
    assert calls >= calls_at_least and aggregated > 0 and crossings > 0, area


def check_load(port, connections, requests, path="/"):
    good, errors = httpload.keepalive_load(port, PAGE, path=path, connections=connections, requests=requests,
                                           timeout=30)
    assert errors == []
    assert good == connections * requests


def test_serves_the_page_and_every_http_case(server):
    check_load(server.port, connections=20, requests=50)

    # One keep-alive connection: 404, the page by its other name, 405, all on it.
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw_exchange(server.port, b"GET /no/such/page HTTP/1.1\r\nHost: x\r\n\r\n"
                       b"GET /index.html?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                       b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" + req, expect_close=False)
    got = split_responses(out)
    assert [s.split()[1] for s, _, _ in got] == ["404", "200", "405", "200"]
    assert got[1][2] == got[3][2] == PAGE
    assert got[2][1]["allow"] == "GET"
    assert all(h["connection"] == "keep-alive" for _, h, _ in got)

    # A malformed request is a 400, and the server closes the connection.
    [(status, headers, body)] = split_responses(raw_exchange(server.port, b"THIS IS NOT HTTP\r\n\r\n"))
    assert status.startswith("HTTP/1.1 400 ") and headers["connection"] == "close"
    assert raw_exchange(server.port, b"GET / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")  # no Host
    # 8 KiB of headers without their end: the buffer is full, the request can
    # never be answered (exactly 8 KiB, so that the close finds nothing unread
    # and is no reset that could overtake the answer)
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "
    big = head + b"a" * (8192 - len(head))
    assert raw_exchange(server.port, big).startswith(b"HTTP/1.1 400 ")

    # Pipelined in one segment, the last asking to close: all answered, in order.
    out = raw_exchange(server.port, req + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + req[:-2] +
                       b"Connection: close\r\n\r\n")
    got = split_responses(out)
    assert [s.split()[1] for s, _, _ in got] == ["200", "404", "200"]
    assert got[0][2] == got[2][2] == PAGE and got[2][1]["connection"] == "close"
    # HTTP/1.0 without keep-alive: one answer, then the server closes.
    [(status, headers, body)] = split_responses(raw_exchange(server.port, b"GET / HTTP/1.0\r\n\r\n"))
    assert status.startswith("HTTP/1.1 200 ") and body == PAGE and headers["connection"] == "close"

    assert server.stop() == 0
    if server.model == "cluster":
        # each page request: at least its recv and its send (wine's AFD ioctls)
        check_aggregated(server, 2 * 20 * 50)


@pytest.mark.parametrize("model", MODELS)
def test_a_few_seconds_of_load_beyond_the_pool(wine, net_server_exe, tmp_path, model):
    """More keep-alive connections than pool threads, every answer checked:
    the pool model serves connections round by round, the async model keeps
    dozens of receives in flight on its completion port, the cluster model
    has a fiber parked on each."""
    s = started(wine, net_server_exe, model, "--threads", "8", run_dir=tmp_path / "run")
    try:
        check_load(s.port, connections=64, requests=60)
        assert s.stop() == 0
    finally:
        s.close()


@pytest.mark.parametrize("model", MODELS)
def test_disk_mode_reads_the_page_from_its_file_for_every_request(wine, net_server_exe, tmp_path, model):
    docroot = tmp_path / "docroot"
    docroot.mkdir()
    (docroot / "index.html").write_bytes(PAGE)
    s = started(wine, net_server_exe, model, "--docroot", win_path(docroot), run_dir=tmp_path / "run")
    try:
        check_load(s.port, connections=10, requests=30)
        req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        close = req[:-2] + b"Connection: close\r\n\r\n"
        got = split_responses(raw_exchange(s.port, req + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + req + close))
        assert [st.split()[1] for st, _, _ in got] == ["200", "404", "200", "200"]
        assert got[0][2] == got[2][2] == got[3][2] == PAGE

        # a new page, of another length, served from the next request on
        new_page = b"<!DOCTYPE html>\n<title>changed</title>\n" * 7
        (docroot / "index.html").write_bytes(new_page)
        [(status, headers, body)] = split_responses(raw_exchange(s.port, close))
        assert status.startswith("HTTP/1.1 200 ") and body == new_page
        assert int(headers["content-length"]) == len(new_page)
        # gone: a 404, and the server keeps serving
        (docroot / "index.html").unlink()
        assert raw_exchange(s.port, close).startswith(b"HTTP/1.1 404 ")
        assert s.stop() == 0
        if model == "cluster":
            # each page request: recv, NtCreateFile, NtQueryInformationFile, NtReadFile, NtClose, send
            check_aggregated(s, 6 * 10 * 30)
    finally:
        s.close()


def test_disk_mode_without_its_page_refuses_in_one_line(wine, net_server_exe, tmp_path):
    missing = win_path(tmp_path / "none")
    r = wine.run(net_server_exe, "--model", "pool", "--docroot", missing, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"{missing}/index.html" in r.stderr, r.stderr


@pytest.mark.parametrize("args, words", BAD_ARGUMENTS)
def test_bad_arguments_one_line(wine, net_server_exe, args, words):
    r = wine.run(net_server_exe, *args, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and words in r.stderr


def _one_line_cluster_refusal(r, why):
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "--model cluster" in r.stderr and why in r.stderr, r.stderr


def test_cluster_under_plain_wine_refuses(wine, net_server_exe):
    # Without ferry.dll, a fiber's blocking accept would block its carrier:
    # the server must say so, not hang.
    r = wine.run(net_server_exe, "--model", "cluster", "--port", "0", text=True, timeout=60)
    _one_line_cluster_refusal(r, "ferry.dll is not loaded")


def test_cluster_with_ferry_dll_not_aggregating_refuses(wine, net_server_exe, ferry_dll_built, tmp_path):
    """Under `ferry run -p count` ferry.dll is loaded, with its engine, but
    not aggregating: the program finds the API (GetProcAddress) and still
    refuses."""
    r = ferry("run", "-p", "count", "-o", tmp_path / "run", "--", net_server_exe, "--model", "cluster",
              "--port", "0", env=wine.env, timeout=180)
    _one_line_cluster_refusal(r, "ferry.dll is loaded, but not in aggregate mode")


def test_help_names_the_stop(wine, net_server_exe):
    r = wine.run(net_server_exe, "--help", text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    assert "--model thread|pool|async|cluster" in r.stdout and "Ctrl-C" in r.stdout

