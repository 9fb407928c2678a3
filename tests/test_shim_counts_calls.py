"""The shim counts every system call a rewritten program makes, exactly.

The test programs (tests/programs/) make a known number of calls after
startup; their rewritten versions record into a run directory (FERRY_RUN_DIR)
and the counts in its process records must match exactly.  (Calls the dynamic loader makes before the
shim starts are not counted, so only calls made by the program itself are
compared.)
"""
import os
import subprocess

import pytest

from conftest import calls_of, read_stats, recording_env

ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
TIMEOUT = 60


def run_with_stats(program, args, run_dir):
    """Runs `program args` recording into `run_dir`; (pid, stdout, stats)."""
    env = recording_env(ENV, run_dir)
    p = subprocess.Popen([str(program), *map(str, args)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0, f"{program} {args} failed ({p.returncode}): {err!r}"
    return p.pid, out, read_stats(run_dir)


def only(stats, pid):
    """{pid: stats} restricted to `pid` (asserting it has a record)."""
    assert pid in stats, f"no record for pid {pid}; records for {sorted(stats)}"
    return {pid: stats[pid]}


@pytest.fixture(scope="module")
def programs(instrument, test_programs):
    def get(name):
        return instrument(test_programs / name)
    return get


@pytest.mark.parametrize("n", [1, 1000, 12345])
def test_getppid_counted_exactly(programs, n, tmp_path):
    prog = programs("getppid_loop")
    pid, out, stats = run_with_stats(prog.path, [n], tmp_path / "run")
    assert out == f"parent getppid calls: {n} (all equal: yes)\n".encode()
    assert list(stats) == [pid], "exactly one process, one record"
    s = stats[pid]
    assert calls_of(stats, "getppid") == n
    assert calls_of(stats, "exit_group") == 1
    assert s["invalid"] == 0
    assert os.path.realpath(s["exe"]) == os.path.realpath(prog.path)
    assert s["ppid"] == os.getpid()


def test_original_program_records_nothing(programs, tmp_path):
    prog = programs("getppid_loop")
    pid, out, stats = run_with_stats(prog.original, [12345], tmp_path / "run")
    assert out == b"parent getppid calls: 12345 (all equal: yes)\n"
    assert stats == {}
    assert list((tmp_path / "run" / "proc").iterdir()) == []


def test_rewritten_program_without_run_dir_writes_nothing(programs, tmp_path):
    prog = programs("getppid_loop")
    r = subprocess.run([str(prog.path), "50"], cwd=tmp_path, env=ENV, capture_output=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0 and r.stdout == b"parent getppid calls: 50 (all equal: yes)\n"
    assert list(tmp_path.iterdir()) == []


def test_raw_syscall_function_calls_counted_exactly(programs, tmp_path):
    n = 300
    pid, out, stats = run_with_stats(programs("rawsyscall").path, [n], tmp_path / "run")
    assert out.count(b"raw write ") == n
    assert b"mmap+munmap: ok\n" in out
    assert list(stats) == [pid]
    assert calls_of(stats, "getppid") == n
    assert calls_of(stats, "write") == n + 1  # n lines and the summary, all raw
    assert calls_of(stats, "close") >= 1  # syscall(SYS_close, -1)
    assert calls_of(stats, "mmap") >= 1 and calls_of(stats, "munmap") >= 1
    assert calls_of(stats, "exit_group") == 1


def test_calls_of_all_threads_counted_in_one_file(programs, tmp_path):
    threads, per_thread = 6, 1000  # T and K in tests/programs/threads.c
    pid, out, stats = run_with_stats(programs("threads").path, [], tmp_path / "run")
    assert b"total: 21000 (expected 21000)\n" in out
    assert list(stats) == [pid], "threads share their process's record"
    # only the threads call getpid(), K times each
    assert calls_of(stats, "getpid") == threads * per_thread
    # two write() per thread, and the main thread's stdout flushed once at exit
    assert calls_of(stats, "write") == 2 * threads + 1
    assert calls_of(stats, "clone3") + calls_of(stats, "clone") == threads
    assert calls_of(stats, "futex") >= 1
    assert calls_of(stats, "exit_group") == 1


def test_forked_child_counts_only_its_own_calls(programs, tmp_path):
    # The parent calls getppid 100 times and forks; the child calls it 7 times.
    pid, out, stats = run_with_stats(programs("getppid_loop").path, [100, 7], tmp_path / "run")
    assert out == (b"parent getppid calls: 100 (all equal: yes)\n"
                   b"child getppid calls: 7 (all equal: yes)\n"
                   b"child exited: 1 status: 0\n")
    assert len(stats) == 2, f"expected a record for the parent and the child: {sorted(stats)}"
    (child,) = [p for p in stats if p != pid]
    assert stats[child]["ppid"] == pid
    assert calls_of(only(stats, pid), "getppid") == 100
    assert calls_of(only(stats, child), "getppid") == 7
    assert calls_of(only(stats, pid), "clone") + calls_of(only(stats, pid), "fork") == 1
    assert calls_of(only(stats, child), "clone") == 0
    assert calls_of(only(stats, pid), "wait4") == 1
    assert calls_of(only(stats, child), "wait4") == 0
    for p in (pid, child):
        assert calls_of(only(stats, p), "exit_group") == 1
        assert stats[p]["invalid"] == 0


def _forkexec_stats(programs, tmp_path):
    """(parent pid, {pid: stats}) of one run of forkexec (tests/programs/forkexec.c)."""
    pid, out, stats = run_with_stats(programs("forkexec").path, [], tmp_path / "run")
    assert b"fork without exec: exit 5\n" in out
    assert b"posix_spawn of a missing file: No such file or directory\n" in out
    return pid, stats


def test_each_process_of_forkexec_writes_its_own_stats(programs, tmp_path):
    pid, stats = _forkexec_stats(programs, tmp_path)
    # the parent, the child forked without exec and the posix_spawn child whose
    # exec failed (it exits through the rewritten libc); the children that
    # exec'd an original program write nothing
    assert len(stats) == 3, sorted(stats)
    exe = os.path.realpath(programs("forkexec").path)
    assert all(os.path.realpath(s["exe"]) == exe for s in stats.values())
    assert all(stats[c]["ppid"] == pid for c in stats if c != pid)


def test_vfork_and_posix_spawn_children_not_counted_in_parent(programs, tmp_path):
    # vfork and posix_spawn children share the parent's memory until they exec
    # or exit; their calls (execve, the failed child's exit_group) are theirs,
    # not the parent's.  The parent itself never calls execve.
    pid, stats = _forkexec_stats(programs, tmp_path)
    parent = only(stats, pid)
    assert calls_of(parent, "execve") == 0, str(parent[pid]["calls"])
    assert calls_of(parent, "exit_group") == 1, str(parent[pid]["calls"])
    # 6 waitpid of the program's own (3 fork/vfork + 2 posix_spawn(p) + the
    # exec-less fork), plus glibc's own reaping of the posix_spawn child whose
    # exec failed (__spawnix waits for it): 7, as `strace -f` counts too.
    assert calls_of(parent, "wait4") == 7


def test_posix_spawn_child_stats_hold_only_its_own_calls(programs, tmp_path):
    # The posix_spawn child of a missing file: clone3(CLONE_VM|CLONE_VFORK),
    # signal resets, execve fails, exit_group(127).  Its file must hold its own
    # calls, not the parent's (the parent's write and wait4 calls).
    pid, stats = _forkexec_stats(programs, tmp_path)
    spawned = [c for c in stats if c != pid and calls_of(only(stats, c), "getppid") == 0]
    assert len(spawned) == 1, str({c: s["calls"] for c, s in stats.items()})
    child = only(stats, spawned[0])
    assert calls_of(child, "execve") >= 1
    assert calls_of(child, "exit_group") == 1
    assert calls_of(child, "write") == 0, str(child[spawned[0]]["calls"])
    assert calls_of(child, "wait4") == 0, str(child[spawned[0]]["calls"])
