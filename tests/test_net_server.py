"""examples/net: the evaluation web server answers correctly in every thread model.

Each model is started on a free loopback port and driven by concurrent
keep-alive clients; every response is checked (status, headers, the exact
4729-byte page).  The cluster model runs rewritten under `ferry run` with the
evaluation server's aggregate profile (profiles/net.toml), as the benchmark
runs it, and must show in its process file that its calls went through the
aggregation engine.  No timing is asserted.
"""
import http.client
import os
import socket
import subprocess
import threading

import pytest

import httpload
from conftest import FERRY, ROOT, make, proc_records, read_record
from ferry import aggdata

SERVER = ROOT / "examples" / "build" / "net_server"
PAGE = (ROOT / "examples" / "net" / "index.html").read_bytes()
NET_PROFILE = ROOT / "profiles" / "net.toml"
MODELS = ["thread", "pool", "async", "cluster"]
CONNECTIONS, REQUESTS = 20, 50
# Generous: the first `ferry run` of a session rewrites libc into a fresh cache.
START_TIMEOUT = 180


@pytest.fixture(scope="session")
def net_server():
    make(ROOT / "examples")
    return SERVER


class Server:
    def __init__(self, cmd, run_dir=None, env=None):
        self.run_dir = run_dir
        self.proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, start_new_session=True)
        self.port = self._read_port()

    def _read_port(self):
        port, self.line = httpload.read_listening_line(self.proc, START_TIMEOUT)
        if port is None:
            self.stop()
            err = self.proc.stderr.read().decode(errors="replace").strip()
            raise AssertionError(f"server did not start (exit {self.proc.returncode}); "
                                 f"stdout {self.line!r}; stderr:\n{err}")
        return port

    def stop(self):
        """SIGTERM, and the exit status; kills it if it does not stop in time."""
        return httpload.stop(self.proc, timeout=15)


def _started(net_server, model, tmp_path, *extra):
    cmd = [net_server, "--model", model, "--port", "0", *extra]
    run_dir = None
    if model == "cluster":
        run_dir = tmp_path / "run"
        cmd = [*FERRY, "run", "--no-learn", "-p", NET_PROFILE, "-o", run_dir, "--", *cmd]
    s = Server(cmd, run_dir)
    s.model = model
    return s


def _stopped(s):
    s.stop()
    s.proc.stdout.close()
    s.proc.stderr.close()


@pytest.fixture(params=MODELS)
def server(request, net_server, tmp_path):
    s = _started(net_server, request.param, tmp_path)
    yield s
    _stopped(s)


@pytest.fixture(params=MODELS)
def disk_server(request, net_server, tmp_path):
    """A server in disk mode: its page is docroot/index.html, read per request."""
    docroot = tmp_path / "docroot"
    docroot.mkdir()
    (docroot / "index.html").write_bytes(PAGE)
    s = _started(net_server, request.param, tmp_path, "--docroot", docroot)
    s.docroot = docroot
    yield s
    _stopped(s)


def check_page(resp, body):
    assert resp.status == 200
    assert resp.getheader("Content-Length") == str(len(PAGE)) == "4729"
    assert resp.getheader("Content-Type", "").startswith("text/html")
    assert body == PAGE


def client(port, errors):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.connect()
        sock = conn.sock
        for _ in range(REQUESTS):
            conn.request("GET", "/")
            resp = conn.getresponse()
            check_page(resp, resp.read())
            # The same socket for every request: the server kept it alive.
            assert conn.sock is sock
        conn.close()
    except BaseException as e:  # reported by the test thread
        errors.append(repr(e))


def raw_exchange(port, data, expect_close=True):
    """Send `data` on a fresh connection, read until the server closes it (or
    until nothing more arrives when `expect_close` is false)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        if not expect_close:
            s.settimeout(1.0)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            if expect_close:
                raise
        return out


def split_responses(data):
    """[(status line, headers dict, body)] of a stream of responses."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        n = int(headers["content-length"])
        out.append((lines[0], headers, rest[:n]))
        data = rest[n:]
    return out


def aggregation_area(run_dir):
    """(aggregated, crossings, calls the engine saw) summed over the process
    records, or None when no process ever created a group."""
    found, aggregated, crossings, calls = False, 0, 0, 0
    for rec in proc_records(run_dir):
        record = aggdata.parse(read_record(rec))
        if record:
            found = True
            aggregated += record["aggregated"]
            crossings += record["crossings"]
            calls += record["aggregated"] + record["native"] + record["worker"]
    return (aggregated, crossings, calls) if found else None


