"""Issue 16, item 4: under the fibers profile (and aggregate, which routes the
first thread's calls the same way without fibers) a program must never hang,
spin, lose data or behave otherwise than natively.

Each case of tests/programs/py_never_hang.py runs natively and under Ferry;
output and exit status must be the same.  A run that does not end within
RUN_TIMEOUT is killed with its whole session and fails; so does one that
leaves a process of its session behind (a spinning fork child)."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY, PROGRAMS, ROOT
from ferry.rundata import load_run

PROGRAM = ROOT / "tests" / "programs" / "py_never_hang.py"
PYTHON = "/usr/bin/python3"
RUN_TIMEOUT = 60

CASES = ["sigsuspend_thread", "sigsuspend_process", "alarm_read", "interrupt", "restart",
         "select_signal", "term_from_outside", "big_writes", "big_stdout", "fork_close_exec",
         "change_user", "spin", "hipri", "rtmax", "rtmax_default", "poll_restart", "poll_timeout", "siginfo",
         "epoll", "bad_descriptors", "fifo_opens", "file_opens", "exit_releases",
         "spawn_failures", "files_without_read", "terminal_reads", "background_read",
         "eventfd_writes", "sendfile"]
PROFILES = ["fibers", "two-carriers", "aggregate"]


def session_left(sid):
    """Processes still in session `sid` (ours all end with the run)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            left.append(int(pid))
    return left


def run(argv, tmp_path):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"{argv}: still running after {RUN_TIMEOUT} s (killed)\n"
                             f"--- stdout\n{out.decode(errors='replace')[-2000:]}\n"
                             f"--- stderr\n{err.decode(errors='replace')[-2000:]}") from None
    # a child that outlives the run (it spins, or blocks SIGTERM) is a failure
    for _ in range(50):
        left = session_left(proc.pid)
        if not left:
            break
        time.sleep(0.1)
    else:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"{argv}: processes {left} outlived the run")
    return proc.returncode, out, err


def ferry_argv(profile, run_dir, *argv):
    """argv of `ferry run` for `run` (which kills the whole group at its timeout)."""
    return [*FERRY, "run", "--no-learn", "-p", profile, "-o", str(run_dir), "--", *map(str, argv)]


_native = {}


def native(case, tmp_path):
    if case not in _native:
        _native[case] = run([PYTHON, PROGRAM, case], tmp_path)
    return _native[case]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("case", CASES)
def test_same_as_native(case, profile, tmp_path):
    """two-carriers: the fibers profile on two carriers, which take ready fibers
    from each other (docs/aggregate.md, "Carriers that help each other")."""
    code, out, err = native(case, tmp_path)
    profile = two_carriers(profile, tmp_path)
    got_code, got_out, got_err = run(ferry_argv(profile, tmp_path / "run", PYTHON, PROGRAM, case), tmp_path)
    assert (got_code, got_out) == (code, out), (
        f"native: exit {code}\n{out.decode(errors='replace')[-2000:]}\n"
        f"under {profile}: exit {got_code}\n{got_out.decode(errors='replace')[-2000:]}\n"
        f"--- stderr\n{got_err.decode(errors='replace')[-2000:]}")


def test_poll_with_timeout_stays_in_the_batch(tmp_path):
    """poll of one descriptor with a timeout (apache waits so for its client's
    next request) is a ring operation with a linked timeout under fibers, not a
    hand-over to a worker thread and back for each call (issue 14, low load):
    the case's 200 polls of a ready pipe leave the workers' count below 200
    (Python's own start makes a few dozen worker calls)."""
    code, out, err = run(ferry_argv("fibers", tmp_path / "run", PYTHON, PROGRAM, "poll_timeout"), tmp_path)
    assert code == 0 and b"ready 200 of 200" in out, (code, out, err)
    agg = load_run(tmp_path / "run")["aggregation"]
    assert agg["worker"] < 200, agg


def test_engine_descriptors_stay_out_of_the_way(tmp_path):
    """Started with stdout closed, the program has no io_uring or eventfd of
    the engine's (one used to become its fd 1): the engine's rings and
    eventfds are not the program's descriptors."""
    cmd = f"exec {PYTHON} {PROGRAM} lsfd >&-"
    code, out, err = run(["sh", "-c", cmd], tmp_path)
    got = run(ferry_argv("fibers", tmp_path / "run", "sh", "-c", cmd), tmp_path)
    assert (got[0], got[2]) == (code, err), (code, err, got)


