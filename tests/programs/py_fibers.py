"""Python threading workloads for issue 6 (threads run as fibers).

    python3 py_fibers.py sync | queue | io | futures | all

sync     Lock, RLock, Condition (notify / notify_all / wait_for with timeout),
         Event, Semaphore, BoundedSemaphore, Barrier
queue    queue.Queue producers and consumers, a bounded queue, PriorityQueue
io       ThreadPoolExecutor.map over a function doing file I/O, socketpair
         I/O and a loopback TCP echo (a server thread, one connection per call)
futures  concurrent.futures with exceptions, as_completed, wait, cancel;
         threading.local; threading.Timer (fired and cancelled)

Everything printed is deterministic: results are gathered and printed in a
fixed order by the main thread, never timings, thread ids or addresses.
"""
import concurrent.futures as cf
import hashlib
import os
import queue
import socket
import sys
import tempfile
import threading
import time


def out(*args):
    print(*args, flush=True)


# ---------------------------------------------------------------- sync

def run_sync():
    lock = threading.Lock()
    counter = [0]

    def bump(n):
        for i in range(n):
            with lock:
                v = counter[0]
                if i % 500 == 0:
                    time.sleep(0)   # give the GIL away inside the critical section
                counter[0] = v + 1

    ts = [threading.Thread(target=bump, args=(3000,)) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out("lock: counter", counter[0])

    rlock = threading.RLock()

    def nested(depth):
        with rlock:
            return 1 if depth == 0 else 1 + nested(depth - 1)

    depths = []
    ts = [threading.Thread(target=lambda: depths.append(nested(20))) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out("rlock: depths", sorted(depths))
    out("lock: acquire(blocking=False) on a held lock:", end_held(lock))

    # Condition: notify one at a time, then notify_all.
    cond = threading.Condition()
    state = {"tokens": 0, "go": False, "took": 0, "woke": 0, "ready": 0}

    def taker():
        with cond:
            state["ready"] += 1
            cond.notify_all()
            cond.wait_for(lambda: state["tokens"] > 0 or state["go"])
            if state["tokens"] > 0:
                state["tokens"] -= 1
                state["took"] += 1
                cond.notify_all()   # main waits for the count
            else:
                state["woke"] += 1

    ts = [threading.Thread(target=taker) for _ in range(6)]
    for t in ts:
        t.start()
    with cond:
        cond.wait_for(lambda: state["ready"] == 6)
    for _ in range(3):
        with cond:
            state["tokens"] += 1
            cond.notify()
    with cond:
        cond.wait_for(lambda: state["took"] == 3)
        state["go"] = True
        cond.notify_all()
    for t in ts:
        t.join()
    out("condition: took", state["took"], "woken by notify_all", state["woke"])
    with cond:
        out("condition: wait_for(timeout) unsatisfied ->", cond.wait_for(lambda: False, timeout=0.05))

    ev = threading.Event()
    seen = []

    def waiter(i):
        if ev.wait(timeout=30):
            seen.append(i)

    ts = [threading.Thread(target=waiter, args=(i,)) for i in range(5)]
    for t in ts:
        t.start()
    out("event: wait(timeout) before set ->", threading.Event().wait(0.05))
    ev.set()
    for t in ts:
        t.join()
    out("event: waiters released", sorted(seen))

    sem = threading.Semaphore(3)
    inside, peak = [0], [0]
    guard = threading.Lock()

    def limited():
        with sem:
            with guard:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.005)
            with guard:
                inside[0] -= 1

    ts = [threading.Thread(target=limited) for _ in range(12)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out("semaphore: at most 3 inside:", 1 <= peak[0] <= 3)
    bsem = threading.BoundedSemaphore(2)
    bsem.acquire()
    bsem.release()
    try:
        bsem.release()
        out("bounded semaphore: over-release allowed (wrong)")
    except ValueError:
        out("bounded semaphore: over-release raises ValueError")

    barrier = threading.Barrier(5)
    indices = []

    def at_barrier():
        for _ in range(10):
            indices.append(barrier.wait())

    ts = [threading.Thread(target=at_barrier) for _ in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out("barrier: 10 rounds, index 0 seen", indices.count(0), "times; indices", sorted(set(indices)))
    try:
        threading.Barrier(2).wait(timeout=0.05)
    except threading.BrokenBarrierError:
        out("barrier: wait(timeout) alone -> BrokenBarrierError")


def end_held(lock):
    with lock:
        got = [None]
        t = threading.Thread(target=lambda: got.__setitem__(0, lock.acquire(blocking=False)))
        t.start()
        t.join()
        return got[0]


# ---------------------------------------------------------------- queue

def run_queue():
    q = queue.Queue(maxsize=8)
    producers, consumers, items = 4, 3, 2000
    sums = []
    lock = threading.Lock()

    def produce(k):
        for i in range(items):
            q.put(k * items + i)

    def consume():
        total = n = 0
        while True:
            v = q.get()
            if v is None:
                q.task_done()
                break
            total += v
            n += 1
            q.task_done()
        with lock:
            sums.append((n, total))

    cs = [threading.Thread(target=consume) for _ in range(consumers)]
    ps = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    for t in cs + ps:
        t.start()
    for t in ps:
        t.join()
    for _ in cs:
        q.put(None)
    q.join()
    for t in cs:
        t.join()
    n = sum(s[0] for s in sums)
    total = sum(s[1] for s in sums)
    want = producers * items
    out("queue: consumed", n, "items, sum ok:", total == want * (want - 1) // 2)

    try:
        queue.Queue(maxsize=1).get(timeout=0.05)
    except queue.Empty:
        out("queue: get(timeout) on empty -> Empty")
    full = queue.Queue(maxsize=1)
    full.put(1)
    try:
        full.put(2, timeout=0.05)
    except queue.Full:
        out("queue: put(timeout) on full -> Full")

    pq = queue.PriorityQueue()
    ws = [threading.Thread(target=lambda k=k: [pq.put((i * 7 + k) % 101) for i in range(50)])
          for k in range(4)]
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    drained = [pq.get() for _ in range(pq.qsize())]
    out("priority queue: sorted", drained == sorted(drained), "count", len(drained))

    # A pipeline of stages linked by queues.
    stages = [queue.Queue() for _ in range(4)]
    result = queue.Queue()

    def stage(i):
        while True:
            v = stages[i].get()
            if v is None:
                (stages[i + 1] if i + 1 < len(stages) else result).put(None)
                return
            (stages[i + 1] if i + 1 < len(stages) else result).put(v * 2 + i)

    ts = [threading.Thread(target=stage, args=(i,)) for i in range(len(stages))]
    for t in ts:
        t.start()
    for v in range(500):
        stages[0].put(v)
    stages[0].put(None)
    got = []
    while (v := result.get()) is not None:
        got.append(v)
    for t in ts:
        t.join()
    out("pipeline: 4 stages,", len(got), "values, digest", hashlib.sha256(repr(got).encode()).hexdigest()[:16])


# ---------------------------------------------------------------- io

def echo_server(listener, stop):
    """Accepts until `stop`; one thread per connection, echoing until EOF."""
    conns = []
    while not stop.is_set():
        try:
            c, _ = listener.accept()
        except OSError:
            break

        def echo(c=c):
            with c:
                while data := c.recv(65536):
                    c.sendall(data)

        t = threading.Thread(target=echo)
        t.start()
        conns.append(t)
    for t in conns:
        t.join()


def io_task(args):
    i, tmp, port = args
    payload = hashlib.sha256(str(i).encode()).digest() * (50 + i)
    # File: write, fsync, read back at an offset.
    path = os.path.join(tmp, f"f{i}")
    with open(path, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    with open(path, "rb") as f:
        f.seek(len(payload) // 2)
        back = f.read()
    ok_file = back == payload[len(payload) // 2:]
    # socketpair: a blocking exchange with a helper thread.
    a, b = socket.socketpair()
    with a, b:
        t = threading.Thread(target=lambda: b.sendall(b.recv(4096)[::-1]))
        t.start()
        a.sendall(payload[:64])
        got = b""
        while len(got) < 64:
            got += a.recv(64 - len(got))
        t.join()
    ok_pair = got == payload[:64][::-1]
    # Loopback TCP: the whole payload through the echo server.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        echoed = b""
        while chunk := s.recv(65536):
            echoed += chunk
    ok_tcp = echoed == payload
    return i, len(payload), ok_file, ok_pair, ok_tcp


def run_io():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(None)
    port = listener.getsockname()[1]
    stop = threading.Event()
    srv = threading.Thread(target=echo_server, args=(listener, stop))
    srv.start()
    try:
        with tempfile.TemporaryDirectory() as tmp, cf.ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(io_task, [(i, tmp, port) for i in range(40)]))
    finally:
        stop.set()
        # Wakes the blocked accept: it fails once the socket is shut down.
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        srv.join()
    out("io: tasks", len(results), "in order:", [r[0] for r in results] == list(range(40)))
    out("io: bytes", sum(r[1] for r in results))
    out("io: file ok", sum(r[2] for r in results), "socketpair ok", sum(r[3] for r in results),
        "tcp echo ok", sum(r[4] for r in results))


# ---------------------------------------------------------------- futures, local, timers

class Boom(Exception):
    pass


def maybe_fail(i):
    time.sleep(0.001 * (i % 3))
    if i % 5 == 0:
        raise Boom(f"task {i}")
    return i * i


def run_futures():
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        futs = {pool.submit(maybe_fail, i): i for i in range(20)}
        done = {}
        for f in cf.as_completed(futs):
            try:
                done[futs[f]] = ("ok", f.result())
            except Boom as e:
                done[futs[f]] = ("raised", str(e))
        out("futures: results", [done[i] for i in range(20)])
        try:
            list(pool.map(maybe_fail, [1, 2, 5, 6]))
        except Boom as e:
            out("futures: map re-raises", repr(e))
        waited = cf.wait([pool.submit(maybe_fail, i) for i in (1, 5, 7)], return_when=cf.ALL_COMPLETED)
        out("futures: wait ->", len(waited.done), "done,", len(waited.not_done), "not done,",
            sum(f.exception() is not None for f in waited.done), "raised")

    # A task that waits on an event keeps the only worker busy, so the one
    # queued behind it can still be cancelled.
    gate, started = threading.Event(), threading.Event()

    def gated():
        started.set()
        return gate.wait(30)

    with cf.ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(gated)
        second = pool.submit(maybe_fail, 3)
        started.wait(30)
        out("futures: cancel queued ->", second.cancel(), "; cancel running ->", first.cancel())
        gate.set()
        out("futures: first result", first.result(), "second cancelled", second.cancelled())

    local = threading.local()
    local.name = "main"
    seen = []
    lock = threading.Lock()

    def use_local(i):
        had = hasattr(local, "name")
        local.name = f"t{i}"
        local.items = [i] * i
        time.sleep(0.002)
        with lock:
            seen.append((i, had, local.name == f"t{i}", sum(local.items) == i * i))

    ts = [threading.Thread(target=use_local, args=(i,)) for i in range(10)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    seen.sort()
    out("local: fresh in every thread", not any(s[1] for s in seen),
        "; private values", all(s[2] and s[3] for s in seen), "; main keeps", local.name)

    fired = []
    done = threading.Event()
    timers = [threading.Timer(0.01 * (k + 1), lambda k=k: (fired.append(k), k == 2 and done.set()))
              for k in range(3)]
    cancelled = threading.Timer(0.02, lambda: fired.append("cancelled one"))
    for t in timers + [cancelled]:
        t.start()
    cancelled.cancel()
    done.wait(30)
    for t in timers + [cancelled]:
        t.join()
    out("timer: fired", sorted(fired), "cancelled alive", cancelled.is_alive())
    out("threads left:", threading.active_count())


COMMANDS = {"sync": run_sync, "queue": run_queue, "io": run_io, "futures": run_futures}

if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what != "all" and what not in COMMANDS:
        print(f"usage: {sys.argv[0]} {'|'.join(COMMANDS)}|all", file=sys.stderr)
        sys.exit(2)
    for name, fn in COMMANDS.items():
        if what in ("all", name):
            out(f"== {name}")
            fn()
