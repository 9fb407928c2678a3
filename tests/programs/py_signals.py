"""Signals in the Python interpreter: signal.setitimer firing every 10 ms
while the main thread blocks in os.read, select.select and time.sleep, which
the interpreter restarts (PEP 475); then a handler that raises interrupts a
blocking read.  Prints deterministic results (never the number of signals)."""
import os
import select
import signal
import time

hits = 0


def on_alarm(signum, frame):
    global hits
    hits += 1


def delayed_writer(data, delay):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        time.sleep(delay)
        os.write(w, data)
        os._exit(0)
    os.close(w)
    return r, pid


def wait_child(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


signal.signal(signal.SIGALRM, on_alarm)

# Blocking read, interrupted and retried.
r, pid = delayed_writer(b"read after delay\n", 0.2)
hits = 0
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
data = os.read(r, 100)
signal.setitimer(signal.ITIMER_REAL, 0)
print("read:", data, "interrupted:", hits > 0, "child:", wait_child(pid))
os.close(r)

# select.select, interrupted and retried.
r, pid = delayed_writer(b"select after delay\n", 0.2)
hits = 0
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
ready, _, _ = select.select([r], [], [], 20)
signal.setitimer(signal.ITIMER_REAL, 0)
print("select ready:", ready == [r], "data:", os.read(r, 100), "interrupted:", hits > 0,
      "child:", wait_child(pid))
os.close(r)

# time.sleep resumes after the handler (PEP 475).
hits = 0
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
t0 = time.monotonic()
time.sleep(0.15)
elapsed = time.monotonic() - t0
signal.setitimer(signal.ITIMER_REAL, 0)
print("sleep complete:", elapsed >= 0.15, "interrupted:", hits > 0)


# A handler that raises ends the blocking read.
class Timeout(Exception):
    pass


def raising(signum, frame):
    raise Timeout()


signal.signal(signal.SIGALRM, raising)
r, w = os.pipe()
signal.setitimer(signal.ITIMER_REAL, 0.05)
try:
    os.read(r, 10)
    print("read returned?")
except Timeout:
    print("read interrupted by the handler's exception")
signal.setitimer(signal.ITIMER_REAL, 0)
os.close(r)
os.close(w)

# signal.pthread_kill / sigwait on a blocked signal.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.kill(os.getpid(), signal.SIGUSR1)
print("sigwait:", signal.sigwait({signal.SIGUSR1}) == signal.SIGUSR1)
print("pending after sigwait:", signal.sigpending())
