"""How strace_counts reads what strace prints as a process ends: the tests
that compare a run's counts with strace's lean on it, and two of strace's
ways there (taken from real logs of go_runtime under the shim) made those
tests fail on runs that had counted every call."""
from pathlib import Path

from strace_counts import calls_after_shim_start

RUN = Path("/tmp/run")
OPEN = f'openat(AT_FDCWD, "{RUN}/proc/u0-0.ferry", O_RDWR|O_NOFOLLOW|O_CLOEXEC) = 3'
THREAD = "flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS"


def test_a_thread_whose_clone_never_returned_is_its_creators():
    lines = [
        f"100  {OPEN}",
        f"100  clone(child_stack=0x1000, {THREAD}, tls=0x2000) = 101",
        f"101  clone(child_stack=0x1000, {THREAD} <unfinished ...>",
        "102  getpid()                          = 100",
        "102  tgkill(100, 101, 0)               = 0",
        "100  exit_group(0 <unfinished ...>",
        "102  tgkill(100, 100, 0)               = ?",
        "101  <... clone resumed> <unfinished ...>) = ?",
        "100  <... exit_group resumed>)         = ?",
    ]
    seen, started, ends = calls_after_shim_start(lines, RUN, 100)
    assert started == {100}
    assert seen["tgkill"] == 2 and seen["getpid"] == 1
    assert ("tgkill", "killed") in ends


def test_a_thread_that_shows_up_after_its_creator_returned_is_not_taken_for_a_lost_one():
    lines = [
        f"100  {OPEN}",
        f"100  clone(child_stack=0x1000, {THREAD} <unfinished ...>",
        "101  gettid()                          = 101",
        "100  <... clone resumed>, tls=0x2000) = 101",
        "999  gettid()                          = 999",  # not ours
        "100  exit_group(0)                     = ?",
    ]
    seen, _, _ = calls_after_shim_start(lines, RUN, 100)
    assert seen["gettid"] == 1


def test_a_call_strace_could_not_read_as_its_process_died_is_of_no_known_name():
    lines = [
        f"100  {OPEN}",
        f"100  clone(child_stack=0x1000, {THREAD}, tls=0x2000) = 101",
        f"100  clone(child_stack=0x1000, {THREAD}, tls=0x3000) = 102",
        "102  futex(0x5de718, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>",
        "101  nanosleep({tv_sec=0, tv_nsec=20000},  <unfinished ...>",
        "100  exit_group(0 <unfinished ...>",
        "101  <... nanosleep resumed>NULL)      = 0",
        # the thread's next entry, registers unread: a stale number
        "101  syscall_0x13e0(0, 0x1, 0x1da036840f10, 0x1, 0, 0x1da0367d0040 <unfinished ...>",
        "102  <... futex resumed>)              = ?",
        "100  <... exit_group resumed>)         = ?",
    ]
    seen, _, ends = calls_after_shim_start(lines, RUN, 100)
    assert ("syscall_0x13e0", "lost") in ends
    assert ("futex", "killed") in ends
    assert not [e for e in ends if e[0] == "exit_group"]
