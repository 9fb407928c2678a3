"""Process records are slots of a few files shared by the processes of one
user: a process start takes a slot, it does not create a file (an inode and a
directory entry each, 50-170 us on ext4, two per command a shell starts).
Every process is still recorded whole, concurrent starts included, and a full
file goes on in the next."""
import json
import os
import subprocess

import pytest

from conftest import PROGRAMS, ferry, pages_with_data
from ferry import procfile
from ferry.base import syscall_table
from ferry.base.sparse import data_extents
from ferry.rundata import load_run

PYTHON = "/usr/bin/python3"


def _run(tmp_path, argv, profile="trace"):
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", profile, "-o", run_dir, "--", *argv, timeout=300)
    native = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (native.returncode, native.stdout), r.stderr
    return run_dir


def _trues(run_dir):
    return [p for p in procfile.read_dir(run_dir / "proc") if p.exe == "/usr/bin/true"]


def test_a_shell_script_makes_one_file_not_one_per_process(tmp_path):
    run_dir = _run(tmp_path, ["sh", "-c", "/bin/true; " * 10 + "echo done"])
    files = list((run_dir / "proc").iterdir())
    assert len(files) == 1, files
    trues = _trues(run_dir)
    assert len(trues) == 10 and all(p.state == procfile.STATE_EXITED for p in trues)
    # each pid's images numbered in order: the vfork child's record, then true's
    for p in trues:
        assert p.seq == 1, (p.pid, p.seq)
    model = load_run(run_dir)
    assert all(p["reason"] is None for p in model["processes"]), model["processes"]


def test_concurrent_starts_each_take_a_slot_of_their_own(tmp_path):
    argv = ["sh", "-c", "seq 40 | xargs -P 4 -n 1 /bin/true; echo done"]
    run_dir = _run(tmp_path, argv)
    trues = _trues(run_dir)
    assert len(trues) == 40 and len({p.pid for p in trues}) == 40
    assert all(p.state == procfile.STATE_EXITED and p.exit_code == 0 for p in trues)
    assert all(p.argv[0] == "/bin/true" and len(p.argv) == 2 for p in trues)
    assert sorted(int(p.argv[1]) for p in trues) == list(range(1, 41))
    slots = [(p.file, p.offset) for p in procfile.read_dir(run_dir / "proc")]
    assert len(slots) == len(set(slots))


def test_a_full_file_goes_on_in_the_next(tmp_path):
    # A buffer of 4 Mi events makes a slot 128 GiB of (sparse) room: a file
    # holds 8 of them at most.
    profile = tmp_path / "big.toml"
    profile.write_text('mode = "trace"\n[trace]\nevents = true\nevent_buffer = 4194304\n')
    run_dir = _run(tmp_path, ["sh", "-c", "/bin/true; " * 5 + "echo done"], profile)
    files = sorted((run_dir / "proc").iterdir())
    assert len(files) >= 2, files
    trues = _trues(run_dir)
    assert len(trues) == 5 and all(p.state == procfile.STATE_EXITED for p in trues)
    assert {p.file for p in procfile.read_dir(run_dir / "proc")} == set(files)


