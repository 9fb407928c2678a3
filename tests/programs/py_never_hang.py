"""What the fibers profile used to hang on (issue 16, item 4).  One case per
run (argv[1]); each prints deterministic results, never a time or a count
that depends on scheduling, so a run under Ferry must print what the native
run prints.  A case that hangs is caught by the test's timeout."""
import ctypes
import errno
import fcntl
import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)


class Boom(Exception):
    pass


def boom(signum, frame):
    raise Boom()


def later(delay, fn):
    threading.Timer(delay, fn).start()


def killer(delay, sig):
    """A process that sends `sig` to this one after `delay` s: a signal from
    outside the process."""
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        time.sleep(delay)
        os.kill(me, sig)
        os._exit(0)
    return pid


def sigsuspend(how):
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    main = threading.main_thread().ident
    if how == "thread":
        later(0.2, lambda: signal.pthread_kill(main, signal.SIGUSR1))
    else:
        child = killer(0.2, signal.SIGUSR1)
    empty = ctypes.c_uint64(0)
    r = libc.sigsuspend(ctypes.byref(empty))
    print("sigsuspend", r, ctypes.get_errno() == errno.EINTR, got)
    if how != "thread":
        os.waitpid(child, 0)


def raised_out_of(name, wait):
    """`wait(fd)` on an empty pipe, cut short after 1 s by SIGALRM, whose
    handler raises: natively the exception comes out of the call."""
    signal.signal(signal.SIGALRM, boom)
    r, w = os.pipe()
    signal.alarm(1)
    try:
        wait(r)
        print(name, "returned")
    except Boom:
        print("handler raised out of", name)


def alarm_read():
    raised_out_of("read", lambda r: os.read(r, 10))


def interrupt(restart):
    """siginterrupt: without SA_RESTART a blocked read ends with EINTR; with
    it the read goes on and gets what a child writes later."""
    hits = []
    signal.signal(signal.SIGALRM, lambda s, f: hits.append(s))
    signal.siginterrupt(signal.SIGALRM, not restart)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        time.sleep(2)
        os.write(w, b"x")
        os._exit(0)
    signal.alarm(1)
    buf = ctypes.create_string_buffer(10)
    n = libc.read(r, buf, 10)
    print("read", n, errno.errorcode.get(ctypes.get_errno(), 0) if n < 0 else buf.raw[:n], hits)
    os.waitpid(pid, 0)


def select_signal():
    raised_out_of("select", lambda r: select.select([r], [], []))


def term_from_outside():
    """SIGTERM from another process while the only thread blocks in a read:
    the default action ends the process."""
    r, w = os.pipe()
    killer(0.3, signal.SIGTERM)
    os.read(r, 1)
    print("not reached")


def drain(fd, out):
    h = hashlib.sha256()
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        h.update(b)
    out.append(h.hexdigest()[:16])


def big_writes():
    """Blocking writes larger than a pipe's or a socket's buffer: all of it
    goes, as natively."""
    data = bytes(range(256)) * 4000  # 1,024,000 bytes
    for kind in ["write", "writev", "send", "sendmsg", "sendto"]:
        if kind.startswith("send"):
            a, b = socket.socketpair()
            r, w = a.fileno(), b
        else:
            r, w = os.pipe()
        out = []
        t = threading.Thread(target=drain, args=(r, out))
        t.start()
        if kind == "write":
            n = os.write(w, data)
        elif kind == "writev":
            n = os.writev(w, [data[:300000], data[300000:700001], b"", data[700001:]])
        elif kind == "send":
            n = w.send(data)
        elif kind == "sendmsg":
            n = w.sendmsg([data[:1000], data[1000:]])
        else:
            n = libc.sendto(w.fileno(), data, len(data), 0, None, 0)
        if kind.startswith("send"):
            w.shutdown(socket.SHUT_WR)
        else:
            os.close(w)
        t.join()
        print(kind, n, out)
    # a FIFO
    path = f"/tmp/ferry-never-hang-{os.getpid()}.fifo"
    os.mkfifo(path)
    try:
        out = []
        t = threading.Thread(target=lambda: drain(os.open(path, os.O_RDONLY), out))
        t.start()
        w = os.open(path, os.O_WRONLY)
        n = os.write(w, data)
        os.close(w)
        t.join()
        print("fifo", n, out)
    finally:
        os.unlink(path)


