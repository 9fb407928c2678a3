"""The comparison of a run's counts with strace's (`strace -f` on `ferry
run`), syscall by syscall, from the moment each process's shim started."""
import collections
import json
import re

from ferry.rundata import load_run
from test_run_matches_strace import LINE

CREATORS = ("clone", "clone3", "fork", "vfork")


def calls_after_shim_start(lines, run_dir, root_pid):
    """strace's counts per syscall over the program's processes and threads,
    from the moment each process's shim opened the file of its record; a
    thread made once its process's shim was up counts whole.  In passes: a
    new thread's or vfork child's first calls come before the line that
    names it (its parent's clone resumes later).  Also: how each of those
    threads' last call ended, but for exits (see check)."""
    marker = re.compile(rf'openat\(AT_FDCWD, "{re.escape(str(run_dir))}/proc/(?:u)?\d+-\d+\.ferry"')
    # a call strace split in two ("<unfinished ...>", "<... x resumed>") is
    # one line, where it started, with its result
    parsed, open_calls = [], {}
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        pid = int(m.group(1))
        if m.group(2):
            if pid in open_calls:
                at = open_calls.pop(pid)
                p, name, _, first = parsed[at]
                parsed[at] = (p, name, None, first.replace("<unfinished ...>", "") + line.split(">", 1)[1])
            continue
        if line.endswith("<unfinished ...>"):
            open_calls[pid] = len(parsed)
        parsed.append((pid, m.group(3), None, line))
    def opens_record(name, line):
        return marker.search(line) and not re.search(r"= -\d+ E\w+", line)
    def made(name, line):
        """The process or thread a clone, fork or vfork line made, if it says."""
        if name not in CREATORS:
            return None
        child = re.search(r"= (\d+)$", line) or re.search(r"= (\d+) ", line)
        return int(child.group(1)) if child else None
    # A clone whose caller was killed before it returned never names its
    # child, which may have run meanwhile: a thread that first shows up
    # after such a clone began, and that no clone names, is its child.
    named = {made(name, line) for _, name, _, line in parsed} - {None}

    # a process's calls count from its record's opening to its next image
    # (whose loader runs before that image's shim); a thread's from its
    # creation, if its creator's counted then
    # A call a signal interrupted and the kernel restarted is one call of
    # the program's (the shim sees it once: the same `syscall` instruction
    # runs again), two lines of strace's: the restart_syscall after an
    # ERESTART_RESTARTBLOCK, or the same call again after an ERESTARTSYS /
    # ERESTARTNOINTR / ERESTARTNOHAND.
    pids, live, started, counts = {root_pid}, set(), set(), collections.Counter()
    again = {}  # pid -> (the call it will make again, how it was cut short)
    last = {}  # pid -> its last call's name, line, whether it counted, where
    appeared, unnamed = set(), []  # unnamed: clones that never returned
    for at, (pid, name, _resumed, line) in enumerate(parsed):
        if pid not in appeared and pid not in pids and pid not in named and unnamed:
            parent_live, shares = unnamed.pop(0)
            pids.add(pid)
            if parent_live and shares:
                live.add(pid)
        appeared.add(pid)
        if pid not in pids:
            continue
        last[pid] = (name, line, pid in live, at)
        restarts = re.search(r"= \? ERESTART(SYS|NOINTR|NOHAND)", line)
        if name == "rt_sigreturn" and again.get(pid, (0, ""))[1] == "NOHAND":
            # a handler ran: a call cut short with ERESTARTNOHAND failed
            # with EINTR instead of running again
            again.pop(pid)
        if name == "restart_syscall" or again.get(pid, ("",))[0] == name:
            # the run again may be cut short again: a futex wait through
            # two signals other threads took is three lines, one call
            if not restarts:
                again.pop(pid, None)
            continue
        if restarts:
            again[pid] = (name, restarts.group(1))
        if pid in live:
            counts[name] += 1
        elif opens_record(name, line):
            live.add(pid)
            started.add(pid)
        if name in CREATORS:
            child = made(name, line)
            # a vfork child counts into a block its parent made for it
            shares = "CLONE_THREAD" in line or "CLONE_VFORK" in line or name == "vfork"
            if child:
                pids.add(child)
                if shares and pid in live:
                    live.add(child)
            elif line.endswith("= ?"):
                unnamed.append((pid in live, shares))
        if name == "execve" and line.endswith("= 0"):
            live.discard(pid)
    # How each counting thread's last call ended: "returned", or "killed"
    # in the kernel (the end of its process came while the call ran; strace
    # says "<... x resumed>) = ?"), or "lost": strace stopped the thread at
    # a call's entry and the end of its process came before it read the
    # registers (ESRCH).  It prints that entry, never resumed, under
    # whatever number its last read of any thread left behind: the call's
    # name is not known (seen as exit_group, or syscall_0x13e0).
    never_resumed = set(open_calls.values())
    ends = []
    for name, line, counting, at in last.values():
        if not counting:
            continue
        if at in never_resumed:
            ends.append((name, "lost"))
        elif name not in ("exit", "exit_group"):
            ends.append((name, "killed" if line.endswith(("<unfinished ...>", "= ?")) else "returned"))
    return counts, started, ends


def check(log, run_dir):
    """Asserts that the run in `run_dir` counted the calls strace logged in
    `log`, syscall by syscall (the program's and the shim's own); returns
    the program's counts.

    One difference is allowed, and only one way: the shim counts a call
    before it makes it, strace when it reaches the kernel, and the end of a
    process (another thread's exit_group or exec, a fatal signal) may kill
    a thread in between.  A thread killed in user mode just after the count
    (or, under ptrace, at the entry of a call, which a pending kill skips)
    may have one call counted that strace never shows, and with it the
    shim's own call it was making on that call's behalf (the catch-all
    reads the program's signal mask with getpid and process_vm_writev
    first); a thread killed inside such a call of the shim's own, the call
    it was made for.  Counting after the call only moves the gap (a thread
    killed between strace's exit report and the count): no observer in
    user space sees exactly what a tracer sees there.  So strace never sees
    more, and the shim's extra calls are at most two for each thread that
    ended after a call that came back, one for each that died in a call of
    the shim's own kind.  A thread strace lost at a call's entry (see
    calls_after_shim_start) made a call strace saw under no reliable name:
    the shim counted it under its own (and the program's call it was made
    for, if it was one of the shim's): two, of any names.
    """
    model = load_run(run_dir)
    root = json.loads((run_dir / "info.json").read_text())["pid"]
    seen, started, ends = calls_after_shim_start(log.read_text().splitlines(), run_dir, root)
    assert root in started, "the shim never started in the program"
    counted = collections.Counter({s["name"]: s["calls"] for s in model["syscalls"]})
    shim_own = collections.Counter(model["shim_calls"])
    lost = [name for name, how in ends if how == "lost"]
    for name in lost:
        seen[name] -= 1
    allowed = sum(2 if how in ("returned", "lost") else 1 for name, how in ends
                  if how != "killed" or shim_own[name])
    names = set(seen) | set(counted) | set(shim_own)
    extra = {n: counted[n] + shim_own[n] - seen[n] for n in names if counted[n] + shim_own[n] != seen[n]}
    assert all(e > 0 for e in extra.values()) and sum(extra.values()) <= allowed, \
        {"(seen, counted, shim's own)": {n: (seen[n], counted[n], shim_own[n]) for n in extra},
         "extra calls allowed by how threads ended": allowed, "ends": ends}
    return counted