def serve_clients(port):
    """CONNECTIONS keep-alive clients at once, each checking every page."""
    errors = []
    threads = [threading.Thread(target=client, args=(port, errors)) for _ in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "clients still waiting for the server"
    assert errors == []


def test_serves_concurrent_keepalive_clients(server):
    serve_clients(server.port)

    # Other paths are 404 and the connection stays usable.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/no/such/page")
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 404
    assert int(resp.getheader("Content-Length")) == len(body) > 0
    conn.request("GET", "/index.html?x=1")
    resp = conn.getresponse()
    check_page(resp, resp.read())
    conn.request("POST", "/", body=b"")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 405
    conn.close()

    # A malformed request is a 400, and the server closes the connection.
    out = raw_exchange(server.port, b"THIS IS NOT HTTP\r\n\r\n")
    [(status, headers, body)] = split_responses(out)
    assert status.startswith("HTTP/1.1 400 ")
    assert headers["connection"] == "close"
    out = raw_exchange(server.port, b"GET / HTTP/1.1\r\n\r\n")  # HTTP/1.1 without Host
    assert out.startswith(b"HTTP/1.1 400 ")

    # Pipelined requests in one segment are all answered, in order.
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw_exchange(server.port, req + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + req[:-2] +
                       b"Connection: close\r\n\r\n")
    got = split_responses(out)
    assert [s.split()[1] for s, _, _ in got] == ["200", "404", "200"]
    assert got[0][2] == PAGE and got[2][2] == PAGE

    if server.model == "cluster":
        area = aggregation_area(server.run_dir)
        assert area is not None, "the cluster server never created a Ferry group"
        aggregated, crossings, calls = area
        # 20 x 50 page requests alone make 1000 reads and 1000 writes, which
        # the engine sees (a fiber alone on its carrier makes them at once:
        # the profile's quiet path); how many crossings they saved depends on
        # load, which bench/net measures.
        assert calls >= 2 * CONNECTIONS * REQUESTS and aggregated > 0
        assert crossings > 0

    assert server.stop() == 0


def test_disk_mode_reads_the_page_from_its_file_for_every_request(disk_server):
    """The thesis's request pattern (open, fstat, read, close, send): the
    replies are the file's bytes as they are when the request comes."""
    serve_clients(disk_server.port)

    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    pipelined = (req + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + req + req[:-2] +
                 b"Connection: close\r\n\r\n")
    got = split_responses(raw_exchange(disk_server.port, pipelined))
    assert [s.split()[1] for s, _, _ in got] == ["200", "404", "200", "200"]
    assert got[0][2] == got[2][2] == got[3][2] == PAGE
    assert got[3][1]["connection"] == "close"

    # a new page, of another length, served from the next request on
    new_page = b"<!DOCTYPE html>\n<title>changed</title>\n" * 7
    (disk_server.docroot / "index.html").write_bytes(new_page)
    [(status, headers, body)] = split_responses(raw_exchange(disk_server.port, req[:-2] +
                                                             b"Connection: close\r\n\r\n"))
    assert status.startswith("HTTP/1.1 200 ") and body == new_page
    assert int(headers["content-length"]) == len(new_page)
    # gone: a 404, and the server keeps serving
    (disk_server.docroot / "index.html").unlink()
    out = raw_exchange(disk_server.port, req[:-2] + b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 404 ")

    if disk_server.model == "cluster":
        aggregated, crossings, calls = aggregation_area(disk_server.run_dir)
        # each page request: the request's read, openat, fstat, read, close, writev
        assert calls >= 6 * CONNECTIONS * REQUESTS and aggregated > 0
        assert crossings > 0
    assert disk_server.stop() == 0


def test_disk_mode_without_its_page_refuses_in_one_line(net_server, tmp_path):
    r = subprocess.run([net_server, "--model", "pool", "--docroot", tmp_path / "none"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and str(tmp_path / "none" / "index.html") in r.stderr


# (arguments, words of the one-line refusal): tests/test_pe_net_server.py
# gives them to the Windows server too
BAD_ARGUMENTS = [
    (["--model", "pool", "--port", "http"], "--port"),
    (["--model", "fibers"], "unknown model"),
    (["--port", "0"], "--model is required"),
    (["--model", "pool", "--threads", "0"], "--threads"),
    (["--model", "thread", "--verbose"], "unknown argument"),
]


@pytest.mark.parametrize("args, words", BAD_ARGUMENTS)
def test_bad_arguments_one_line(net_server, args, words):
    r = subprocess.run([net_server, *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and words in r.stderr


def test_cluster_without_ferry_refuses(net_server):
    # Run natively, the fibers' blocking calls would block their carrier:
    # the server must say so, not hang.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    r = subprocess.run([net_server, "--model", "cluster", "--port", "0"], capture_output=True, text=True,
                       timeout=10, env=env)
    assert r.returncode == 3
    assert r.stderr.count("\n") == 1 and "cluster" in r.stderr


def test_one_connection_to_the_cluster_model_costs_about_the_native_crossings(net_server, tmp_path):
    """At one connection (disk mode: a request's read, openat, fstat, read,
    close, writev, 6 system calls natively) the cluster model's fiber is alone
    on its carrier.  The calls that cannot block are made at once and each
    one that waits costs one io_uring_enter that submits it and waits, even
    though net.toml has pools that stay empty.  The open is made at once
    too, with a newfstatat before it (no FIFO's open may wait on the carrier)
    and the F_SETFL that takes its O_NONBLOCK off: 2 calls more, where on the
    ring it cost one crossing and two thread wakes that no count showed.  At
    most 8.5 crossings a request (the margin: the carrier's wake-ups before
    and after the load).  7.1 when the round's own submit came before the
    wait's, and opens were on the ring."""
    docroot = tmp_path / "docroot"
    docroot.mkdir()
    (docroot / "index.html").write_bytes(PAGE)
    s = _started(net_server, "cluster", tmp_path, "--docroot", docroot)
    requests = 2000
    try:
        n, errors = httpload.keepalive_load(s.port, PAGE, connections=1, requests=requests)
        assert errors == [] and n == requests, f"{n} good responses: {errors[:4]}"
    finally:
        _stopped(s)
    aggregated, crossings, calls = aggregation_area(s.run_dir)
    assert calls >= 6 * requests and aggregated > 0
    assert crossings <= 8.5 * requests, (crossings / requests, aggregated, calls)