def big_stdout():
    data = b"".join(b"%07d\n" % i for i in range(500000))  # 4,000,000 bytes
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def fork_close_exec():
    """Children that close every inherited descriptor before exec, one at a
    time and with close_range, then a child that lists what it inherited."""
    for how in ["loop", "range"]:
        pid = os.fork()
        if pid == 0:
            if how == "loop":
                for fd in range(3, 1024):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            else:
                os.closerange(3, 1 << 20)
            os.execv("/bin/echo", ["echo", "child", how])
        _, status = os.waitpid(pid, 0)
        print(how, os.waitstatus_to_exitcode(status), flush=True)
    for pass_fds in [(), (os.pipe()[1],)]:
        r = subprocess.run(["/bin/ls", "-l", "/proc/self/fd"], capture_output=True, text=True,
                           pass_fds=pass_fds)
        print("a child's anonymous descriptors:", anon(r.stdout.splitlines()), "passed", len(pass_fds))


def anon(lines):
    """io_uring, eventfd and other anonymous inodes among `ls -l` lines or
    link targets: the engine's own would show here (natively: none)."""
    return sorted(x.split("anon_inode:")[1] for x in lines if "anon_inode:" in x)


def change_user():
    if os.geteuid() != 0:
        print("not root: nothing to do")
        return
    r = subprocess.run(["/usr/bin/id", "-u"], user=65534, group=65534, extra_groups=[],
                       capture_output=True, text=True)
    print("as", r.stdout.strip(), "exit", r.returncode)


def spin_until_set(delay):
    """Spin on a flag another thread sets after `delay` s: both must run."""
    flag = []
    t = threading.Thread(target=lambda: (time.sleep(delay), flag.append(1)))
    t.start()
    while not flag:
        pass
    t.join()


def spin():
    spin_until_set(0.1)
    print("flag seen")


def siginfo():
    """What sigwaitinfo says of a signal: a child's exit, a kill from this
    process, from another of its threads."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGUSR1})
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    si = signal.sigwaitinfo({signal.SIGCHLD})
    print("child", si.si_signo, si.si_code, si.si_status, si.si_pid == pid)
    os.waitpid(pid, 0)
    os.kill(os.getpid(), signal.SIGUSR1)
    si = signal.sigwaitinfo({signal.SIGUSR1})
    print("kill", si.si_code, si.si_pid == os.getpid(), si.si_uid == os.getuid())
    t = threading.Thread(target=lambda: os.kill(os.getpid(), signal.SIGUSR1))
    t.start()
    t.join()
    si = signal.sigwaitinfo({signal.SIGUSR1})
    print("kill from a thread", si.si_code, si.si_pid == os.getpid())
    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
    si = signal.sigwaitinfo({signal.SIGUSR1})
    print("tgkill", si.si_code, si.si_pid == os.getpid())


def timeout_then_event(wait, r, w, mask):
    """`wait(seconds)` on pipe r: 0.2 s with nothing, then an event that
    another thread's write on w brings."""
    t0 = time.monotonic()
    print("timeout", wait(0.2), time.monotonic() - t0 >= 0.19)
    later(0.1, lambda: os.write(w, b"x"))
    print("event", wait(5) == [(r, mask)])
    os.read(r, 1)


def epoll_cases():
    """epoll_wait as natively (under fibers on Linux 6.15+ io_uring waits for
    it, with its timeout linked): a timeout with no event, an event from
    another thread, a wait without timeout, a handler that raises, errors."""
    ep = select.epoll()
    r, w = os.pipe()
    ep.register(r, select.EPOLLIN)
    timeout_then_event(ep.poll, r, w, select.EPOLLIN)
    later(0.1, lambda: os.write(w, b"y"))
    print("forever", ep.poll(-1) == [(r, select.EPOLLIN)])
    os.read(r, 1)
    signal.signal(signal.SIGALRM, boom)
    signal.alarm(1)
    try:
        ep.poll(-1)
    except Boom:
        print("handler raised out of epoll_wait")
    events = (ctypes.c_char * 64)()
    for fd, n in ((ep.fileno(), 0), (r, 4), (999, 4)):
        got = libc.epoll_wait(fd, events, n, 10)
        print("epoll_wait", got, errno.errorcode.get(ctypes.get_errno()) if got < 0 else "")
    ts = (ctypes.c_long * 2)(0, 50000000)
    print("epoll_pwait2", libc.syscall(441, ep.fileno(), events, 4, ts, None, 8))


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


