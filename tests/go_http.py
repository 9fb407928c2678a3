"""Driving the Go test programs of tests/programs/static (go_http, go_runtime,
and their cgo builds) the same way natively and under Ferry: a panic's
stderr without what changes from run to run, and go_http's fixed requests,
optional keep-alive load and graceful stop."""
import http.client
import os
import re
import signal
import subprocess

import httpload

TIMEOUT = 300
REQUESTS = [("GET", "/"), ("GET", "/size/0"), ("GET", "/size/100000"), ("GET", "/size/x"),
            ("HEAD", "/"), ("GET", "/other/path?q=1"), ("GET", "/size/3000000")]
PAGE = b"<html><body>ferry static go server</body></html>\n"


def masked(stderr):
    """A Go panic's stderr without its addresses and goroutine ids, nor
    ferry's own notes (the aggregate profile says when nothing aggregated)."""
    stderr = b"".join(line for line in stderr.splitlines(keepends=True) if not line.startswith(b"ferry: note:"))
    return re.sub(rb"0x[0-9a-f]+|goroutine \d+", b"N", stderr)


def exchange(port, requests=REQUESTS):
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


def serve(argv, port, exe, load=None):
    """Starts `argv` (a go_http listening on `port`, whose executable's name
    is `exe`), makes the REQUESTS and, with `load` = (connections,
    requests each), keep-alive load; then the REQUESTS again; stops it with
    SIGTERM to the server itself (not to a tracer in front of it).
    (answers, good load responses, the server's output, its exit status)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        got, line = httpload.read_listening_line(proc, TIMEOUT)
        assert got == port, (line, proc.stderr.read(4000) if proc.poll() is not None else b"")
        assert httpload.wait_http(port, proc, PAGE, timeout=TIMEOUT) == ""
        answers = exchange(port)
        good, problems = httpload.keepalive_load(port, PAGE, connections=load[0], requests=load[1]) \
            if load else (0, [])
        assert problems == [], proc.stderr.read(4000) if proc.poll() is not None else b""
        answers += exchange(port)
        server = [p for p in httpload.tree(proc.pid) if os.path.basename(os.readlink(f"/proc/{p}/exe")) == exe]
        assert len(server) == 1, httpload.tree(proc.pid)
        os.kill(server[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return answers, good, out, err, proc.returncode
