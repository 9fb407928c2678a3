"""Enabling a process costs what it must and no more (issue 17).

A `cat` started by a shell under `ferry run --no-learn` is a child that the
exec hook enabled: a copy of it that no run rewrote is enabled by preloading
the shim (its libc patched at load time from the cached plan).  While it waits on
its input, its /proc/PID/smaps says how its memory is mapped; the process files say
what the shim did to start.
"""
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY, ferry, waits_in
from ferry import procfile
from ferry.base import syscall_table
from ferry.injector.environment import is_setting

CAT_FROM_SH = ["sh", "-c", "/bin/cat; :"]


def _descendants(pid):
    try:
        kids = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in _descendants(k)]


def _comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _smaps(pid):
    """[(header line, {field: value})] of each mapping of `pid`."""
    maps = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            maps.append((line, {}))
        elif maps and ":" in head[0]:
            maps[-1][1][head[0].rstrip(":")] = " ".join(head[1:])
    return maps


def _while_cat_waits(tmp_path, profile, inspect, command=CAT_FROM_SH, opts=()):
    """Run `command` under ferry; call inspect(pid of cat) while it waits,
    enabled and started: its process file is mapped before the shim enables
    its modules and patches them (a plan's copy made and synced meanwhile:
    milliseconds), so cat is looked at once it reads its input."""
    p = subprocess.Popen(FERRY + ["run", "--no-learn", *opts, "-p", profile, "-o", str(tmp_path / "run"),
                                  "--", *command],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            cats = [d for d in _descendants(p.pid) if _comm(d) == "cat"]
            if cats and any(".ferry" in m[0] for m in _smaps(cats[0])) and waits_in(cats[0], 0, 0):
                return inspect(cats[0])
            time.sleep(0.1)
        raise AssertionError("cat never started enabled")
    finally:
        p.stdin.close()
        p.wait(timeout=120)


def test_process_file_is_mapped_without_readahead(tmp_path):
    # The file is sparse and sized for every block it may ever hold: on disk
    # a fault with readahead zeroed page cache over its holes (~2 ms per
    # process).  A tmpfs, where `ferry run` keeps the records while the
    # program runs, reads nothing ahead: no need to say so there.
    def inspect(pid):
        return [(line, f.get("VmFlags", "")) for line, f in _smaps(pid) if ".ferry" in line]
    mapped = _while_cat_waits(tmp_path, "trace", inspect, opts=("--no-stage",))
    assert mapped, "no mapping of the process file"
    for line, flags in mapped:
        assert "rr" in flags.split(), (line, flags)


def test_no_process_spins_to_calibrate_the_tsc(tmp_path):
    # The TSC rate is the machine's: the first process of a run takes the
    # kernel's conversion, or the rate measured once since boot (kept in the
    # image cache), and hands it down; no later process, and in a later run
    # no process at all, spins to find it.  Natively, /bin/true makes no
    # clock_gettime at all.
    for run in ("first", "second"):
        run_dir = tmp_path / run
        ferry("run", "-p", "trace", "-o", run_dir, "--", "sh", "-c", "/bin/true; /bin/true; /bin/true",
              check=True, timeout=300, text=False)
    procs = procfile.read_dir(run_dir / "proc")
    trues = [p for p in procs if p.exe == "/usr/bin/true"]
    assert len(trues) == 3 and all(p.cal_tsc and p.cal_ns for p in procs)
    rates = {p.cal_ns / p.cal_tsc for p in procs}
    assert len(rates) == 1, rates  # one rate, handed down
    clock_gettime = syscall_table.NUMBERS["clock_gettime"]
    for p in procs:
        # the file's start and end stamps (a monotonic and a real-time reading
        # each) and the time of each child's end the process waited for
        assert p.internal.get(clock_gettime, 0) <= 4 + len(p.waits), (p.exe, p.internal)


def _libc_text_dirty_kb(pid):
    return sum(int(f.get("Private_Dirty", "0 kB").split()[0]) for line, f in _smaps(pid)
               if "x" in line.split()[1] and ("libc.so" in line or "libc" in _libc_ino(line)))


def _libc_ino(line):
    """The plan copy mapped over libc's text is named by the plan: its name
    starts with libc's file identity (rewriter/cache.py, exec_key)."""
    st = Path("/lib/x86_64-linux-gnu/libc.so.6").stat()
    return "libc" if f"/plans/{st.st_dev}-{st.st_ino}-" in line else ""


def test_libc_text_patched_at_load_stays_shared(tmp_path):
    # Natively libc's text is all clean shared page cache.  Patched at load
    # time, its pages were written in every process: private copies.
    native = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any("libc.so" in line for line, _ in _smaps(native.pid)):
            assert time.monotonic() < deadline, "cat never mapped libc"
            time.sleep(0.05)
        native_kb = _libc_text_dirty_kb(native.pid)
    finally:
        native.stdin.close()
        native.wait(timeout=60)

    def inspect(pid):
        patched = [line for line, _ in _smaps(pid) if "x" in line.split()[1] and _libc_ino(line)]
        return _libc_text_dirty_kb(pid), patched
    # a file no earlier run rewrote: it is enabled by preloading the shim
    cat = tmp_path / "cat"
    shutil.copy2("/bin/cat", cat)
    for profile in ("trace", "off"):
        kb, patched = _while_cat_waits(tmp_path / profile, profile, inspect,
                                       ["sh", "-c", f"{cat}; :"])
        assert kb <= native_kb, (profile, kb, native_kb)
        assert patched, "libc's text is not the shared patched copy"


def _hook_reads(run_dir, env, profile="count"):
    """Reads of the program's memory (process_vm_writev, ferry_read_pieces)
    and getpid calls of the exec hook in each of a shell's two /bin/true
    children, run with `env`."""
    ferry("run", "-p", profile, "-o", run_dir, "--", "sh", "-c", "/bin/true; /bin/true", check=True,
          timeout=300, env=env, text=False)
    procs = procfile.read_dir(run_dir / "proc")
    execs = [p for p in procs if p.exec_path == "/bin/true"]
    trues = [p for p in procs if p.exe == "/usr/bin/true"]
    assert len(execs) == 2 and len(trues) == 2, [(p.exe, p.exec_path) for p in procs]
    reads = syscall_table.NUMBERS["process_vm_writev"]
    getpid = syscall_table.NUMBERS["getpid"]
    return [(p.internal.get(reads, 0), p.internal.get(getpid, 0)) for p in execs]


def test_exec_hook_reads_the_environment_in_a_few_calls(tmp_path):
    # The hook read each variable's pointer and head with a system call
    # apiece (and a getpid for each): ~400 calls of its own for 100 variables.
    env = {**os.environ, **{f"SPAWN_VAR_{i}": "x" * (i % 90) for i in range(100)}}
    for reads, getpid in _hook_reads(tmp_path / "run", env):
        assert reads <= 16 and getpid <= 16, (reads, getpid)


def test_a_usual_environment_costs_the_hook_no_more_calls_than_a_tiny_one(tmp_path):
    # A shell's environment (40-60 variables) was read in two batches of 32,
    # each a getpid and two reads; one batch of 64 takes it whole.
    # (a first run may learn the programs: the next ones find them cached;
    # without the catch-all, which reads the child's rt_sigprocmask mask
    # through the kernel when it lies off the page of the stack pointer,
    # once in a while, as the stack's place falls)
    profile = tmp_path / "count.toml"
    profile.write_text('mode = "count"\ncatch_all = false\n')
    ferrys = {k: v for k, v in os.environ.items() if is_setting(k)}  # the tests' cache and shim
    tiny_env = {**ferrys, **{f"V{i}": "x" for i in range(4)}}
    _hook_reads(tmp_path / "learn", tiny_env, profile)
    tiny = _hook_reads(tmp_path / "tiny", tiny_env, profile)
    usual = _hook_reads(tmp_path / "usual", {**ferrys, **{f"V{i}": "x" * (i % 40) for i in range(60)}},
                        profile)
    assert usual == tiny, (usual, tiny)


FLOCK, FTRUNCATE = syscall_table.NUMBERS["flock"], syscall_table.NUMBERS["ftruncate"]


def _children_and_images(tmp_path, shell, script, count):
    """[(child, image)] of the `count` commands of /bin/true `shell` ran
    under trace: each child's record and its program's, in the slot after
    the child's, with the same pid and parent; and every record of the run.
    Nothing of the slots reaches a program (FERRY_SLOT)."""
    run_dir = tmp_path / "run"
    ferry("run", "-p", "trace", "-o", run_dir, "--", shell, "-c", script, check=True, timeout=300)
    procs = procfile.read_dir(run_dir / "proc")
    children = [p for p in procs if p.exec_path == "/bin/true"]
    images = [p for p in procs if p.exe == "/usr/bin/true"]
    assert len(children) == len(images) == count, [(p.pid, p.exe, p.exec_path) for p in procs]
    pairs = []
    for child in children:
        image = next(p for p in images if p.pid == child.pid)
        with open(image.file, "rb") as f:
            slots = procfile.record_offsets(f)
        assert image.file == child.file and slots.index(image.offset) == slots.index(child.offset) + 1
        assert image.ppid == child.ppid
        pairs.append((child, image))
    out = ferry("run", "-p", "trace", "-o", tmp_path / "env", "--", shell, "-c", "/usr/bin/env; :",
                check=True, timeout=300).stdout
    assert "FERRY_SLOT" not in out
    return pairs, procs


def test_a_program_a_vfork_child_execs_takes_the_slot_the_child_claimed(tmp_path):
    # The child claims the program's slot beside its own, under one lock:
    # the program's shim maps it (FERRY_SLOT) where it took the file's lock
    # again, read its head and grew it.
    pairs, _ = _children_and_images(tmp_path, "sh", "/bin/true; /bin/true", 2)
    for child, image in pairs:
        assert child.internal.get(FLOCK) == 2 and child.internal.get(FTRUNCATE) == 1, child.internal
        assert not image.internal.get(FLOCK) and not image.internal.get(FTRUNCATE), image.internal


@pytest.mark.skipif(not shutil.which("bash"), reason="bash is not installed")
def test_a_bash_command_and_its_program_take_slots_their_parent_claimed(tmp_path):
    """bash forks for each command, where sh vforks.  The fork child took
    its slot under the file's lock (flock, pread, ftruncate, flock), and
    so did the program it execs: the parent now takes two before the fork
    from those it claimed ahead, one lock for many commands; the child maps
    the first and hands the second to its program (FERRY_SLOT)."""
    pairs, procs = _children_and_images(tmp_path, "bash", "for i in 1 2 3 4 5 6 7 8; do /bin/true; done", 8)
    for child, image in pairs:
        assert not child.internal.get(FLOCK) and not child.internal.get(FTRUNCATE), child.internal
        assert not image.internal.get(FLOCK) and not image.internal.get(FTRUNCATE), image.internal
    # the parent's claims: its own record's, then for one command, two,
    # four and eight at once (not a claim per command)
    shell = next(p for p in procs if p.exe == "/usr/bin/bash" and not p.exec_path)
    assert shell.internal.get(FLOCK, 0) <= 2 * 5, shell.internal


def test_a_subshells_commands_take_the_slots_it_claimed_ahead(tmp_path):
    """A subshell is a fork child whose commands are vfork children: their
    slots come from those it claims ahead, for one command, then two,
    four, eight.  The slot its parent took for the program it might exec
    once lay among them, and kept its own claims from being kept: each of
    its commands claimed under the file's lock again."""
    run_dir = tmp_path / "run"
    ferry("run", "-p", "trace", "-o", run_dir, "--", "sh", "-c",
          "( for i in 1 2 3 4 5 6 7 8 9 10 11 12; do /bin/true; done ); true", check=True, timeout=300)
    children = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
    assert len(children) == 12
    claims = [p.internal.get(FLOCK, 0) // 2 for p in children]
    assert sum(claims) <= 4, claims


def test_a_vfork_childs_file_holds_only_what_it_counted(tmp_path):
    # dash starts commands with vfork: the child's file was written whole,
    # header and block, 330 kB of mostly zeros per command, every page of
    # it allocated on disk and written back.
    run_dir = tmp_path / "run"
    ferry("run", "-p", "trace", "-o", run_dir, "--", "sh", "-c", "/bin/true; /bin/true", check=True,
          timeout=300, text=False)
    children = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
    assert len(children) == 2
    for p in children:
        assert p.blocks and p.internal, p.path  # still a whole, readable record
        assert _allocated(p) <= 128 * 1024, (p.path, _allocated(p))


def _exec_children(run_dir, path):
    """The blocks of the vfork children that exec'd `path` in a run, oldest first."""
    children = sorted((p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == path),
                      key=lambda p: p.start_mono_ns)
    return [p.blocks[0] for p in children]


def _figures(block):
    return block.calls, {n: (s.calls, s.errors, s.errnos) for n, s in block.nr.items()}


def test_a_vfork_child_counts_none_of_the_previous_childs_calls(tmp_path):
    """A shell's vfork children count in one spare block of the shell's,
    zeroed for each child: by hand, for the pages the last child's record
    said it used, so that the next child does not fault them in again.  A
    child whose exec failed on every directory of PATH (then wrote its error
    and exited: other numbers, errnos, pages) leaves nothing to the next."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    runs = {}
    for name, script in (("after", "no_such_command_x; /bin/true; /bin/true; /bin/true"),
                         ("alone", "/bin/true")):
        log, run_dir = tmp_path / f"{name}.strace", tmp_path / name
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=madvise", "-o", str(log), *FERRY, "run",
                        "-p", "trace", "--no-learn", "-o", str(run_dir), "--", "sh", "-c", script],
                       capture_output=True, timeout=300)
        runs[name] = (log.read_text(), _exec_children(run_dir, "/bin/true"))
    (alone,), after = runs["alone"][1], runs["after"][1]
    assert len(after) == 3
    for child in after:
        assert _figures(child) == _figures(alone)
    # the spare given back (MADV_DONTNEED over the block and its tally) only
    # for the first child, and after the one whose exec failed
    spare = (procfile.BLOCK_TABLES[procfile.VERSION]["events"] + procfile.HEADER.span("internal")
             + procfile.HEADER.span("own"))
    gave_back = [line for line in runs["after"][0].splitlines() if f", {spare}, MADV_DONTNEED" in line]
    assert 1 <= len(gave_back) <= 2, (spare, gave_back)


def _allocated(record):
    """Bytes of disk that a record's room holds (the rest is holes)."""
    with open(record.file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size
        if record.offset:  # a slot: its room is the file's stride
            stride, = struct.unpack_from("<Q", f.read(procfile.SLOTS_HEAD), 24)
            end = min(size, record.offset + stride)
        pos, total = record.offset, 0
        while pos < end:
            try:
                data = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past pos
                break
            if data >= end:
                break
            hole = min(os.lseek(f.fileno(), data, os.SEEK_HOLE), end)
            total, pos = total + hole - data, hole
        return total



def _dirty_maps(pid, perms):
    """(header line, kB of Private_Dirty) of each mapping whose permissions
    `perms` accepts."""
    return [(line, int(f.get("Private_Dirty", "0 kB").split()[0])) for line, f in _smaps(pid)
            if perms(line.split()[1])]


def _exec_maps(pid):
    """(header line, kB of Private_Dirty) of each executable mapping."""
    return _dirty_maps(pid, lambda perms: "x" in perms)


def test_trampolines_placed_at_load_are_shared(tmp_path):
    # The trampolines of libc's plan are the same bytes in every process that
    # placed them at the same distance: ~45 KiB were copied into anonymous
    # memory of each process; they are pages of a file of the cache, clean
    # and shared like the patched text.
    cat = tmp_path / "cat"
    shutil.copy2("/bin/cat", cat)
    for attempt in ("makes-the-file", "maps-it"):
        maps = _while_cat_waits(tmp_path / attempt, "trace", _exec_maps, ["sh", "-c", f"{cat}; :"])
        tramps = [(line, kb) for line, kb in maps if line.endswith(".tramp-ctl")]
        assert tramps and all(kb == 0 for _, kb in tramps), (attempt, maps)
        anonymous = [line for line, _ in maps if len(line.split()) < 6]
        assert not anonymous, (attempt, anonymous)


def test_the_control_block_placed_at_load_is_the_caches_until_written(tmp_path):
    # The control block after libc's trampolines (8 KiB: its header, then a
    # record per site) is the same bytes in every process until the shim
    # writes its vector: it was three pages of anonymous memory, zeroed and
    # written in each process; now it is mapped from the trampolines' file,
    # and only the page the shim writes is the process's own.
    cat = tmp_path / "cat"
    shutil.copy2("/bin/cat", cat)
    for attempt in ("makes-the-file", "maps-it"):
        maps = _while_cat_waits(tmp_path / attempt, "trace", lambda pid: _dirty_maps(pid, "rw-p".__eq__),
                                ["sh", "-c", f"{cat}; :"])
        ctl = [(line, kb) for line, kb in maps if line.endswith(".tramp-ctl")]
        assert ctl and all(kb <= 4 for _, kb in ctl), (attempt, ctl)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_patching_at_load_looks_up_plans_only_for_files(tmp_path):
    # The vDSO is a module without a file: no plan can name it.
    cat = tmp_path / "true"
    shutil.copy2("/bin/true", cat)
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=newfstatat,stat,statx", "-o", str(log),
                    *FERRY, "run", "--no-learn", "-o", str(tmp_path / "run"), "--", "sh", "-c", f"{cat}; :"],
                   check=True, capture_output=True, timeout=300)
    assert "linux-vdso" not in log.read_text()


# Python modules that Debian's python3 loads from shared objects of their own
# (and the libraries those need): each import a change of the module list
EXTENSION_MODULES = ("ssl", "sqlite3", "decimal", "ctypes", "hashlib", "bz2", "lzma", "socket", "select",
                     "array", "math", "cmath", "datetime", "csv", "struct", "pickle", "random", "uuid",
                     "unicodedata", "mmap", "fcntl", "termios", "resource", "grp", "binascii", "asyncio",
                     "multiprocessing", "readline", "curses", "xml.etree.ElementTree", "zoneinfo")


def test_each_module_is_looked_for_a_plan_of_once(tmp_path):
    # Each change of the module list (a dlopen: a Python import of an
    # extension module) looks for plans of the modules not patched yet.  One
    # that has none was looked for again at every change, a stat and an
    # openat that fails: ~380 of each for a Python that imported 40 modules.
    code = ("import importlib\n"
            f"for m in {EXTENSION_MODULES!r}:\n"
            "    try: importlib.import_module(m)\n"
            "    except ImportError: pass\n"
            "print(len({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l}))\n")
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "/usr/bin/python3", "-c", code,
              check=True, timeout=300)
    shared_objects = int(r.stdout.split()[-1])
    (python,) = [p for p in procfile.read_dir(run_dir / "proc") if "python3" in p.exe]
    looked = python.internal.get(syscall_table.NUMBERS["openat"], 0) + \
        python.internal.get(syscall_table.NUMBERS["newfstatat"], 0)
    assert shared_objects >= 20 and looked <= 2 * shared_objects + 40, (shared_objects, python.internal)