POLLS_READY = 200


def poll_timeout():
    """poll of one descriptor with a timeout (under fibers io_uring waits for
    it, the timeout linked): no event, an event from another thread, what
    revents says after a timeout, a handler that raises."""
    r, w = os.pipe()
    p = select.poll()
    p.register(r, select.POLLIN)
    timeout_then_event(lambda seconds: p.poll(seconds * 1000), r, w, select.POLLIN)
    pfd = PollFd(r, select.POLLIN, 0x7777)
    print("revents after a timeout", libc.poll(ctypes.byref(pfd), 1, 20), pfd.revents)
    signal.signal(signal.SIGALRM, boom)
    signal.alarm(1)
    try:
        p.poll(10000)
    except Boom:
        print("handler raised out of poll")
    pfd = PollFd(999, select.POLLIN, 0)
    print("closed descriptor", libc.poll(ctypes.byref(pfd), 1, 20), pfd.revents)
    os.write(w, b"z")
    print("ready", sum(len(p.poll(1000)) for _ in range(POLLS_READY)), "of", POLLS_READY)


def poll_restart():
    """A handler with SA_RESTART: read runs again, poll never does (signal(7))."""
    signal.signal(signal.SIGALRM, lambda s, f: None)
    signal.siginterrupt(signal.SIGALRM, False)
    r, w = os.pipe()
    pfd = PollFd(r, select.POLLIN, 0)
    signal.alarm(1)
    n = libc.poll(ctypes.byref(pfd), 1, -1)
    print("poll", n, errno.errorcode.get(ctypes.get_errno()) if n < 0 else "")


def rtmax():
    """The program's own SIGRTMAX (under fibers the engine preempts with it):
    its handler, its disposition, what a child inherits, while the engine's
    own ticks come and go (the spin below lasts many of them)."""
    got = []
    print("before", signal.signal(signal.SIGRTMAX, lambda s, f: got.append(s)))
    os.kill(os.getpid(), signal.SIGRTMAX)
    spin_until_set(0.2)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGRTMAX)
    print("handled", got)
    signal.signal(signal.SIGRTMAX, signal.SIG_IGN)
    status = subprocess.run(["/bin/cat", "/proc/self/status"], capture_output=True, text=True).stdout
    ign = int(next(line for line in status.splitlines() if line.startswith("SigIgn")).split()[1], 16)
    print("child ignores SIGRTMAX", bool(ign >> (signal.SIGRTMAX - 1) & 1))
    print("after", signal.signal(signal.SIGRTMAX, signal.SIG_DFL))


def rtmax_default():
    """SIGRTMAX with its default action ends the process."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGRTMAX)
    time.sleep(5)
    print("not reached")


def hipri():
    fd = os.open("/etc/passwd", os.O_RDONLY)
    buf = bytearray(64)
    n = os.preadv(fd, [buf], 0, os.RWF_HIPRI)
    print("preadv2 RWF_HIPRI", n, bytes(buf[:n]) == open("/etc/passwd", "rb").read(64))


def lsfd():
    """Started with stdout closed: the anonymous descriptors the program
    has (on stderr)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    print("anonymous:", anon(targets), file=sys.stderr)


def bad_descriptors():
    """Calls on descriptors that are not open, or given with bits above the
    int the kernel reads: a socket closed under its object (Python then asks
    recvfrom(-1)), a number past any table, a negative one; and a pipe's
    descriptor with bit 32 set, which the kernel reads as the pipe's."""
    a, b = socket.socketpair()
    f = a.makefile("rb", 0)
    a.close()                      # the file keeps the socket open
    b.send(b"hi")
    print("through the file's socket", a.recv(10))
    f.close()
    tries = (("recv", lambda: a.recv(10)), ("send", lambda: a.send(b"x")),
             ("read -1", lambda: os.read(-1, 10)), ("read 70000", lambda: os.read(70000, 10)),
             ("write 70000", lambda: os.write(70000, b"x")), ("fstat 70000", lambda: os.fstat(70000)))
    for what, call in tries:
        try:
            call()
            print(what, "no error")
        except OSError as e:
            print(what, errno.errorcode.get(e.errno))
    b.close()
    r, w = os.pipe()
    os.write(w, b"abc")
    buf = ctypes.create_string_buffer(8)
    got = libc.syscall(0, ctypes.c_long(r | 1 << 32), buf, ctypes.c_long(8))   # read
    print("read with bit 32", got, buf.raw[:max(got, 0)])


