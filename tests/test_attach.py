"""`ferry attach PID`: a running Python HTTP server (started without Ferry) is
enabled under load, keeps answering correctly, its calls appear in the report,
and `ferry detach` leaves it running and answering."""
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import httpload
from conftest import FERRY, ferry
from ferry.rundata import load_run

PYTHON = "/usr/bin/python3.11"


class Load(threading.Thread):
    """GET requests in a loop, each checked, until stopped (bounded)."""

    def __init__(self, url, expected):
        super().__init__(daemon=True)
        self.url, self.expected = url, expected
        self.ok = self.bad = 0
        self.stop = threading.Event()

    def run(self):
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    if r.status == 200 and r.read() == self.expected:
                        self.ok += 1
                    else:
                        self.bad += 1
            except OSError:
                self.bad += 1
            time.sleep(0.01)


@pytest.mark.skipif(os.geteuid() != 0 and Path("/proc/sys/kernel/yama/ptrace_scope").exists()
                    and Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() != "0",
                    reason="ptrace of a non-child is not allowed here")
def test_attached_http_server_keeps_answering_and_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_DATA", str(tmp_path / "data"))
    (tmp_path / "www").mkdir()
    page = b"hello from the attached server\n" * 50
    (tmp_path / "www" / "page.txt").write_bytes(page)
    port = httpload.free_port()
    server = subprocess.Popen([PYTHON, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                              cwd=tmp_path / "www", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "run"
    attacher = None
    try:
        url = f"http://127.0.0.1:{port}/page.txt"
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        load = Load(url, page)
        load.start()
        time.sleep(0.3)
        before = load.ok
        attacher = subprocess.Popen([*FERRY, "attach", "-o", str(run_dir), str(server.pid)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((run_dir / "proc").glob("*.ferry")):
            assert attacher.poll() is None, attacher.stderr.read()
            time.sleep(0.05)
        time.sleep(1.5)  # requests served while attached
        during = load.ok
        r = ferry("detach", server.pid, timeout=60)
        assert r.returncode == 0, r.stderr
        attacher.wait(timeout=30)
        time.sleep(0.5)
        load.stop.set()
        load.join(timeout=30)
        assert server.poll() is None, "the server died"
        assert load.bad == 0 and load.ok > during > before > 0
    finally:
        server.terminate()
        server.wait(timeout=10)
        if attacher and attacher.poll() is None:
            attacher.kill()
    model = load_run(run_dir)
    proc = model["processes"][0]
    assert proc["enabled"] and proc["enabled_by"] == "load-time patch" and proc["state"] == "detached"
    names = {s["name"] for s in model["syscalls"]}
    assert {"sendto", "recvfrom"} <= names or {"sendto", "read"} <= names, names
    assert model["totals"]["calls"] > 50
