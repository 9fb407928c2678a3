"""HTTP helpers shared by tests/test_fibers.py and bench/fibers.py: a free
loopback port, concurrent keep-alive clients that check every response, a
minimal apache2 (mpm_worker) configuration, stopping a server, and the CPU
time and memory of a process tree from /proc.

Only the standard library: bench/ imports it with tests/ on sys.path.
"""
import select
import http.client
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

APACHE = "/usr/sbin/apache2"
APACHE_MODULES = Path("/usr/lib/apache2/modules")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def read_listening_line(proc, timeout):
    """The port in the `listening on PORT` line a server prints once it accepts, or None
    (with the bytes read) when it exits or stays silent for `timeout` seconds."""
    deadline, line = time.monotonic() + timeout, b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            ch = os.read(proc.stdout.fileno(), 1)
            if not ch:
                break
            line += ch
        elif proc.poll() is not None:
            break
    if not line.startswith(b"listening on "):
        return None, line
    return int(line.split()[2]), line


# Ports for servers that must be told theirs (apache2, Go's and Python's test
# servers cannot pick one and say which): each pytest-xdist worker has a band
# of PORT_BAND below the kernel's ephemeral range, where neither bind(0) nor a
# client's connect picks, so that between free_port's look and the server's
# bind no test beside this one and no client of any can be given the same port.
PORT_BASE, PORT_BAND = 20000, 1000
_ports_tried = 0


def _ephemeral_low():
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port nobody listens on now, from this worker's band (or any
    the kernel picks, when the bands would reach its ephemeral range)."""
    global _ports_tried
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = PORT_BASE + index * PORT_BAND
    candidates = []
    if low + PORT_BAND <= _ephemeral_low():
        start = (os.getpid() + _ports_tried) % PORT_BAND
        candidates = [low + (start + i) % PORT_BAND for i in range(PORT_BAND)]
    for port in candidates + [0]:
        _ports_tried += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free loopback port")


def check_response(resp, body, page, content_type="text/html"):
    """'' when `resp`/`body` is the page exactly, else what differs."""
    if resp.status != 200:
        return f"status {resp.status} {resp.reason}"
    if resp.getheader("Content-Length") != str(len(page)):
        return f"Content-Length {resp.getheader('Content-Length')!r}, expected {len(page)}"
    if content_type and not (resp.getheader("Content-Type") or "").startswith(content_type):
        return f"Content-Type {resp.getheader('Content-Type')!r}"
    if body != page:
        at = next((i for i, (a, b) in enumerate(zip(body, page)) if a != b), min(len(body), len(page)))
        return f"body differs at byte {at} ({len(body)} bytes, expected {len(page)})"
    return ""


def _client(port, path, page, requests, errors, counts, timeout, same_socket):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.connect()
        sock = conn.sock
        done = 0
        for i in range(requests):
            conn.request("GET", path)
            resp = conn.getresponse()
            problem = check_response(resp, resp.read(), page)
            if problem:
                errors.append(f"request {i}: {problem}")
                break
            if same_socket and conn.sock is not sock:
                errors.append(f"request {i}: the server closed the keep-alive connection")
                break
            done += 1
        conn.close()
        counts.append(done)
    except BaseException as e:  # handed to the caller's thread
        errors.append(repr(e))


def keepalive_load(port, page, path="/", connections=20, requests=50, timeout=20, same_socket=True):
    """`connections` concurrent keep-alive clients, each making `requests`
    GETs of `path` and checking every response against `page` byte for byte.
    Returns (good responses, [problems]); a call waits `timeout` seconds at
    most, the whole load about twice that."""
    errors, counts = [], []
    threads = [threading.Thread(target=_client, daemon=True,
                                args=(port, path, page, requests, errors, counts, timeout, same_socket))
               for _ in range(connections)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2 * timeout
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    stuck = sum(t.is_alive() for t in threads)
    if stuck:
        errors.append(f"{stuck} client(s) still waiting for the server")
    return sum(counts), errors


def wait_http(port, proc, page, path="/", timeout=180):
    """Waits until the server on `port` serves `page`; '' or the problem
    (a wrong answer, the process ended, or the time ran out).  Only a refused
    or dropped connection is retried: a wrong answer will not fix itself."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the server exited ({proc.returncode}) before answering"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            resp = conn.getresponse()
            problem = check_response(resp, resp.read(), page)
            conn.close()
            return problem and f"wrong first answer: {problem}"
        except (OSError, http.client.HTTPException) as e:
            last = repr(e)
        time.sleep(0.1)
    return f"no correct answer within {timeout} s: {last}"