def fifo_opens():
    """A FIFO's blocking open waits for the other end (io_uring's first,
    nonblocking try does not: the writer got ENXIO, the reader returned at
    once); cut short by a handler it says EINTR (io_uring's worker said
    ERESTARTSYS, 512), and under SA_RESTART it goes on until the other end
    comes."""
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "fifo")
    os.mkfifo(path)

    def other_end(delay, flags, data=b""):
        pid = os.fork()
        if pid == 0:
            time.sleep(delay)
            fd = os.open(path, flags)
            if data:
                os.write(fd, data)
            else:
                print("other end read", os.read(fd, 10), flush=True)
            os._exit(0)
        return pid

    pid = other_end(0.3, os.O_RDONLY)
    fd = os.open(path, os.O_WRONLY)
    print("writer opened", flush=True)
    os.write(fd, b"to reader")
    os.close(fd)
    os.waitpid(pid, 0)
    pid = other_end(0.3, os.O_WRONLY, b"to writer")
    fd = os.open(path, os.O_RDONLY)
    print("reader opened, read", os.read(fd, 10), flush=True)
    os.close(fd)
    os.waitpid(pid, 0)
    hits = []
    signal.signal(signal.SIGALRM, lambda s, f: hits.append(s))
    for restart in (False, True):
        for flags in (os.O_WRONLY, os.O_WRONLY | os.O_CREAT):
            signal.siginterrupt(signal.SIGALRM, not restart)
            pid = other_end(1.5, os.O_RDONLY)
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            fd = libc.open(path.encode(), flags, 0o644)
            err = ctypes.get_errno()
            print("restart" if restart else "interrupt", flags, "->",
                  "fd" if fd >= 0 else errno.errorcode.get(err, err), len(hits), flush=True)
            if fd < 0:   # the other end still comes: meet it
                fd = os.open(path, os.O_WRONLY)
            os.write(fd, b"x")
            os.close(fd)
            os.waitpid(pid, 0)
            hits.clear()


def file_opens():
    """Opens of files and directories a fiber alone on its carrier makes on
    the spot (O_PATH look, then the open with O_NONBLOCK taken off again):
    each must say and leave what the open itself would.  Each line: the
    case, then the errno or the descriptor's status flags (F_GETFL, without
    O_LARGEFILE, which Python's own open may add), close-on-exec, and what
    a read or write through it did."""
    import tempfile
    d = tempfile.mkdtemp()
    f = os.path.join(d, "file")
    with open(f, "wb") as out:
        out.write(b"first\n")
    os.symlink(f, os.path.join(d, "link"))
    os.mkdir(os.path.join(d, "sub"))
    os.mkfifo(os.path.join(d, "fifo"))
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    cases = [
        ("read", "file", os.O_RDONLY),
        ("append", "file", os.O_WRONLY | os.O_APPEND),
        ("nonblock", "file", os.O_RDONLY | os.O_NONBLOCK),
        ("cloexec", "file", os.O_RDONLY | os.O_CLOEXEC),
        ("rdwr-noatime", "file", os.O_RDWR | getattr(os, "O_NOATIME", 0)),
        ("through-link", "link", os.O_RDONLY),
        ("nofollow-link", "link", os.O_RDONLY | os.O_NOFOLLOW),
        ("directory", "sub", os.O_RDONLY | os.O_DIRECTORY),
        ("file-as-directory", "file", os.O_RDONLY | os.O_DIRECTORY),
        ("directory-for-writing", "sub", os.O_WRONLY),
        ("missing", "nothing", os.O_RDONLY),
        ("fifo-nonblock", "fifo", os.O_RDONLY | os.O_NONBLOCK),
        ("fifo-no-reader", "fifo", os.O_WRONLY | os.O_NONBLOCK),
    ]
    large = getattr(os, "O_LARGEFILE", 0)
    for i, (name, what, flags) in enumerate(cases):
        at_dir = i % 2 == 1   # openat relative to a directory, or a whole path
        try:
            if at_dir:
                fd = os.open(what, flags, dir_fd=dfd)
            else:
                fd = os.open(os.path.join(d, what), flags)
        except OSError as e:
            print(name, errno.errorcode.get(e.errno, e.errno), flush=True)
            continue
        fl = fcntl.fcntl(fd, fcntl.F_GETFL) & ~large
        cloexec = bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
        done = ""
        if name == "append":
            done = os.write(fd, b"more\n")
        elif name in ("read", "through-link", "nonblock"):
            done = os.read(fd, 100)
        print(name, oct(fl), cloexec, done, flush=True)
        os.close(fd)
    with open(f, "rb") as back:
        print("file now", back.read())
    os.close(dfd)


