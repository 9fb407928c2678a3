"""`ferry run` keeps the process records in memory while the program runs
(proc/ a link into a tmpfs) and moves them into the run directory once no
process of the run is left; nothing recorded is lost on the way."""
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ferry, read_stats, recording_env
from ferry import procfile, staging
from ferry.base import syscall_table
from ferry.rundata import load_run

pytestmark = pytest.mark.usefixtures("own_index")

if not any(staging._is_tmpfs(r) for r in staging._roots()):
    pytest.skip("no tmpfs to keep records in", allow_module_level=True)


def run(tmp_path, *argv, opts=(), out="run"):
    return ferry("run", "--no-learn", "-p", "trace", *opts, "-o", tmp_path / out, "--", *argv,
                 check=True, timeout=120)


def commands(model):
    return sorted((os.path.basename(p["exe"] or "?"), p["state"]) for p in model["processes"])


def test_records_are_kept_in_memory_while_the_program_runs_and_moved_at_its_end(tmp_path):
    out = tmp_path / "run"
    script = "readlink {}/proc || true; /bin/true; ls / >/dev/null"
    r = run(tmp_path, "sh", "-c", script.format(out))
    during = Path(r.stdout.strip())
    assert staging._is_tmpfs(during), r.stdout
    proc = out / "proc"
    assert proc.is_dir() and not proc.is_symlink()
    assert not during.exists()          # nothing left behind in memory
    files = list(proc.glob("*.ferry"))
    assert files
    for f in files:                     # holes stay holes
        s = f.stat()
        assert s.st_blocks * 512 < s.st_size / 10 or s.st_size < 1 << 20
    staged = load_run(out)
    run(tmp_path, "sh", "-c", script.format(tmp_path / "direct"), opts=("--no-stage",), out="direct")
    direct = load_run(tmp_path / "direct")
    assert commands(staged) == commands(direct)
    assert {(c, "exited") for c in ("ls", "sh", "true", "readlink")} <= set(commands(staged))
    ls = [p for p in staged["processes"] if (p["exe"] or "").endswith("/ls")]
    assert ls and ls[0]["calls"] > 20


def test_records_in_memory_are_mapped_without_asking_for_no_readahead(tmp_path):
    # A fault in a mapped record on disk read ahead over its holes
    # (MADV_RANDOM stops it); a tmpfs reads nothing ahead, and the file's
    # head says where it is, so the call is left out: one in every start.
    # Threads map blocks of their own the same way.
    script = ("/bin/true; /bin/true; /usr/bin/python3 -c "
              "'import threading; t = threading.Thread(target=len, args=((),)); t.start(); t.join()'")
    madvise = syscall_table.NUMBERS["madvise"]
    for opts, out in (((), "staged"), (("--no-stage",), "direct")):
        run(tmp_path, "sh", "-c", script, opts=opts, out=out)
    images = {out: [r for r in procfile.read_dir(tmp_path / out / "proc") if r.exe and not r.exec_path]
              for out in ("staged", "direct")}
    assert [r.internal.get(madvise, 0) for r in images["staged"]] == [0] * 4
    direct = {os.path.basename(r.exe): r.internal.get(madvise, 0) for r in images["direct"]}
    sh, python = (os.path.basename(os.path.realpath(p)) for p in ("/bin/sh", "/usr/bin/python3"))
    assert direct[sh] == direct["true"] == 1 and direct[python] >= 1, direct


def test_no_stage_writes_the_records_into_the_run_directory(tmp_path):
    out = tmp_path / "run"
    r = run(tmp_path, "sh", "-c", f"test -L {out}/proc && echo link || echo dir", opts=("--no-stage",))
    assert r.stdout.strip() == "dir"


