"""Threads in the Python interpreter: locks, conditions, queues, barriers,
events, semaphores, thread-local data and a ThreadPoolExecutor.  The output is
deterministic (results are collected, then printed in a fixed order)."""
import hashlib
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

PID = os.getpid()

# Lock: 8 threads increment a shared counter.
lock = threading.Lock()
counter = 0


def increment(n):
    global counter
    for _ in range(n):
        with lock:
            counter += 1


threads = [threading.Thread(target=increment, args=(5000,)) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("lock counter:", counter)

# Condition: producer / consumer in lock step.
cond = threading.Condition()
items = []
consumed = []


def producer():
    for i in range(200):
        with cond:
            items.append(i)
            cond.notify()


def consumer():
    while len(consumed) < 200:
        with cond:
            cond.wait_for(lambda: items, timeout=10)
            consumed.extend(items)
            items.clear()


c = threading.Thread(target=consumer)
p = threading.Thread(target=producer)
c.start()
p.start()
p.join()
c.join()
print("condition consumed:", len(consumed), "in order:", consumed == list(range(200)))

# Queue: workers square numbers until they get a sentinel.
tasks = queue.Queue(maxsize=4)
done = queue.Queue()


def worker():
    while True:
        item = tasks.get()
        if item is None:
            tasks.task_done()
            return
        done.put((item, item * item, threading.get_ident() != 0))
        tasks.task_done()


workers = [threading.Thread(target=worker) for _ in range(4)]
for w in workers:
    w.start()
for i in range(300):
    tasks.put(i)
for _ in workers:
    tasks.put(None)
tasks.join()
for w in workers:
    w.join()
results = sorted(done.get() for _ in range(done.qsize()))
print("queue results:", len(results), "sum of squares:", sum(r[1] for r in results),
      "all ok:", all(r[2] for r in results))

# Barrier, Event, Semaphore and thread-local data.
barrier = threading.Barrier(5)
start = threading.Event()
sem = threading.Semaphore(2)
local = threading.local()
seen = []
seen_lock = threading.Lock()
in_sem = 0
max_in_sem = 0


def party(n):
    global in_sem, max_in_sem
    local.value = n * 10
    start.wait(10)
    index = barrier.wait(10)
    with sem:
        with seen_lock:
            in_sem += 1
            max_in_sem = max(max_in_sem, in_sem)
        hashlib.sha256(str(n).encode() * 1000).hexdigest()
        with seen_lock:
            in_sem -= 1
    with seen_lock:
        seen.append((n, local.value, 0 <= index < 5))


parties = [threading.Thread(target=party, args=(n,)) for n in range(5)]
for t in parties:
    t.start()
start.set()
for t in parties:
    t.join()
print("barrier parties:", sorted(seen))
print("semaphore respected:", max_in_sem <= 2)
print("main thread has no local value:", not hasattr(local, "value"))


# ThreadPoolExecutor.
def job(i):
    return i, hashlib.sha256(f"job {i}".encode()).hexdigest()[:16], os.getpid() == PID


with ThreadPoolExecutor(max_workers=6) as ex:
    out = list(ex.map(job, range(120)))
print("pool jobs:", len(out), "same process:", all(r[2] for r in out))
print("pool first:", out[0][:2], "last:", out[-1][:2])
digest = hashlib.sha256("".join(r[1] for r in out).encode()).hexdigest()
print("pool digest:", digest)
print("threads left:", threading.active_count())