EXITING_CHILD = """if 1:
    import os, socket, sys, threading
    r, go, report = map(int, sys.argv[1:])
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    threading.Thread(target=os.read, args=(r, 1), daemon=True).start()
    threading.Thread(target=s.accept, daemon=True).start()
    os.write(report, str(s.getsockname()[1]).encode())
    os.read(go, 1)
"""


def exit_releases():
    """A process that exits while threads of its wait in a pipe read and an
    accept: once its parent has reaped it, the pipe has no reader (a write
    gets EPIPE) and its port is free (a new listener binds it).  Under the
    fibers profile those calls sat in a ring, whose requests the kernel
    cancels only after the process could be reaped."""
    for _ in range(3):
        r, w = os.pipe()
        go_r, go_w = os.pipe()
        rep_r, rep_w = os.pipe()
        child = subprocess.Popen([sys.executable, "-c", EXITING_CHILD, str(r), str(go_r), str(rep_w)],
                                 pass_fds=[r, go_r, rep_w])
        for fd in (r, go_r, rep_w):
            os.close(fd)
        port = int(os.read(rep_r, 16))
        time.sleep(0.2)     # its threads are parked in their calls
        os.write(go_w, b"x")
        child.wait()
        try:
            os.write(w, b"x")
            print("write to the pipe it read: written", flush=True)
        except BrokenPipeError:
            print("write to the pipe it read: EPIPE", flush=True)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            print("bind its port: bound", flush=True)
        except OSError as e:
            print("bind its port:", errno.errorcode.get(e.errno, e.errno), flush=True)
        s.close()
        for fd in (w, go_w, rep_r):
            os.close(fd)


def spawn_failures():
    """Children that end before their exec (a program that does not exist:
    the vfork child of posix_spawn or _posixsubprocess exits) while a thread
    of the parent works: the parent's threads go on.  A vfork child shares
    the parent's memory, so its exit must not stop the parent's carriers."""
    steps = []

    def worker():
        for i in range(200):
            time.sleep(0.001)
            steps.append(i)
    t = threading.Thread(target=worker)
    t.start()
    missing = 0
    for _ in range(30):
        try:
            subprocess.run(["/nonexistent/ferry-test-program"])
        except FileNotFoundError:
            missing += 1
        last = subprocess.run(["sh", "-c", "exit 3"]).returncode
    t.join()
    print("not found", missing, "worker steps", len(steps), "last exit", last)


def outcome(call):
    try:
        return repr(call())
    except OSError as e:
        return errno.errorcode.get(e.errno)


def perf_counter():
    """A software counter of this thread (perf_event_open), or None where
    the kernel refuses (perf_event_paranoid)."""
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = 1     # PERF_TYPE_SOFTWARE
    ctypes.c_uint32.from_buffer(attr, 4).value = 128   # its size
    ctypes.c_uint64.from_buffer(attr, 8).value = 0     # PERF_COUNT_SW_CPU_CLOCK
    fd = libc.syscall(298, attr, 0, -1, -1, ctypes.c_ulong(8))   # PERF_FLAG_FD_CLOEXEC
    return fd if fd >= 0 else None