def test_a_profile_that_records_every_call_writes_the_records_into_the_run(tmp_path):
    """Each thread's ring of events (event_buffer x 32 bytes) would take
    memory: such a run is not staged."""
    from conftest import write_profile
    prof = write_profile(tmp_path, 'mode = "trace"\n[trace]\nevents = true\nevent_buffer = 4096\n')
    out = tmp_path / "run"
    r = ferry("run", "--no-learn", "-p", prof, "-o", out, "--", "sh", "-c",
              f"test -L {out}/proc && echo link || echo dir", check=True, timeout=120)
    assert r.stdout.strip() == "dir"


def test_a_run_that_cannot_start_its_program_leaves_nothing_in_memory(tmp_path):
    out = tmp_path / "run"
    r = ferry("run", "--no-learn", "-o", out, "--", "/bin/true", timeout=120,
              env=dict(os.environ, FERRY_SHIM=str(tmp_path / "elsewhere.so")))
    assert r.returncode != 0 and "elsewhere.so" in r.stderr, r.stderr
    left = [d for root in staging._roots() for d in Path(root).glob(f"ferry-{os.geteuid()}/*")
            if (d / staging.BACKLINK).is_file() and (d / staging.BACKLINK).read_text().strip() == str(out)]
    assert not left, left
    assert not (out / "proc").is_symlink()


def test_records_of_a_process_that_outlives_the_run_move_once_it_ended(tmp_path):
    out = tmp_path / "run"
    run(tmp_path, "sh", "-c", "sleep 1.5 >/dev/null 2>&1 &")
    proc = out / "proc"
    assert proc.is_symlink(), "the sleep still runs: its record must stay where it writes it"
    held = Path(os.readlink(proc))
    # nobody reads the run: the process ferry run left behind moves them
    assert wait_for(lambda: not proc.is_symlink()), "the records never moved"
    assert proc.is_dir() and not held.exists()
    sleeps = [p for p in load_run(out)["processes"] if p["exe"] and p["exe"].endswith("/sleep")]
    assert [p["state"] for p in sleeps] == ["exited"]


def test_a_program_of_the_run_that_has_not_mapped_its_record_yet_keeps_the_records_in_memory(tmp_path):
    # Between a program's exec and its shim's mapping of its record, it maps
    # nothing of the run: a run whose program ended while a child it started
    # in the background was there had its records moved away under the child
    # (seen once, in a CI under load).  Its environment still names the run.
    out = tmp_path / "run"
    out.mkdir()
    held = staging.stage(out)                   # a staged run, as ferry run makes it
    assert held is not None
    between = subprocess.Popen(["sleep", "30"], env=dict(os.environ, FERRY_RUN_DIR=str(out)))
    try:
        assert staging.finish(out) == "live"
        assert (out / "proc").is_symlink() and held.is_dir()
    finally:
        between.kill()
        between.wait()
    assert staging.finish(out) == "moved"
    assert (out / "proc").is_dir() and not held.exists()


def test_a_process_in_the_kernels_exec_of_a_program_that_records_keeps_the_records_in_memory(
        tmp_path, instrument):
    # In the kernel's exec, between the old memory given up and the new
    # stack set up, a process maps nothing of the run and its environment
    # reads empty; only its record, written before the exec, says where it
    # goes.  That window cannot be held open from outside: a live process
    # that shows neither (a plain sleep) stands for the process in it, and
    # a real record of the run is made to say that this pid exec'd a
    # rewritten program.
    out = tmp_path / "run"
    out.mkdir()
    held = staging.stage(out)
    assert held is not None
    env = dict(os.environ, FERRY_RUN_DIR=str(out))
    subprocess.run([instrument("/bin/true").path], env=env, check=True, timeout=60)
    [record] = procfile.read_dir(held)
    between = subprocess.Popen(["sleep", "30"])
    try:
        with open(record.file, "r+b") as f:
            H = procfile.HEADER
            for member, value in (("pid", between.pid), ("state", procfile.STATE_EXEC),
                                  ("exec_kind", procfile.EXEC_REWRITTEN)):
                os.pwrite(f.fileno(), value.to_bytes(4, "little"), record.offset + H.offset(member))
        assert staging.finish(out) == "live", "the records moved away under a process in its exec"
        assert (out / "proc").is_symlink() and held.is_dir()
    finally:
        between.kill()
        between.wait()
    assert staging.finish(out) == "moved", "a process that ended in its exec held the records"
    assert (out / "proc").is_dir() and not held.exists()