def test_a_child_patched_at_load_time_next_runs_the_cached_libraries(tmp_path):
    # After a run, a program the shim enabled by patching its libraries
    # from their plans gets the cache's rewritten libraries: its next start
    # applies no plan (~50 µs less), from its own file still.
    from ferry.rewriter import cache
    from ferry.rundata import load_run
    cat = tmp_path / "cat"
    shutil.copy2("/bin/cat", cat)

    def run(name, *learn):
        """The libc.so.6 files and the executable that cat maps, enabled."""
        r = subprocess.run(FERRY + ["run", *learn, "-o", str(tmp_path / name), "--", "sh", "-c",
                                    f"{cat} /proc/self/maps"],
                           capture_output=True, text=True, timeout=300, check=True)
        assert [p["enabled"] for p in load_run(tmp_path / name)["processes"]
                if p["exe"] == str(cat)] == [True]
        maps = [line.split()[-1] for line in r.stdout.splitlines()]
        return {m for m in maps if m.endswith("/libc.so.6")}, maps[0]

    libc, exe = run("first")
    assert libc == {os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6")} and exe == str(cat), libc
    libc, exe = run("second", "--no-learn")
    assert exe == str(cat)      # its own file, still
    assert len(libc) == 1 and Path(libc.pop()).is_relative_to(cache.root() / "programs"), libc


def test_exec_of_an_elf_program_asks_nothing_about_windows(tmp_path):
    # With Windows support configured (ferry.dll built, wine's Detours found),
    # every exec asked whether its file was a PE program (faccessat, openat,
    # pread, close) before the cache lookup, for ELF programs too.
    from ferry.injector import pe_launch
    from ferry.profiles import loader
    if not shutil.which("strace"):
        pytest.skip("no strace")
    if not pe_launch.linux_settings(loader.load("count"), tmp_path):
        pytest.skip("Windows support is not configured here")
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=faccessat,faccessat2,access", "-o", str(log),
                        *FERRY, "run", "-p", "count", "-o", str(tmp_path / "run"), "--",
                        "sh", "-c", "/bin/true; /bin/true"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    asked = [line for line in log.read_text().splitlines() if '"/bin/true"' in line]
    assert not asked, asked


def test_site_records_of_the_first_module_stay_the_files(tmp_path):
    # The shim numbered every site in the control block of every module it
    # enabled: each page of libc's 526 site records became a private copy
    # in every process.  Only the control block's first page (the vector it
    # writes) needs to be the process's own.
    magic = b"FERRY\0CTL\0v1\0\0\0\0"

    def inspect(pid):
        blocks = []
        for line, f in _smaps(pid):
            head = line.split()
            if len(head) < 6 or head[1] != "rw-p" or "libc.so" not in head[5]:
                continue
            with open(head[5], "rb") as lib:
                lib.seek(int(head[2], 16))
                if lib.read(len(magic)) == magic:
                    blocks.append((line, int(f["Size"].split()[0]), int(f["Private_Dirty"].split()[0])))
        return blocks
    blocks = _while_cat_waits(tmp_path, "trace", inspect, ["/bin/cat"])
    assert blocks, "no rewritten libc with a control block of its own"
    for line, size_kb, dirty_kb in blocks:
        assert size_kb >= 8, line  # else nothing could tell
        assert dirty_kb <= 4, (line, size_kb, dirty_kb)