def files_without_read():
    """Files whose read does not wait for them to poll ready, as io_uring
    does: the kernel says EINVAL at once to a file that has no read at all,
    where the ring waited for an epoll descriptor with nothing ready, or a
    live process's pidfd, to poll readable: it hung.  Also a perf counter,
    read at once, and a timerfd's write, which it has not got, run as the
    engine sends every anonymous file it has not checked."""
    child = subprocess.Popen(["sleep", "30"])
    ep = select.epoll()
    counter = perf_counter()
    if counter is None:
        print("perf counter unavailable")
    else:
        print("perf counter read", len(os.read(counter, 8)))
    timer = libc.timerfd_create(1, 0)    # CLOCK_MONOTONIC, never set: its read would wait
    print("timerfd write", outcome(lambda: os.write(timer, b"x" * 8)))
    for name, fd in (("pidfd", os.pidfd_open(child.pid)), ("epoll", ep.fileno())):
        buf = bytearray(8)
        print(name, "read", outcome(lambda: os.read(fd, 8)),
              "readv", outcome(lambda: os.readv(fd, [buf])),
              "pread", outcome(lambda: os.pread(fd, 8, 0)),
              "write", outcome(lambda: os.write(fd, b"x")),
              "writev", outcome(lambda: os.writev(fd, [b"x"])))
    child.kill()
    child.wait()


def raw_terminal(fd, vtime):
    attrs = termios.tcgetattr(fd)
    attrs[3] &= ~(termios.ICANON | termios.ECHO)
    attrs[6][termios.VMIN] = 0
    attrs[6][termios.VTIME] = vtime
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def terminal_reads():
    """A terminal in raw mode with VMIN 0: read returns 0 at once (VTIME 0)
    or when VTIME ends, where io_uring waited for input: it hung."""
    master, slave = os.openpty()
    for vtime in (0, 2):
        raw_terminal(slave, vtime)
        print("VTIME", vtime, "read", outcome(lambda: os.read(slave, 10)))
    os.write(master, b"typed")
    print("then", outcome(lambda: os.read(slave, 10)))