def test_removing_a_run_while_a_process_still_records_frees_its_records(tmp_path):
    out = tmp_path / "run"
    sleeper = int(run(tmp_path, "sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").stdout)
    try:
        held = Path(os.readlink(out / "proc"))
        assert held.is_dir()
        subprocess.run(["rm", "-rf", str(out)], check=True)   # by hand, not with ferry
        assert wait_for(lambda: not held.exists()), "the records stayed in memory"
    finally:
        os.kill(sleeper, 9)


def wait_for(cond, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_replacing_a_run_whose_records_are_in_memory_keeps_them_and_then_removes_them(tmp_path):
    out = tmp_path / "run"
    sleeper = int(run(tmp_path, "sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").stdout)
    try:
        first = Path(os.readlink(out / "proc"))
        run(tmp_path, "/bin/true")      # the first run, still live, becomes run.old
        old = tmp_path / "run.old"
        assert Path(os.readlink(old / "proc")) == first and first.is_dir()
        run(tmp_path, "/bin/true")      # and is removed: its records with it
        assert not first.exists()
    finally:
        os.kill(sleeper, 9)


def test_a_staging_place_someone_else_made_is_not_used(tmp_path):
    shm = Path(tempfile_dir())
    try:
        trap = shm / "rt"
        trap.mkdir()
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        os.symlink(elsewhere, trap / f"ferry-{os.geteuid()}")
        out = tmp_path / "run"
        r = ferry("run", "--no-learn", "-p", "trace", "-o", out, "--", "sh", "-c",
                  f"readlink {out}/proc", check=True, timeout=120,
                  env=dict(os.environ, XDG_RUNTIME_DIR=str(trap)))
        assert not r.stdout.strip().startswith(str(trap))
        assert not any(elsewhere.iterdir())
    finally:
        subprocess.run(["rm", "-rf", str(shm)])


def tempfile_dir():
    import tempfile
    return tempfile.mkdtemp(dir="/dev/shm")


def test_a_process_waiting_to_claim_a_slot_while_the_records_move_finds_the_moved_file(
        tmp_path, instrument):
    """The move holds each slot file's lock; a process that waited on it
    claims its slot in the moved file, not in the one left behind."""
    true = instrument("/bin/true").path
    env = recording_env(dict(os.environ), tmp_path)
    subprocess.run([true], env=env, check=True, timeout=60)
    slot_file = tmp_path / "proc" / f"u{os.geteuid()}-0.ferry"
    fd = os.open(slot_file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        waiting = subprocess.Popen([true], env=env)
        ino = os.fstat(fd).st_ino
        deadline = time.monotonic() + 30
        while not blocked_on(ino) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert blocked_on(ino), "the second process never waited for the slot file's lock"
        # what staging.finish does: the file copied, the copy under the name
        moved = slot_file.with_name("moved")
        src = os.open(slot_file, os.O_RDONLY)
        dst = os.open(moved, os.O_WRONLY | os.O_CREAT, 0o644)
        staging._copy_sparse(src, dst, os.fstat(src).st_size)
        os.close(src)
        os.close(dst)
        os.rename(moved, slot_file)
    finally:
        os.close(fd)
    assert waiting.wait(timeout=60) == 0
    pids = set(read_stats(tmp_path))
    assert waiting.pid in pids and len(pids) == 2


def blocked_on(ino):
    """Whether a process waits for a flock on inode `ino` (/proc/locks)."""
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts and "FLOCK" in parts:
                dev_ino = parts[parts.index("->") + 5] if len(parts) > parts.index("->") + 5 else ""
                if dev_ino.rsplit(":", 1)[-1] == str(ino):
                    return True
    return False


def test_records_no_run_leads_to_any_more_are_removed_once_stale(tmp_path):
    """A run whose `ferry run` was killed, then removed by hand, left its
    records in memory for good: nothing was left to move or remove them.
    The next run that stages removes them once nothing was written to them
    for a day and no process records there; records a run (DIR, DIR.old)
    still leads to, and recent ones, stay."""
    shm = Path(tempfile_dir())
    try:
        base = shm / f"ferry-{os.geteuid()}"
        base.mkdir(mode=0o711)
        old = time.time() - 3 * 24 * 3600   # beyond staging.STRANDED_AFTER

        def staged(name, run_dir, mtime):
            d = base / name
            d.mkdir()
            (d / staging.BACKLINK).write_text(f"{run_dir}\n")
            (d / "u0-0.ferry").write_bytes(b"x")
            for p in (d / staging.BACKLINK, d / "u0-0.ferry", d):
                os.utime(p, (mtime, mtime))
            return d

        stranded = staged("stranded", tmp_path / "gone", old)
        recent = staged("recent", tmp_path / "gone-too", time.time())
        kept_run = tmp_path / "kept"
        linked = staged("linked", kept_run, old)
        (kept_run / "proc").parent.mkdir()
        os.symlink(linked, kept_run / "proc")
        moved = tmp_path / "moved"
        via_old = staged("via-old", moved, old)
        (tmp_path / "moved.old").mkdir()
        os.symlink(via_old, tmp_path / "moved.old" / "proc")
        out = tmp_path / "run"
        ferry("run", "--no-learn", "-p", "trace", "-o", out, "--", "/bin/true", check=True, timeout=120,
              env=dict(os.environ, XDG_RUNTIME_DIR=str(shm)))
        assert not stranded.exists()
        assert recent.is_dir() and linked.is_dir() and via_old.is_dir()
        assert (out / "proc").is_dir()     # the run itself staged there and moved out
    finally:
        subprocess.run(["rm", "-rf", str(shm)])


def test_a_sweep_passes_by_a_staging_directory_being_made(tmp_path):
    """A run's staging directory names its run in a file that another run's
    sweep reads.  Written in place, it was empty for a moment: a sweep that
    read it then took the run for `.` and `ferry run` died with an internal
    error (seen once in a full test run, ferry runs side by side).  The
    name is written whole, by a rename, and a sweep passes by a name that
    is not a whole path."""
    base = tmp_path / "base"
    base.mkdir()
    being_made = base / "run-x"
    being_made.mkdir()
    (being_made / staging.BACKLINK).write_text("")
    old = time.time() - 3 * 24 * 3600   # beyond staging.STRANDED_AFTER
    os.utime(being_made / staging.BACKLINK, (old, old))
    os.utime(being_made, (old, old))
    staging._sweep(base)
    assert being_made.is_dir()
    out = tmp_path / "out"
    out.mkdir()
    d = staging.stage(out)
    if d is None:
        pytest.skip("no tmpfs with room here")
    try:
        assert [p.name for p in d.iterdir()] == [staging.BACKLINK]
        assert (d / staging.BACKLINK).read_text() == f"{out}\n"
    finally:
        staging.discard(out)


def test_a_run_removed_while_its_watcher_looks_frees_its_records(tmp_path, monkeypatch):
    """The process `ferry run` leaves behind for records that outlive it
    frees them when the run is removed.  Removed while it was looking
    (its look scans every process's maps: long on a loaded machine), it
    found no records there, took them for moved and left: they stayed in
    memory for good (a test removing a run by hand saw it once in a full
    test run)."""
    out = tmp_path / "run"
    out.mkdir()
    src = staging.stage(out)
    if src is None:
        pytest.skip("no tmpfs with room here")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)

    def removed_meanwhile(run_dir):
        subprocess.run(["rm", "-rf", str(out)], check=True)
        return None
    monkeypatch.setattr(staging, "finish", removed_meanwhile)
    try:
        staging._wait_and_finish(fd, src, poll=0.01)
        assert not src.exists()
    finally:
        shutil.rmtree(src, ignore_errors=True)