@pytest.mark.parametrize("profile", ["fibers", "aggregate"])
def test_engine_descriptors_the_program_cannot_disturb(profile, tmp_path, test_programs):
    """A group made through the API under -p aggregate keeps a descriptor per
    pool (raw batches come from any thread): started with stdout closed, the
    program's first open is fd 1 as natively; the engine's descriptors are
    high and close-on-exec, the program's close of one says EBADF, its dup2
    onto one and a close_range of everything leave the engine working, and an
    exec'd child has the descriptors it has natively
    (tests/programs/agg_fds.c)."""
    program = test_programs / "agg_fds"
    cmd = f"exec {program} native >&-"
    code, out, err = run(["sh", "-c", cmd], tmp_path)
    assert err.startswith(b"first open 1\n") and err.endswith(b"done\n"), err
    how = "native" if profile == "fibers" else "fiber"
    got = run(ferry_argv(profile, tmp_path / "run", "sh", "-c", f"exec {program} {how} >&-"), tmp_path)
    assert (got[0], got[2]) == (code, err), (code, err, got)


TWO_CARRIERS = """description = "the fibers profile on two carriers"
mode = "aggregate"
[aggregate]
threads = "fibers"
carriers = 2
workers = 8
"""


def two_carriers(profile, tmp_path):
    """`profile` as `ferry run -p` takes it: "two-carriers" is TWO_CARRIERS, written out."""
    if profile != "two-carriers":
        return profile
    (tmp_path / "two.toml").write_text(TWO_CARRIERS)
    return str(tmp_path / "two.toml")