def background_read():
    """A process in the background of its terminal that reads it is stopped
    by SIGTTIN, as natively: a thread that blocks every signal (io_uring's,
    the engine's workers) would be told EIO instead.  So is one that writes
    it with TOSTOP set, by SIGTTOU."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] |= termios.TOSTOP
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    name = os.ttyname(slave)
    for how in ("read", "write"):
        background_job(name, how)


def background_job(name, how):
    leader = os.fork()
    if leader == 0:
        os.setsid()
        tty = os.open(name, os.O_RDWR)          # the session's terminal now
        reader = os.fork()
        if reader == 0:
            os.setpgid(0, 0)                    # a background job of the session
            keep_company()
            call = (lambda: os.read(tty, 10)) if how == "read" else (lambda: os.write(tty, b"x"))
            print(how, outcome(call), flush=True)
            os._exit(0)
        # bounded: this session is out of reach of the test's timeout
        for _ in range(200):
            pid, status = os.waitpid(reader, os.WUNTRACED | os.WNOHANG)
            if pid:
                break
            time.sleep(0.1)
        print(how, "still running after 20 s" if not pid else
              "stopped by " + signal.Signals(os.WSTOPSIG(status)).name
              if os.WIFSTOPPED(status) else f"status {status}", flush=True)
        os.kill(reader, signal.SIGKILL)
        os.waitpid(reader, 0)
        os._exit(0)
    os.waitpid(leader, 0)


def eventfd_writes():
    """Writes of an eventfd run on the spot where they cannot wait (a value
    of 0 or 1 while the count is below its top) and on a worker where they
    may: each write below that must wait for the read that makes room, as
    natively, and not hang the carrier the reader runs on."""
    top = 2**64 - 2                       # the highest count an eventfd holds
    fd = os.eventfd(0)
    for v in (1, 0, 1, 5):
        os.eventfd_write(fd, v)
    print("count", os.eventfd_read(fd))
    for start, v in ((top, 1), (top - 1, 2), (top, 0)):
        os.eventfd_write(fd, start)
        got = []
        reader = threading.Thread(target=lambda: (time.sleep(0.2), got.append(os.eventfd_read(fd))))
        reader.start()
        os.eventfd_write(fd, v)         # waits for the read when it would pass the top
        reader.join()
        print("wrote", v, "at", start, "read", got, "then", os.eventfd_read(fd) if v else 0)
    print("2**64-1", outcome(lambda: os.eventfd_write(fd, 2**64 - 1)))
    print("4 bytes", outcome(lambda: os.write(fd, b"\1\0\0\0")))
    print("bad pointer", libc.write(fd, ctypes.c_void_p(8), 8), errno.errorcode[ctypes.get_errno()])
    nb = os.eventfd(0, os.EFD_NONBLOCK)
    os.eventfd_write(nb, top)
    print("full, nonblocking", outcome(lambda: os.eventfd_write(nb, 1)))


def sendfile_cases():
    """sendfile runs on the spot where its output is nonblocking and its
    input's pages are all cached, else on a worker: what it sends, what it
    says and where it leaves the offset or the file position must be what
    they are natively, in either place."""
    data = hashlib.sha256(b"ferry").digest() * 1000       # 32000 bytes, 8 pages
    with open("sendfile.data", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())            # clean pages, which POSIX_FADV_DONTNEED drops
    fd = os.open("sendfile.data", os.O_RDONLY)
    a, b = socket.socketpair()
    a.setblocking(False)

    def take(n):
        got = b""
        while len(got) < n:
            got += b.recv(n - len(got))
        return got
    print("offset", os.sendfile(a.fileno(), fd, 100, 5000), take(5000) == data[100:5100],
          "position", os.lseek(fd, 0, os.SEEK_CUR))
    for _ in range(2):
        print("from the position", os.sendfile(a.fileno(), fd, None, 3000), "now",
              os.lseek(fd, 0, os.SEEK_CUR))
    print(take(6000) == data[:6000])
    print("past the end", os.sendfile(a.fileno(), fd, 40000, 100),
          "over the end", os.sendfile(a.fileno(), fd, 31000, 4000), take(1000) == data[31000:])
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)    # not cached: a worker's
    print("evicted", os.sendfile(a.fileno(), fd, 0, 9000), take(9000) == data[:9000])
    off = ctypes.c_int64(50)
    print("by pointer", libc.sendfile(a.fileno(), fd, ctypes.byref(off), 700), off.value, take(700) == data[50:750])
    print("bad pointer", libc.sendfile(a.fileno(), fd, ctypes.c_void_p(8), 10), errno.errorcode[ctypes.get_errno()])
    r, w = os.pipe()
    os.set_blocking(w, False)
    sent = 0
    while True:                           # a nonblocking pipe, filled: EAGAIN
        try:
            sent += os.sendfile(w, fd, sent % 30000, 2000)
        except BlockingIOError:
            break
    print("pipe took", sent)
    print("into a blocking socket", os.sendfile(b.fileno(), fd, 0, 20), a.recv(20) == data[:20])
    os.unlink("sendfile.data")


CASES = {
    "spawn_failures": spawn_failures,
    "exit_releases": exit_releases,
    "bad_descriptors": bad_descriptors,
    "fifo_opens": fifo_opens,
    "file_opens": file_opens,
    "sigsuspend_thread": lambda: sigsuspend("thread"),
    "sigsuspend_process": lambda: sigsuspend("process"),
    "alarm_read": alarm_read,
    "interrupt": lambda: interrupt(False),
    "restart": lambda: interrupt(True),
    "select_signal": select_signal,
    "term_from_outside": term_from_outside,
    "big_writes": big_writes,
    "big_stdout": big_stdout,
    "fork_close_exec": fork_close_exec,
    "change_user": change_user,
    "spin": spin,
    "hipri": hipri,
    "rtmax": rtmax,
    "poll_restart": poll_restart,
    "poll_timeout": poll_timeout,
    "siginfo": siginfo,
    "epoll": epoll_cases,
    "rtmax_default": rtmax_default,
    "lsfd": lsfd,
    "files_without_read": files_without_read,
    "terminal_reads": terminal_reads,
    "background_read": background_read,
    "eventfd_writes": eventfd_writes,
    "sendfile": sendfile_cases,
}


def keep_company():
    """A second thread for the whole run, natively too, which waits with every
    signal blocked (from its start: blocked once it ran, it could take a
    signal meant for the main thread before): under the fibers profile a
    program's only thread makes its calls natively, and these cases are
    about the engine's path."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


if __name__ == "__main__":
    if sys.argv[1] != "lsfd":
        keep_company()
    CASES[sys.argv[1]]()
    if sys.stdout:
        sys.stdout.flush()