def test_the_file_is_as_large_as_the_slots_claimed(tmp_path):
    # Growing the file allocates nothing (fallocate took a block of disk per
    # process: it makes only the two pages a shell's command's start writes
    # first, store.c's image_pages_ahead, in a file in memory), and it is
    # no larger than the slots claimed: a copy of the
    # run that fills holes (shutil.copytree does) writes little room nobody
    # took.  A process claims slots ahead for its next vfork children, for
    # one child, then two, four ...: those never used are holes, fewer than
    # the slots used.
    run_dir = _run(tmp_path, ["sh", "-c", "/bin/true; " * 10 + "echo done"])
    records = procfile.read_dir(run_dir / "proc")
    fallocate = syscall_table.NUMBERS["fallocate"]
    assert all(r.internal.get(fallocate, 0) in (0, 2) for r in records), [r.internal for r in records]
    (slots,) = (run_dir / "proc").iterdir()
    with open(slots, "rb") as f:
        head = procfile.SLOTS.unpack(f.read(procfile.SLOTS_HEAD))
        stride = head["stride"]
        claimed = (slots.stat().st_size - procfile.SLOTS_HEAD) // stride
        assert slots.stat().st_size == procfile.SLOTS_HEAD + claimed * stride
        used = {(r.offset - procfile.SLOTS_HEAD) // stride for r in records}
        assert len(used) == len(records) == 21
        unused = set(range(claimed)) - used
        assert len(unused) < len(used), (claimed, sorted(used))
        written = {(first - procfile.SLOTS_HEAD) // stride
                   for first, stop in data_extents(f.fileno(), procfile.SLOTS_HEAD, slots.stat().st_size)
                   for first in range(first, stop, 4096)}
        assert not written & unused


@pytest.mark.parametrize("fork", [False, True])
def test_vfork_children_of_threads_and_of_a_fork_child_take_slots_of_their_own(tmp_path, fork):
    # A process claims slots ahead for its vfork children, which take them
    # from its memory: children of several threads take them at once, and a
    # fork child, which starts with a copy of that memory, must not take the
    # ones its parent still holds.
    argv = [str(PROGRAMS / "spawn_threads"), "4", "12", "/bin/true", *(["fork"] if fork else [])]
    run_dir = _run(tmp_path, argv)
    records = procfile.read_dir(run_dir / "proc")
    spawned = 2 + 2 * 48 if fork else 48
    trues = [p for p in records if p.exe == "/usr/bin/true"]
    children = [p for p in records if p.exec_path == "/bin/true"]
    assert len(trues) == len(children) == spawned
    assert all(p.state == procfile.STATE_EXITED and p.exit_code == 0 for p in trues)
    assert len({p.pid for p in trues}) == spawned
    assert {p.pid for p in children} == {p.pid for p in trues}
    # a child's pid and parent as the kernel gave them to the program it ran
    # (the child's own come from its stamp and its parent's record)
    assert {(p.pid, p.ppid) for p in children} == {(p.pid, p.ppid) for p in trues}
    spawners = {p.pid for p in records if p.exe.endswith("/spawn_threads") and not p.exec_path}
    assert len(spawners) == (2 if fork else 1) and {p.ppid for p in children} == spawners
    slots = [(p.file, p.offset) for p in records]
    assert len(slots) == len(set(slots))


def test_a_slot_file_still_being_made_holds_no_record_yet(tmp_path):
    # Its first process sizes it and writes its head, `ready` last: a reader
    # of a live run may find it in between.
    run_dir = _run(tmp_path, ["/bin/true"])
    before = [(p["pid"], p["exe"]) for p in load_run(run_dir)["processes"]]
    assert len(before) == 1
    head = bytearray(procfile.SLOTS_HEAD)
    procfile.SLOTS.pack_into(head, 0, magic=procfile.SLOTS_MAGIC)
    (run_dir / "proc" / "u4242-0.ferry").write_bytes(bytes(head))  # ready = 0
    (run_dir / "proc" / "u4243-0.ferry").write_bytes(b"")           # not sized yet
    assert [(p["pid"], p["exe"]) for p in load_run(run_dir)["processes"]] == before


@pytest.mark.parametrize("profile", ["trace", "count"])
def test_threads_beyond_the_block_table_are_counted_once_each(tmp_path, profile):
    # 1100 threads and the main thread alive at once: 77 find none of the
    # record's 1024 blocks free.  The header said one more at each of their
    # calls (and each call looked through all the blocks again).
    threads = 1100
    run_dir = _run(tmp_path, [str(PROGRAMS / "many_threads"), str(threads), "100"], profile)
    (record,) = procfile.read_dir(run_dir / "proc")
    assert record.max_blocks == 1024
    assert record.overflow == threads + 1 - record.max_blocks
    (entry,) = load_run(run_dir)["processes"]
    assert entry["reason"].startswith(f"{threads + 1 - 1024} threads beyond"), entry["reason"]


@pytest.mark.parametrize("profile", ["trace", "count", "fibers"])
def test_a_vfork_childs_record_holds_its_own_start_and_figures_not_its_parents(tmp_path, profile):
    # A vfork child's record is written from its parent's header with the
    # child's identity put in.  It kept the parent's start (the child
    # seemed to have lived as long as its parent had), the TSC marks of the
    # parent's constructor, and the parent's catch-all and aggregation
    # figures so far, which a report counted once more for each child.
    run_dir = _run(tmp_path, [str(PROGRAMS / "spawn_later"), "50", "300"], profile)
    procs = procfile.read_dir(run_dir / "proc")
    (parent,) = [p for p in procs if p.exe.endswith("/spawn_later") and not p.exec_path]
    children = [p for p in procs if p.pid != parent.pid and p.exec_path == "/bin/true"]
    assert len(children) == 2, [(p.pid, p.exe, p.exec_path) for p in procs]
    assert parent.caught and parent.caught["caught"] >= 50, parent.caught
    if profile == "fibers":
        assert parent.aggregation and parent.aggregation["native"] + parent.aggregation["aggregated"] >= 50
    for child in children:
        # it began after its parent slept, and ended after it began
        assert child.start_mono_ns - parent.start_mono_ns >= 300_000_000, (child.start_mono_ns,
                                                                         parent.start_mono_ns)
        assert child.start_mono_ns <= child.end_mono_ns and child.start_real_ns <= child.end_real_ns
        assert child.start_tsc <= child.end_tsc
        assert not (child.caught or {}).get("caught"), child.caught
        assert child.aggregation is None, child.aggregation
        assert child.overflow == 0
        with open(child.file, "rb") as f:
            spans = procfile.HEADER.unpack(os.pread(f.fileno(), procfile.HEADER_SIZE, child.offset))["start_spans"]
        # in their place, the steps of its exec hook, in order, before its record's end
        hook = procfile.constant("FERRY_SPAN_EXEC_HOOK")
        steps = [spans[hook]] + [spans[i] for i in sorted(procfile.HOOK_STEPS)] + [child.end_tsc]
        assert all(steps) and steps == sorted(steps), (spans, child.end_tsc)
        assert not any(spans[len(procfile.HOOK_STEPS):hook]), spans


@pytest.mark.parametrize("numbers, pad, pages", [(3, 0, [0]), (20, 0, [0, 1]), (53, 0, [0, 1]),
                                                 (20, 4000, None)])
def test_a_vfork_childs_few_figures_are_packed_into_its_header(tmp_path, test_programs, numbers, pad, pages):
    # A vfork child's block held its few figures (a shell's command: two
    # calls) on 3 pages of its own (counts, timings, sites): 3 pages of
    # tmpfs to allocate and write for every command.  They are packed into
    # the room after the command line when they fit; when they do not (a
    # parent's long command line, PAD), the block is written as before.
    # Either way the record reads the same figures.
    argv = [str(test_programs / "vfork_calls"), str(numbers)] + (["x" * pad] if pad else [])
    run_dir = _run(tmp_path, argv)
    (child,) = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
    (block,) = child.blocks
    failing = {nr: s for nr, s in block.nr.items() if s.errors}
    assert len(failing) == numbers, sorted(block.nr)
    for nr, s in failing.items():
        assert (s.calls, s.errors, sum(s.hist), sum(s.errnos.values())) == (1, 1, 1, 1), (nr, s)
        assert 0 < s.min_ticks == s.max_ticks == s.ticks, (nr, s)
    assert block.nr[syscall_table.NUMBERS["execve"]].calls == 1
    assert sum(calls for calls, _, _ in block.sites.values()) >= numbers, block.sites
    written = sorted(page - child.offset // 4096 for page in pages_with_data(
        child.file, child.offset, child.offset + procfile.HEADER_SIZE + procfile.BLOCK.size))
    if pages is not None:
        assert written == pages, written
    else:
        assert [p for p in written if p >= procfile.HEADER_SIZE // 4096], written


def test_a_corrupt_packed_block_is_reported_by_name(tmp_path, test_programs):
    import re
    import struct
    run_dir = _run(tmp_path, [str(test_programs / "vfork_calls"), "3"])
    (child,) = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
    with open(child.file, "r+b") as f:
        head = procfile.HEADER.unpack_only(os.pread(f.fileno(), procfile.HEADER_SIZE, child.offset),
                                           ("packed_at", "packed_len", "cmdline_len"))
        assert head["packed_len"], head
        runs = child.offset + head["packed_at"]
        cases = [(runs, struct.pack("<II", 4, 8), "corrupt packed block"),       # not a word
                 (runs, struct.pack("<II", procfile.BLOCK.size, 8), "corrupt packed block"),  # past the tables
                 (runs, struct.pack("<II", 0, 1 << 20), "corrupt packed block"),  # beyond its room
                 (child.offset + procfile.HEADER.offset("packed_at"),
                  struct.pack("<I", procfile.HEADER.offset("cmdline")), "corrupt process file header")]
        for at, bad, problem in cases:
            good = os.pread(f.fileno(), len(bad), at)
            os.pwrite(f.fileno(), bad, at)
            with pytest.raises(procfile.ProcFileError, match=re.escape(str(child.file)) + ".*" + problem):
                procfile.read_all(child.file)
            os.pwrite(f.fileno(), good, at)
    assert [p.blocks[0].nr for p in procfile.read_all(child.file) if p.exec_path] == [child.blocks[0].nr]


def test_every_numbers_errno_is_counted_however_many_numbers_fail_with_it(tmp_path, test_programs):
    # The errno table was probed from the low bits of a product, which
    # depend only on the errno: every number failing with EBADF was looked
    # for among the same 16 entries, and the errnos of those beyond them
    # were lost (15 of these 53).
    run_dir = _run(tmp_path, [str(test_programs / "vfork_calls"), "-53"])
    (record,) = procfile.read_dir(run_dir / "proc")
    failing = {nr: s for b in record.blocks for nr, s in b.nr.items() if s.errors}
    assert len(failing) == 53, sorted(failing)
    assert {nr: sum(s.errnos.values()) for nr, s in failing.items()} == {nr: 1 for nr in failing}


def test_a_vfork_childs_record_keeps_sites_beyond_the_tables_first_pages(tmp_path, test_programs):
    # A vfork child's record is made from the pages of its block that may
    # hold anything, which the block says: its sites table's first page,
    # and the rest once an entry spilled beyond it.  A child that calls
    # from 700 sites (more than the first five pages hold) keeps them all;
    # read from the first page alone, 128 were kept.
    program = str(test_programs / "vfork_sites")
    _run(tmp_path, [program])    # learns the program's sites
    run_dir = _run(tmp_path, [program])
    records = procfile.read_dir(run_dir / "proc")
    (child,) = [p for p in records if any(q.pid == p.ppid for q in records)]
    (block,) = child.blocks
    getppid = syscall_table.NUMBERS["getppid"]
    assert block.calls[getppid] == 700, block.calls[getppid]
    assert len(block.sites) == 700 and sum(c for c, _, _ in block.sites.values()) == 700, len(block.sites)


def test_a_vfork_child_that_never_reached_its_exec_hook_records_no_hook_time(tmp_path):
    # A vfork child's record keeps when its exec hook began.  The time was
    # the thread's, kept from one child to the next: a child that died
    # before any exec (posix_spawn's file action failing) said that the
    # hook of the child before it had run for it.
    code = ("import os, subprocess\n"
            "os.waitpid(os.posix_spawn('/bin/true', ['true'], os.environ), 0)\n"
            "try:\n"
            "    os.posix_spawn('/bin/true', ['true'], os.environ,\n"
            "                   file_actions=[(os.POSIX_SPAWN_OPEN, 3, '/nonexistent/x', os.O_RDONLY, 0)])\n"
            "except FileNotFoundError:\n"
            "    print('no child')\n")
    run_dir = _run(tmp_path, [PYTHON, "-c", code])
    records = procfile.read_dir(run_dir / "proc")
    root = json.loads((run_dir / "info.json").read_text())["pid"]
    children = [r for r in records if r.ppid == root and r.argv[:2] == [PYTHON, "-c"]]
    hook = procfile.constant("FERRY_SPAN_EXEC_HOOK")
    spans = {}
    for r in children:
        with open(r.file, "rb") as f:
            spans[r.exec_path] = procfile.HEADER.unpack(os.pread(f.fileno(), procfile.HEADER_SIZE,
                                                                 r.offset))["start_spans"][hook]
    assert set(spans) == {"/bin/true", ""}, [(r.pid, r.exec_path, r.state) for r in children]
    assert spans["/bin/true"] and not spans[""], spans