@pytest.mark.parametrize("profile", ["fibers", "two-carriers", "aggregate"])
@pytest.mark.parametrize("case", ["flag", "signal", "many", "worker", "handoff", "waiters"])
def test_threads_that_make_no_call_still_take_turns(case, profile, tmp_path):
    """Threads that spin without a system call (tests/programs/spinners.c):
    natively the kernel gives each its turn and delivers a signal to a
    running thread at once; fibers on one or two carriers must too."""
    profile = two_carriers(profile, tmp_path)
    argv = [PROGRAMS / "spinners", case]
    code, out, err = run([str(a) for a in argv], tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", *argv), tmp_path)
    assert (got[0], got[1]) == (code, out), got[2].decode(errors="replace")[-2000:]


def traced(profile, argv, syscall, tmp_path):
    """`ferry run -p profile -- argv` under strace -f tracing `syscall`:
    (exit code, stdout, stderr, strace's lines)."""
    trace = tmp_path / "strace.out"
    code, out, err = run(["/usr/bin/strace", "-f", "-qq", "-e", f"trace={syscall}", "-o", str(trace),
                          *ferry_argv(profile, tmp_path / "run", *argv)], tmp_path)
    return code, out, err, trace.read_text().splitlines()


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
def test_a_fiber_switch_makes_no_system_call(profile, tmp_path):
    """A fiber's thread pointer is set with wrfsbase where the CPU and kernel
    allow it, not with arch_prctl (a crossing per switch). fib_dropped_root
    drops root first, as a server's children do, after which it cannot read
    its own /proc/self/auxv; its two threads then hand a byte back and forth
    500 times. Two carriers used to restore the carrier's own pointer with
    arch_prctl after every round (3000 calls here)."""
    if "fsgsbase" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no FSGSBASE instructions")
    profile = two_carriers(profile, tmp_path)
    argv = [PROGRAMS / "fib_dropped_root"]
    code, out, _ = run([str(a) for a in argv], tmp_path)
    assert (code, out) == (0, b"handed 500\n")
    got_code, got_out, got_err, lines = traced(profile, argv, "arch_prctl", tmp_path)
    assert (got_code, got_out) == (code, out), got_err.decode(errors="replace")[-2000:]
    sets = sum(1 for line in lines if "ARCH_SET_FS" in line)
    assert sets < 50, f"{sets} arch_prctl(ARCH_SET_FS) for 1000 hand-overs"


QUIET = {
    "open": b"opened 300\n",
    "epoll": b"waited 300, ready 300\n",
    "append": b"appended 2590 bytes\n",
    "notify": b"notified 300\n",
    "send": b"sent 300, same 300\n",
    "memory": b"memory 300, same 300, size 2590\n",
}


@pytest.mark.parametrize("what", QUIET)
def test_a_call_alone_on_its_carrier_makes_no_ring_round_trip(what, tmp_path):
    """A thread alone on its carrier (tests/programs/quiet_calls.c: its
    companion waits on a condition variable) makes 300 calls that need not
    wait, each on the spot, not through the ring (one io_uring_enter each
    before):
      - open: an open of a regular file. Through the ring it went to an
        io-wq thread and back (it must not wait on the carrier: a FIFO's
        open waits for its other end), two thread wakes for each file a
        static-file server opens. What such opens say and leave is the
        file_opens case.
      - epoll: an epoll_wait with events ready, found by a look (timeout
        0), as an event loop under load finds them (redis).
      - append: a write to a file of a local disk (or tmpfs, overlayfs), which io_uring too
        hands to an io-wq thread (ext4 cannot write a page-cache page
        without perhaps waiting); the file must hold what it holds natively.
      - notify: a write of 1 to a blocking eventfd, a thread pool's "job
        done". io_uring has no write of an eventfd that cannot wait: it
        polled, failed again and went to io-wq, 100 us a write (nginx's
        `aio threads` at a third of its native rate).
      - send: a sendfile of a cached page to a nonblocking socket, which a
        worker thread made (nginx's thread pool sends each file so).
      - memory: writes and reads of a memfd, a tmpfs file (/dev/shm, and /tmp
        on many systems), which io_uring cannot make without an io-wq thread
        either: 30-50 us a call."""
    if what in ("append", "send") and os.major(tmp_path.stat().st_dev) == 0:
        kind = subprocess.run(["stat", "-f", "-c", "%T", tmp_path], capture_output=True, text=True).stdout.strip()
        if what == "append" and kind not in ("tmpfs", "ramfs", "overlayfs"):
            pytest.skip(f"{tmp_path} is on {kind}, whose writes may wait on another party: the ring's")
        if what == "send" and kind not in ("tmpfs", "ramfs"):
            pytest.skip(f"{tmp_path} is on {kind}, whose cached pages cannot be asked for: a worker's")
    target = tmp_path / "page.html"
    target.write_text("<p>hello</p>\n")
    argv = [PROGRAMS / "quiet_calls", what, target, 300]
    code, out, err, lines = traced("fibers", argv, "io_uring_enter", tmp_path)
    assert code == 0 and out.endswith(QUIET[what]), err.decode(errors="replace")[-2000:]
    pid = out.split()[1].decode()
    enters = sum(1 for line in lines if line.startswith(pid + " ") and "io_uring_enter(" in line)
    assert enters < 30, f"{enters} io_uring_enter for 300 calls ({what})"
    if what == "append":
        assert target.read_text() == "".join(f"line {i}\n" for i in range(300))


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
def test_an_idle_carrier_sleeps_until_woken(profile, tmp_path):
    """An idle server's shape (tests/programs/idle_waits.c): one thread
    blocked in a read, four on a condition variable, for a second. The
    carriers must sleep until the input comes. They used to look at their
    waiters' words every millisecond, in case a thread outside the engine
    changed one: ~1000 io_uring_enter a second for each carrier, where no
    such thread exists (every thread of the program is a fiber). What is
    left is the look for signals sent to the process, every 10 ms."""
    profile = two_carriers(profile, tmp_path)
    trace = tmp_path / "strace.out"
    argv = ["/usr/bin/strace", "-f", "-qq", "-e", "trace=io_uring_enter", "-o", str(trace),
            *ferry_argv(profile, tmp_path / "run", PROGRAMS / "idle_waits", 4)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(1.0)
        out, err = proc.communicate(b"go\n", timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (proc.returncode, out) == (0, b"woke 4\n"), err.decode(errors="replace")[-2000:]
    enters = sum(1 for line in trace.read_text().splitlines() if "io_uring_enter(" in line)
    assert enters < 400, f"{enters} io_uring_enter for a second of idling"


def test_a_descriptor_number_made_again_is_not_taken_for_the_old_one(tmp_path, test_programs):
    """A socket the engine read from is closed with close_range and its number made
    again by inotify_init, which the engine does not see: the read of it was tried as
    the socket's receive, and failed ENOTSOCK where the program gets its event."""
    results = []
    for how in ("native", "fibers"):
        watched = tmp_path / how
        watched.mkdir()
        argv = [test_programs / "fib_fd_reuse", watched]
        if how == "fibers":
            argv = ferry_argv("fibers", tmp_path / "run", *argv)
        results.append(run([str(a) for a in argv], tmp_path)[:2])
    assert results[0] == (0, b"read of the inotify descriptor: IN_CREATE made\n"), results
    assert results[1] == results[0], results


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
def test_a_program_with_a_large_tls_runs_its_calls_on_workers(profile, tmp_path):
    """The engine's worker threads have thread blocks of their own, on which
    the shim's code reads its TLS: that block lies below the program's TLS
    (tests/programs/big_tls.c: 64 KiB; haproxy's is 42 KiB). A worker's block
    of a fixed page did not reach it: haproxy died of SIGSEGV as its first
    worker started, before serving anything. (Under the aggregate profile a
    program that makes no group of its own has no workers.)"""
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = run([PROGRAMS / "big_tls", work], tmp_path)
    assert (code, out) == (0, b"thread 1, main 1, flock 1, entries 3\n"), err
    profile = two_carriers(profile, tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", PROGRAMS / "big_tls", work), tmp_path)
    assert got[:2] == (code, out), got[2].decode(errors="replace")[-2000:]
    assert load_run(tmp_path / "run")["aggregation"]["worker"] >= 2


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
@pytest.mark.parametrize("mode", ["nested", "park"])
def test_a_handler_of_a_signal_a_thread_raised_may_make_calls(mode, profile, tmp_path):
    """A signal a thread sends itself (raise, pthread_kill of itself) is
    raised on its carrier, and the kernel runs the handler as that call
    returns (tests/programs/raise_in_handler.c). It was sent with the fiber
    world's lock held: a handler that raised again spun for ever on the
    lock (nested), and so did a second thread's raise while the handler's
    nanosleep had parked the first (park). haproxy's watchdog does both (its
    SIGALRM handler raises SIGURG to dump a thread): it hung under fibers."""
    code, out, err = run([PROGRAMS / "raise_in_handler", mode], tmp_path)
    assert code == 0, err
    profile = two_carriers(profile, tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", PROGRAMS / "raise_in_handler", mode), tmp_path)
    assert got[:2] == (code, out), got[2].decode(errors="replace")[-2000:]


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
@pytest.mark.parametrize("mode", ["shared", "single"])
def test_a_thread_that_waits_on_its_own_ring_leaves_the_carrier_free(mode, profile, tmp_path):
    """A program's own io_uring (tests/programs/own_ring.c, liburing): a
    thread that waits for its completions (io_uring_wait_cqe) made the wait
    natively and blocked its carrier, so the thread that was to submit never
    ran (shared): MariaDB's InnoDB waits so, and mariadb-install-db hung
    under fibers. The wait goes to a worker; a SINGLE_ISSUER ring, which
    only its creator may enter, still waits on the carrier (single)."""
    code, out, err = run([PROGRAMS / "own_ring", mode], tmp_path)
    assert code == 0, err
    profile = two_carriers(profile, tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", PROGRAMS / "own_ring", mode), tmp_path)
    assert got[:2] == (code, out), got[2].decode(errors="replace")[-2000:]


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
def test_each_thread_has_its_own_alternate_signal_stack(profile, tmp_path):
    """sigaltstack(2) is per thread, and fibers share their carrier's kernel
    thread (tests/programs/altstacks.c: four threads, each with its own,
    whose SA_ONSTACK handlers sleep while the others' run). Each fiber's
    stack is now the kernel's while it runs; before, every thread's handler
    ran on the last one set, over the others' frames, as Go's do on each
    thread's. A fiber parked in a handler also went on with that handler's
    mask when it came back (the kernel sets it out of the engine's sight),
    and the fiber that ran next with it: its own raise stayed blocked."""
    code, out, err = run([PROGRAMS / "altstacks"], tmp_path)
    assert (code, out.splitlines()[-1]) == (0, b"ok"), err
    profile = two_carriers(profile, tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", PROGRAMS / "altstacks"), tmp_path)
    assert got[:2] == (code, out), got[2].decode(errors="replace")[-2000:]


@pytest.mark.parametrize("profile", ["fibers", "two-carriers"])
def test_a_thread_has_its_own_mask_again_once_its_handler_returns(profile, tmp_path):
    """The kernel sets a handler's mask as it begins and puts the thread's
    back at rt_sigreturn, both out of the engine's sight; the engine knows
    the first from rseq and the second from the shim's rt_sigreturn
    (tests/programs/handler_mask.c: four threads whose handlers block
    SIGUSR2 and sleep while the others run). Without the second, a thread
    that slept after its handler returned came back with the handler's
    mask, and its own SIGUSR2 stayed blocked."""
    code, out, err = run([PROGRAMS / "handler_mask"], tmp_path)
    assert (code, out.splitlines()[-1]) == (0, b"ok"), err
    profile = two_carriers(profile, tmp_path)
    got = run(ferry_argv(profile, tmp_path / "run", PROGRAMS / "handler_mask"), tmp_path)
    assert got[:2] == (code, out), got[2].decode(errors="replace")[-2000:]


@pytest.mark.parametrize("how", ["alone", "others"])
@pytest.mark.parametrize("profile", PROFILES)
def test_a_first_thread_that_ends_with_exit_ends_as_natively(how, profile, tmp_path, test_programs):
    """tests/programs/first_thread_exit.c: alone, under fibers, the process hung
    (the first thread, ended before it ever waited, was never released)."""
    program = test_programs / "first_thread_exit"
    code, out, _ = run([program, how], tmp_path)
    assert (code, out.count(b"\n")) == ((3, 1) if how == "alone" else (0, 2))
    got = run(ferry_argv(two_carriers(profile, tmp_path), tmp_path / "run", program, how), tmp_path)
    assert got[:2] == (code, out), got