def stop(proc, timeout=20):
    """SIGTERM (a graceful stop for the net server, an orderly one for apache2,
    whose parent then ends its children), then SIGKILL to the whole session if
    it is still there.  The exit status, or None when it had to be killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
            return None
    return proc.returncode


def write_apache_conf(root, port, page, processes=2, threads=16, keepalive_timeout=15):
    """A self-contained apache2 configuration in `root` (mpm_worker, one static
    page as index.html, logs, pid and runtime files in `root`); returns the
    configuration file.  As root, the children run as nobody: `root` and its
    parents must be searchable by others (pytest's tmp_path is not).  Every
    process is started at once and never retired, so the server's shape does
    not change while it is measured."""
    root = Path(root)
    docs = root / "htdocs"
    docs.mkdir(parents=True, exist_ok=True)
    (root / "run").mkdir(exist_ok=True)
    (docs / "index.html").write_bytes(page)
    (root / "mime.types").write_text("text/html\thtml htm\n")
    # Children run as nobody when started by root: they must reach the page.
    for p in (root, docs, root / "run"):
        p.chmod(0o755)
    (docs / "index.html").chmod(0o644)
    user = "User nobody\nGroup nogroup\n" if os.geteuid() == 0 else ""
    mods = "\n".join(f"LoadModule {name}_module {APACHE_MODULES}/mod_{file}.so"
                     for name, file in (("mpm_worker", "mpm_worker"), ("authz_core", "authz_core"),
                                        ("mime", "mime"), ("dir", "dir")))
    workers = processes * threads
    conf = root / "apache2.conf"
    conf.write_text(f"""# written by tests/httpload.py
ServerRoot "{root}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
ListenBacklog 4096
{mods}
{user}PidFile "{root}/apache2.pid"
ErrorLog "{root}/error.log"
LogLevel warn
DefaultRuntimeDir "{root}/run"
Mutex file:{root}/run default
TypesConfig "{root}/mime.types"
DocumentRoot "{docs}"
<Directory />
    AllowOverride None
    Require all denied
</Directory>
<Directory "{docs}">
    Require all granted
</Directory>
DirectoryIndex index.html
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout {keepalive_timeout}
StartServers {processes}
ServerLimit {processes}
ThreadLimit {threads}
ThreadsPerChild {threads}
MinSpareThreads 1
MaxSpareThreads {workers}
MaxRequestWorkers {workers}
MaxConnectionsPerChild 0
""")
    return conf


def apache_cmd(conf):
    return [APACHE, "-f", str(conf), "-DFOREGROUND"]


# ---------------------------------------------------------------- /proc

def tree(pid):
    """`pid` and its descendants alive now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                try:
                    todo += [int(k) for k in (task / "children").read_text().split()]
                except OSError:
                    pass
        except OSError:
            pass
    return out


def tree_usage(pid):
    """(CPU seconds, RSS bytes) of the process tree under `pid`: user+system
    time of the live processes and of their reaped children, resident pages
    summed (shared pages count in each process, as ps counts them)."""
    cpu, rss = 0, 0
    for p in tree(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu += sum(int(x) for x in f[11:15])       # utime stime cutime cstime
        rss += int(f[21]) * PAGE_SIZE
    return cpu / CLK_TCK, rss


def find_descendant(pid, name, timeout=30):
    """The topmost process under `pid` (itself included) whose comm starts with
    `name`: the server below `ferry run` and taskset."""
    deadline = time.monotonic() + timeout
    while True:
        # tree() lists a process before its descendants: the first match is topmost.
        for p in tree(pid):
            try:
                if Path(f"/proc/{p}/comm").read_text().strip().startswith(name[:15]):
                    return p
            except OSError:
                pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
