"""What an enabled process's start writes of its record: each page of the
record it touches is a page of the run's file to fault in, allocate and
write back, in every process.  A start writes its header's first page and
the pages its counts need, and nothing for what did not happen."""
import collections
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import FERRY, PROGRAMS, ferry, pages_with_data, waits_in
from ferry import catchdata, procfile
from ferry.base import syscall_table
from ferry.rundata import load_run


def _records(run_dir, exe):
    return [r for r in procfile.read_dir(run_dir / "proc") if r.exe == exe]


def test_catch_area_written_only_once_a_call_is_caught(tmp_path):
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", "/bin/true; :",
              timeout=120)
    assert r.returncode == 0, r.stderr
    (true,) = _records(run_dir, "/usr/bin/true")
    assert true.caught == {"enabled": True, "caught": 0, "overflow": 0, "sites": []}
    with open(true.file, "rb") as f:
        area = os.pread(f.fileno(), 4096, true.offset + catchdata.OFFSET)
    assert area == bytes(4096), "the catch area's page was written though nothing was caught"
    model = load_run(run_dir)
    assert model["catch_all"]["enabled"]


LOADER = os.path.realpath("/lib64/ld-linux-x86-64.so.2")


def _is_loader(module):
    return os.path.realpath(module) == LOADER


def _loader_plan():
    from ferry.rewriter import cache
    return cache.root() / "plans" / cache.exec_key(LOADER)


def test_loader_plan_waits_for_the_first_load(tmp_path, test_programs, monkeypatch):
    """ld.so's plan (made once the catch-all caught its calls in a dlopen) is
    applied when the list of modules first changes: a process that loads
    nothing more is spared mapping ld.so's patched copy, and one that loads
    a library has every call counted, as strace counts them."""
    from test_run_matches_strace import _program_calls_after_shim_start, _trace
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    argv = [PROGRAMS / "dlopen_main", PROGRAMS / "libsite.so", 5]
    first = ferry("run", "-o", tmp_path / "first", "--", *argv, timeout=120)
    assert first.returncode == 0 and "5 of 5" in first.stdout, first.stderr
    assert _loader_plan().is_file(), "the first run's dlopen did not get ld.so planned"

    quiet = ferry("run", "--no-learn", "-o", tmp_path / "quiet", "--", "sh", "-c", "/bin/true; :",
                  timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    (true,) = _records(tmp_path / "quiet", "/usr/bin/true")
    assert true.modules and not [m for m in true.modules if _is_loader(m[0])], true.modules

    lines, run_dir = _trace(tmp_path, [str(a) for a in argv])
    (main,) = _records(run_dir, str(PROGRAMS / "dlopen_main"))
    assert [m for m in main.modules if _is_loader(m[0])], main.modules
    model = load_run(run_dir)
    root = model["info"]["pid"]
    seen, started = _program_calls_after_shim_start(lines, run_dir, root)
    assert root in started
    counted = collections.Counter({s["name"]: s["calls"] for s in model["syscalls"]})
    shim_own = collections.Counter(model["shim_calls"])
    assert counted["getppid"] == 5 and counted["openat"] >= 1
    assert seen == counted + shim_own, {
        name: (seen[name], counted[name], shim_own[name])
        for name in set(seen) | set(counted) | set(shim_own)
        if seen[name] != counted[name] + shim_own[name]}


def test_mode_off_applies_the_loaders_plan_at_the_first_load_too(tmp_path, test_programs,
                                                                  monkeypatch):
    """Mode off counts nothing, so ld.so's calls before its plan need no
    catch-all to count them: there too the plan waits for the first change
    of the module list.  Applied at every start (18 calls, ~35 us), it made
    the bare interposition slower to start than counting.  A library loaded
    later still finds ld.so and itself enabled."""
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    argv = [PROGRAMS / "dlopen_main", PROGRAMS / "libsite.so", 5]
    first = ferry("run", "-o", tmp_path / "first", "--", *argv, timeout=120)
    assert first.returncode == 0 and "5 of 5" in first.stdout, first.stderr
    assert _loader_plan().is_file(), "the first run's dlopen did not get ld.so planned"

    quiet = ferry("run", "-p", "off", "--no-learn", "-o", tmp_path / "quiet", "--", "sh", "-c",
                  "/bin/true; :", timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    (true,) = _records(tmp_path / "quiet", "/usr/bin/true")
    assert true.modules and not [m for m in true.modules if _is_loader(m[0])], true.modules

    loads = ferry("run", "-p", "off", "--no-learn", "-o", tmp_path / "loads", "--", *argv,
                  timeout=120)
    assert loads.returncode == 0 and "5 of 5" in loads.stdout, loads.stderr
    (main,) = _records(tmp_path / "loads", str(PROGRAMS / "dlopen_main"))
    names = [os.path.realpath(m[0]) for m in main.modules]
    assert LOADER in names and os.path.realpath(PROGRAMS / "libsite.so") in names, names


def test_a_start_maps_its_slot_and_nothing_else_of_the_file(tmp_path):
    """A slot is claimed under the file's lock, the head read (pread), not
    mapped: mapping the head cost its mapping and two faults of its page."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=mmap", "-o", str(log), *FERRY, "run",
                    "--no-learn", "-o", str(run_dir), "--", "sh", "-c", "/bin/true; /bin/true"],
                   check=True, capture_output=True, timeout=300)
    maps = [line for line in log.read_text().splitlines() if re.search(r"\.ferry>, ", line)]
    starts = len(procfile.read_dir(run_dir / "proc"))
    assert starts >= 3
    heads = [line for line in maps if re.search(r"\.ferry>, 0\)", line)]
    assert not heads, heads
    # one mapping per process that mapped its record (vfork children write theirs)
    assert 0 < len(maps) <= starts, maps


def test_the_shim_is_mapped_in_two_pieces(tmp_path):
    """ld.so maps each LOAD segment of the preloaded shim apart, in every
    process: its text and read-only data are one segment (they were three
    with the linker's separate-code default, two mappings more to make
    and to tear down at exit)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=mmap", "-o", str(log), *FERRY, "run",
                    "--no-learn", "-o", str(run_dir), "--", "/bin/true"],
                   check=True, capture_output=True, timeout=300)
    maps = [line for line in log.read_text().splitlines() if re.search(r"/libferry\.so>, ", line)]
    assert len(maps) == 2, maps


def test_the_shims_data_is_one_page_that_the_loader_writes_first(tmp_path):
    """The shim's file-backed data (.dynamic, the GOT, .data) lies in one
    page with the head of .bss, which ld.so zeroes when it maps it: one
    fault.  With RELRO the first part ended a page of its own, which ld.so
    read (.dynamic) and then wrote (its relocations), two faults, and made
    read-only, an mprotect and one mapping more in every process."""
    proc = subprocess.Popen([*FERRY, "run", "-p", "trace", "--no-learn", "-o", str(tmp_path / "run"), "--",
                             "sleep", "31"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    try:
        pid = _sleep_started(proc, 31, enabled=True)
        with open(f"/proc/{pid}/maps") as f:
            shim = [line.split() for line in f if line.rstrip().endswith("/libferry.so")]
        assert sorted(parts[1] for parts in shim) == ["r-xp", "rw-p"], shim
        (data,) = [parts for parts in shim if parts[1] == "rw-p"]
        lo, hi = (int(x, 16) for x in data[0].split("-"))
        assert hi - lo == 4096, data
    finally:
        _end(proc, pid)


def _strace_run(tmp_path, calls, *command, learn=False, cwd=None, env=None):
    """The lines of `strace -f -e trace=CALLS` of `ferry run [--no-learn] --
    COMMAND` (in `cwd`, with `env`: default the test's), and the run
    directory."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    log, run_dir = tmp_path / "strace.log", tmp_path / "run"
    subprocess.run(["strace", "-f", "-qq", "-e", f"trace={calls}", "-o", str(log), *FERRY, "run",
                    *([] if learn else ["--no-learn"]), "-o", str(run_dir), "--", *command],
                   cwd=cwd, env=env, check=True, capture_output=True, timeout=300)
    return log.read_text().splitlines(), run_dir


def _environment(tmp_path, size="small"):
    """An environment of the test's own, for a figure that moves with the
    environment's size (the exec hook's reads, the pages a start touches):
    the machine's is a desktop's 30-60 variables here and a CI runner's
    60-100 (~10 KiB) there.  "small": only what a run needs; "large": that
    and 100 variables of ~100 bytes, a CI runner's."""
    env = {k: os.environ[k] for k in ("FERRY_CACHE", "FERRY_DATA")}
    env.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", HOME=str(tmp_path), LANG="C.UTF-8")
    if size == "large":
        env.update({f"RUNNER_VARIABLE_{i}": f"/home/runner/work/_temp/{i:03d}/" + "v" * (i % 80)
                    for i in range(100)})
    return env


def test_a_process_that_loads_nothing_leaves_the_loaders_text_alone(tmp_path):
    """ld.so's _dl_debug_state is made to jump to the shim only when the
    catch-all first catches a call (a dlopen's search for its file comes
    first): writing the jump cost two mprotect, a private copy of a page
    of ld.so's text and a split of its mapping in every process.  The
    dlopen tests (test_children_enabled, test_catch_all) check that a
    module loaded later is still enabled when it appears."""
    lines, run_dir = _strace_run(tmp_path, "mprotect", "sh", "-c", "/bin/true; :")
    assert len(procfile.read_dir(run_dir / "proc")) >= 3
    writable = [line for line in lines if "PROT_WRITE|PROT_EXEC" in line]
    assert not writable, writable


def test_the_exec_hook_reads_the_caches_link_once(tmp_path):
    """The cache's link for a program is read once and its target looked
    at: a stat of the link read the link's text a second time (a block of
    the file system, for the long names the cache makes)."""
    learn = ferry("run", "-o", tmp_path / "learn", "--", "sh", "-c", "/bin/true; :", timeout=120)
    assert learn.returncode == 0, learn.stderr
    lines, run_dir = _strace_run(tmp_path, "readlinkat,newfstatat,faccessat,faccessat2", "sh",
                                 "-c", "/bin/true; :")
    assert len(procfile.read_dir(run_dir / "proc")) >= 2
    # the links, not the names `ferry` makes them under (".<name>.<pid>.tmp")
    on_links = [line for line in lines if re.search(r"/exec/[0-9]", line)]
    read = [line for line in on_links if "readlinkat(" in line and "ENOENT" not in line]
    assert read and len(read) == len(on_links), on_links


def test_a_shell_reads_a_programs_cache_link_once_however_often_it_runs_it(tmp_path):
    """What the link led to is kept in the shell's memory, which its vfork
    children share: the next command's hook looks at the target only (a
    read of the link's long text was ~3.5 us of each command)."""
    learn = ferry("run", "-o", tmp_path / "learn", "--", "sh", "-c", "/bin/true; :", timeout=120)
    assert learn.returncode == 0, learn.stderr
    lines, run_dir = _strace_run(tmp_path, "readlinkat", "sh", "-c", "/bin/true; /bin/true; /bin/true; :")
    records = [r for r in procfile.read_dir(run_dir / "proc") if r.argv == ["/bin/true"]]
    assert len(records) == 3 and all(r.modules for r in records), records
    read = [line for line in lines if re.search(r"/exec/[0-9]", line) and "readlinkat(" in line]
    assert len(read) == 1, read


def test_a_program_whose_cached_image_went_away_while_a_shell_ran_still_runs_enabled(tmp_path, monkeypatch):
    """The shell's hook has kept where the cache's link led: with the target
    removed (the cache cleaned meanwhile), it reads the link again rather
    than hand the program a directory that is no longer there (ld.so would
    say on its stderr that it could not preload the shim, and the program
    would run without it)."""
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    learn = ferry("run", "-o", tmp_path / "learn", "--", "sh", "-c", "/bin/true; :", timeout=120)
    assert learn.returncode == 0, learn.stderr
    true = os.stat("/bin/true")
    links = [p for p in (tmp_path / "cache" / "exec").iterdir()
             if p.name.startswith(f"{true.st_dev}-{true.st_ino}-")]
    assert len(links) == 1, links
    target = os.readlink(links[0])
    assert os.path.isdir(target), target
    run = ferry("run", "--no-learn", "-o", tmp_path / "run", "--", "sh", "-c",
                f"/bin/true; rm -rf '{target}'; /bin/true; echo done", timeout=120)
    assert run.returncode == 0 and run.stdout == "done\n", run
    assert "preload" not in run.stderr and "ld.so" not in run.stderr, run.stderr
    assert not os.path.exists(target)
    records = [r for r in procfile.read_dir(tmp_path / "run" / "proc") if r.argv == ["/bin/true"]]
    assert len(records) == 2 and all(r.modules for r in records), records


def test_an_image_names_its_executable_as_proc_does_without_proc(tmp_path):
    """The exec hook says when the file it hands the kernel is the executable
    itself (FERRY_EXE: its device and inode), and the new image resolves its
    AT_EXECFN instead of reading /proc/self/exe, which was its pid's first
    use of /proc (~12 us of every start).  The record's exe must be what
    /proc/self/exe says, through symlinked directories, `..` after a symlink,
    links to links, relative and doubled slashes; a #! script (whose
    executable is its interpreter) and the program `ferry run` starts still
    ask /proc."""
    real = tmp_path / "real" / "sub"
    real.mkdir(parents=True)
    shutil.copy("/usr/bin/true", real / "tru")
    (tmp_path / "linkdir").mkdir()
    (tmp_path / "linkdir" / "s").symlink_to("../real/sub")
    (tmp_path / "rel_link").symlink_to("real/sub/tru")
    (tmp_path / "abs_link").symlink_to(tmp_path / "rel_link")
    (tmp_path / "dotdot").mkdir()
    (tmp_path / "dotdot" / "into").symlink_to(real)
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    execs = ["/bin/true", "./real/sub/tru", "real/sub/../sub/tru", "./linkdir/s/tru",
             "./linkdir/s/../sub/tru", str(tmp_path / "abs_link"), "./rel_link",
             "./dotdot/into/../sub/tru", f"{tmp_path}//real///sub/./tru", "env -i /bin/true"]
    command = "; ".join(execs + ["./script.sh", "(cd linkdir/s && ../sub/tru)"])
    tru = os.path.realpath(real / "tru")
    truth = [tru] * 8 + ["/usr/bin/true", "/usr/bin/env", "/usr/bin/true", tru]
    shell = os.path.realpath("/bin/sh")
    for _ in range(2):  # the first run learns the programs; the second runs them enabled
        lines, run_dir = _strace_run(tmp_path, "readlink", "sh", "-c", command, learn=True,
                                     cwd=tmp_path)
    records = procfile.read_dir(run_dir / "proc")
    assert sorted(r.exe for r in records if r.exe != shell) == sorted(truth)
    asked = [line for line in lines if '"/proc/self/exe"' in line]
    # the shell `ferry run` started, and the script's interpreter
    assert len(asked) == 2, asked


def test_an_image_looks_up_no_path_to_name_its_executable(tmp_path):
    """The record holds the name the executable was run by, made absolute,
    with the file's device and inode, and the reader resolves its symlinks:
    resolving it in every start was an `lstat` of each component and a
    `readlink` of each symlink (`/bin/true`: four and one)."""
    newfstatat, readlink = syscall_table.NUMBERS["newfstatat"], syscall_table.NUMBERS["readlink"]
    command = "/bin/true; cd /usr && ./bin/../bin/true; :"
    ferry("run", "-o", tmp_path / "learn", "--", "sh", "-c", command, check=True, timeout=120)
    run_dir = tmp_path / "run"
    ferry("run", "--no-learn", "-o", run_dir, "--", "sh", "-c", command, check=True, timeout=120)
    trues = _records(run_dir, "/usr/bin/true")
    assert len(trues) == 2, [(r.exe, r.exec_path) for r in procfile.read_dir(run_dir / "proc")]
    for r in trues:
        assert r.internal.get(newfstatat, 0) == 0 and r.internal.get(readlink, 0) == 0, r.internal


def test_a_program_removed_once_run_is_named_by_its_path(tmp_path):
    """A build runs a program it made and removes it (configure's
    conftest): the record, read once the run ended, still names it by its
    path, as /proc/self/exe did, the directories' symlinks resolved."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    run_dir = tmp_path / "run"
    ferry("run", "-o", run_dir, "--", "sh", "-c", "cp /bin/true prog && ./prog && rm prog",
          check=True, timeout=120, cwd=tmp_path / "link")
    names = [r.exe for r in procfile.read_dir(run_dir / "proc")]
    assert str(tmp_path / "real" / "prog") in names, names


def test_the_executables_module_is_named_as_its_resolved_path(tmp_path, test_programs, monkeypatch):
    """A rewritten executable runs from the cache, here reached through a
    symlinked directory: its record's exe and the module of its own sites
    both name the file itself, as /proc/self/exe would, and the run gives
    the program as the user's file."""
    real = tmp_path / "real-cache"
    real.mkdir()
    (tmp_path / "cache").symlink_to(real)
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    program = tmp_path / "prog"
    shutil.copy2(test_programs / "inline_syscalls", program)
    ferry("instrument", program, check=True, timeout=300)
    run_dir = tmp_path / "run"
    ferry("run", "--no-learn", "-o", run_dir, "--", "sh", "-c", f"{program}; :", check=True,
          timeout=120)
    records = procfile.read_dir(run_dir / "proc")
    images = [r for r in records if r.exe != os.path.realpath("/bin/sh")]
    assert len(images) == 1, [(r.exe, r.exec_path) for r in records]
    image = images[0]
    assert image.exe.startswith(str(real) + "/"), image.exe
    assert image.exe in [name for name, _, _ in image.modules], (image.exe, image.modules)
    assert [p["exe"] for p in load_run(run_dir)["processes"] if p["image"] == image.exe] == [str(program)]


def test_a_vfork_child_finds_its_figures_without_asking_the_kernel(tmp_path):
    """A vfork child's record is made from the pages of its block that may
    hold anything, which the block says (its tables' first pages, and
    more only where an entry spilled beyond them).  It asked the kernel
    which pages it had touched: `sysinfo` and `mincore` in each child, and
    on a machine with swap an open and a read of /proc/self/pagemap, the
    new pid's first use of /proc (~30 us of every command a shell ran)."""
    lines, run_dir = _strace_run(tmp_path, "openat,mincore,sysinfo", "sh", "-c", "/bin/true; /bin/true")
    children = [r for r in procfile.read_dir(run_dir / "proc") if r.exec_path == "/bin/true"]
    assert len(children) == 2, [(r.exe, r.exec_path) for r in procfile.read_dir(run_dir / "proc")]
    assert all(r.blocks[0].calls[syscall_table.NUMBERS["execve"]] == 1 for r in children)
    # the children's own lines: ferry itself, traced too, may ask sysinfo
    pids = {str(r.pid) for r in children}
    asked = [line for line in lines if line.split(" ", 1)[0] in pids and
             ("/proc/self/pagemap" in line or "mincore(" in line or "sysinfo(" in line)]
    assert not asked, asked


def _pagemap(pid, first, end):
    """/proc/PID/pagemap's entries of the pages of [first, end)."""
    import struct
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(first // 4096 * 8)
        n = (end - first + 4095) // 4096
        return struct.unpack(f"<{n}Q", f.read(n * 8))


def _present(entry):
    """In memory: present or swapped."""
    return entry >> 62


def _exclusive(entry):
    """Present and mapped by this process alone (bit 56): in a fork child,
    a page it wrote since the fork (the others are its parent's, copied on
    write)."""
    return entry >> 63 and entry >> 56 & 1


def _shim_data_pages(pid, pick):
    """Addresses, as the shim's file lays them out, of the pages of its
    writable segment in process `pid` whose pagemap entry `pick` takes."""
    import lief
    from ferry.rewriter import shimlib
    elf = lief.parse(os.path.realpath(shimlib.path()))  # kept: its segments live in it
    (seg,) = [s for s in elf.segments
              if s.type == lief.ELF.Segment.TYPE.LOAD and s.has(lief.ELF.Segment.FLAGS.W)]
    base = min(lo for lo, name in _maps(pid) if name.endswith("libferry.so"))
    first = base + (seg.virtual_address & ~4095)
    entries = _pagemap(pid, first, base + seg.virtual_address + seg.virtual_size)
    return [hex((seg.virtual_address & ~4095) + i * 4096) for i, e in enumerate(entries) if pick(e)]


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_start_touches_few_pages_of_the_shims_variables(tmp_path, size):
    """Each page of the shim's data and .bss that a process touches is a
    fault in every process: the small variables every start or every call
    reads or writes share pages (FERRY_HOT, the order of the store's
    fields), the large buffers a start leaves alone lie apart (FERRY_COLD).
    Nine pages were touched (a --no-learn start, its libraries patched
    from plans), then five: RELRO, .data, the exec hook's copies, the
    store's fields, the plans' table; four now that the cache root and the
    run directory point at the kept settings and the store's fields live
    in .data: RELRO, .data with the small variables and the settings'
    head, the plans' table (planned), the plans' ranges (avoid,
    remapped).  Without RELRO the first two are one page and the
    settings' tail one more: still four, but the first is written before
    it is read, one fault where there were two.  Three since the settings
    the exec hook keeps fit on that first page: FERRY_TRACE_SYSCALLS's
    table (512 bytes, filled at every start) lies apart and is written
    only for a list, and the settings' names are characters, not pointers
    relocated into .data (~900 bytes of room; a `ferry run`'s settings
    take ~600).  In an environment of ~10 KiB (large: a CI runner's) the
    environment's restore copied the strings it kept into a scratch area
    of its own, three pages more; they are moved in place now."""
    seconds = {"small": 30, "large": 31}[size]
    proc = subprocess.Popen([*FERRY, "run", "-p", "trace", "--no-learn", "-o", str(tmp_path / "run"),
                             "--", "sh", "-c", f"exec sleep {seconds}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_environment(tmp_path, size))
    pid = None
    try:
        pid = _sleep_started(proc, seconds, enabled=True)
        pages = _shim_data_pages(pid, _present)
        assert len(pages) <= 3, pages
    finally:
        _end(proc, pid)


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_shells_command_touches_few_pages_of_the_shims_variables(tmp_path, size):
    """The same for a command a shell starts (a vfork child's exec, handed
    the slot its parent claimed) from the programs cache: taking that slot
    wrote a variable on a page of .bss that such a start touched nowhere
    else, one fault more in every command.  One page since the settings
    the exec hook keeps for the command's children share it (two before:
    their copy began 64 bytes before a page's end), in a CI runner's
    environment too (four while the restore copied its strings)."""
    env, seconds = _environment(tmp_path, size), {"small": 33, "large": 34}[size]
    for _ in range(2):  # learn sh and sleep
        ferry("run", "-p", "trace", "-o", tmp_path / "learn", "--", "sh", "-c", "sleep 0; :", check=True,
              timeout=300, env=env)
    proc = subprocess.Popen([*FERRY, "run", "-p", "trace", "-o", str(tmp_path / "run"), "--", "sh", "-c",
                             f"sleep {seconds}; :"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    pid = None
    try:
        pid = _sleep_started(proc, seconds, enabled=True, command_of=True)
        pages = _shim_data_pages(pid, _present)
        assert len(pages) <= 1, pages
    finally:
        _end(proc, pid)


def test_a_fork_child_writes_few_pages_of_the_shims_variables(tmp_path):
    """Each page of the shim's variables a fork child writes is a copy of
    the page, and a fault, in every fork child (a shell's subshells and
    pipelines, a prefork server's workers).  The child's start wrote 8: the
    fiber engine's futex table (5 pages, cleared though only fibers use
    it), and two flags stored with the value they had; now the record's
    hot fields and its block table.  A page read for the first time is a
    fault too: the fd guard's lock and the count of threads outside the
    fiber world lay in pages of .bss that only a fork child read."""
    pid_file = tmp_path / "child.pid"
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            f"    open('{pid_file}.new', 'w').write(str(os.getpid()))\n"
            f"    os.rename('{pid_file}.new', '{pid_file}')\n"
            "    time.sleep(60)\n"
            "    os._exit(0)\n"
            "os.wait()\n")
    proc = subprocess.Popen([*FERRY, "run", "-p", "trace", "--no-learn", "-o", str(tmp_path / "run"), "--",
                             "python3", "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        for _ in range(600):
            if pid_file.exists():
                child = int(pid_file.read_text())
                break
            time.sleep(0.05)
        assert child, "the fork child never started"
        for _ in range(200):  # asleep: its start and its calls so far are done
            if waits_in(child, CLOCK_NANOSLEEP):
                break
            time.sleep(0.05)
        written = _shim_data_pages(child, _exclusive)
        assert len(written) <= 3, written
        # ... and reads none that its parent never touched: each would be a
        # fault too, for a page of zeros
        with open(f"/proc/{child}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        fresh = set(_shim_data_pages(child, _present)) - set(_shim_data_pages(parent, _present))
        assert not fresh, sorted(fresh)
    finally:
        _end(proc, child, timeout=60)


@pytest.mark.parametrize("profile", ["off", "count", "trace", "aggregate"])
def test_a_shell_writes_no_page_of_the_shims_variables_after_it_forks(profile, test_programs, tmp_path):
    """After a fork each page of the parent's is its child's too: the
    parent's next write to it is a fault, for every command a shell
    forks (bash), which then sets its signals' handlers again.  The shim's
    calls write its record (a shared mapping), and its variables only when
    they change: the catch-all stored its selector at every slow call and
    which handlers' masks hold SIGSYS at every `rt_sigaction`, one fault or
    two in the parent per command.  (Under fibers a call writes the
    engine's state of the calling thread.)"""
    argv = [str(test_programs / "fork_parent_faults")]
    native = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    got = subprocess.run([*FERRY, "run", "-p", profile, "--no-learn", "-o", str(tmp_path / "run"), "--", *argv],
                         capture_output=True, text=True, timeout=120)
    assert (native.returncode, native.stdout) == (0, "faults 0\n"), native
    assert (got.returncode, got.stdout) == (0, "faults 0\n"), got


def _end(proc, pid, timeout=30):
    """The program a test found asleep (`pid`, or None when it never got
    that far) ended, then the `ferry run` (`proc`) that started it."""
    if pid:
        os.kill(pid, 15)
    proc.wait(timeout=timeout)


def _stack_depth(pid):
    """How far below where its stack started (/proc/PID/stat's startstack)
    the process touched its stack: down to its lowest page in memory.  The
    pages of [stack] in memory (Rss) counted the environment above that
    point too, and moved by a page either way with where in its page the
    kernel started each stack, so one run read 4 KiB more than another of
    the same program."""
    with open(f"/proc/{pid}/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[25])
    with open(f"/proc/{pid}/maps") as f:
        lo, hi = next((int(a, 16), int(b, 16)) for a, b in
                      (line.split()[0].split("-") for line in f if line.rstrip().endswith("[stack]")))
    first = next(i for i, entry in enumerate(_pagemap(pid, lo, hi)) if _present(entry))
    return start - (lo + first * 4096)


CLOCK_NANOSLEEP = syscall_table.NUMBERS["clock_nanosleep"]


def _sleep_started(proc, seconds, enabled, command_of=False):
    """The pid of the `sleep SECONDS` that `proc` is or started, once it
    sleeps (clock_nanosleep), its start done (`enabled`: with libferry.so
    mapped in it); `command_of`: a command of the shell `proc` started."""
    pid = None
    for _ in range(600):
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        pid = next((p for p in pids if _cmdline(p) == ["sleep", str(seconds)]
                    and (_parent(_parent(p)) == proc.pid if command_of
                         else _parent(p) in (proc.pid, _parent(proc.pid)))), None)
        if pid and waits_in(pid, CLOCK_NANOSLEEP) and (not enabled or _maps_name(pid, "libferry.so")):
            return pid
        time.sleep(0.05)
    raise AssertionError(f"{proc.args} never slept" + (" enabled" if pid else ""))


def _sleeping_stack_depth(command):
    """_stack_depth of the `sleep 41` that `command` starts, once it sleeps
    (41: no other test's sleep, which a parallel worker may have running)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    try:
        pid = _sleep_started(proc, 41, enabled=command[0] != "sleep")
        return _stack_depth(pid)
    finally:
        _end(proc, pid)


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_a_start_touches_few_pages_of_the_stack(tmp_path):
    """Each page of stack the shim's constructor reaches below what ld.so
    touched is a page fault in every process.  Its frames keep to the top:
    tables of pointers, not of copied names (plans), a few numbers tallied
    (the record's claim), a buffer used from its top end (the environment).
    It reached 8-16 KiB deeper than natively; ~3.4 KiB deeper now (ld.so
    loading one library more, the constructor's frames).  Least of five of
    each: the lowest page in memory says the depth to within a page,
    depending on where in its page the kernel started the stack."""
    native = min(_sleeping_stack_depth(["sleep", "41"]) for _ in range(5))
    enabled = min(_sleeping_stack_depth([*FERRY, "run", "-p", "trace", "--no-learn", "-o",
                                         str(tmp_path / f"run{i}"), "--", "sleep", "41"])
                  for i in range(5))
    assert enabled - native <= 6 * 1024, (native, enabled)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def _maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            yield int(parts[0].split("-")[0], 16), parts[5] if len(parts) > 5 else ""


def _maps_name(pid, suffix):
    try:
        return any(name.endswith(suffix) for _, name in _maps(pid))
    except OSError:
        return False


def test_a_fork_childs_exec_hook_copies_no_page_it_reads_the_environment_from(tmp_path):
    """A fork child shares its parent's pages until one of them writes; the
    exec hook reads the heads of the environment's entries from them.  Read
    with process_vm_readv, which pins each page it reads, and pinning a
    page shared after a fork copies it first: every page of bash's that a
    command's variables lay on was a fault and a page copied in each
    command (~2 us a page here).  The kernel's own exec reads them as a
    call reads its arguments, copying nothing.  fork_env_pages puts 64
    variables on 64 pages of its own: the child's faults, the program's
    included, grow by as many natively as under Ferry, give or take the
    page or two the hook's larger read takes on its stack."""
    program = str(PROGRAMS / "fork_env_pages")
    def faults(n, run=None):
        if run is None:
            out = subprocess.run([program, str(n), "/bin/true"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout
        else:
            out = ferry("run", "-p", "trace", "-o", tmp_path / run, "--", program, str(n), "/bin/true",
                        check=True, timeout=120).stdout
        return int(out)
    faults(64, "learn")  # /bin/true cached from here on
    # A single count moves by a few faults from run to run (where the stack
    # and the heap land): the least of several of each is the steady figure,
    # and the defect this guards against costs the 64 pages, not a few.
    native = min(faults(64) for _ in range(4)) - min(faults(0) for _ in range(4))
    ferrys = (min(faults(64, f"many-{i}") for i in range(4))
              - min(faults(0, f"none-{i}") for i in range(4)))
    assert ferrys <= native + 12, (ferrys, native)


@pytest.mark.parametrize("randomized", [True, False])
def test_an_environment_array_that_ends_the_user_address_space_is_read(tmp_path, randomized):
    """The exec hook reads the environment's pointers up to the end of their
    page and on into the next as a second piece, which the kernel leaves
    unread when it is not there.  The program's memory is read with
    process_vm_writev, its sides swapped (ferry_read_pieces), and there a
    piece past the user address space fails the whole read: an array on
    the stack's last page, with the stack not randomized (`setarch -R`),
    left the program unserved.  exec_top_env passes the NULL word at the
    stack's very top as the array."""
    if not randomized and not shutil.which("setarch"):
        pytest.skip("setarch is not installed")
    command = ([] if randomized else ["setarch", "-R"]) + [str(PROGRAMS / "exec_top_env"), "/usr/bin/env"]
    ferry("run", "-o", tmp_path / "learn", "--", *command, check=True, timeout=120)
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "-o", run_dir, "--", *command, check=True, timeout=120)
    assert r.stdout.startswith("stack ends at ") and r.stdout.count("\n") == 1, r.stdout
    if not randomized:
        assert r.stdout.split()[-1] == "0x7ffffffff000", r.stdout
    served = [p for p in procfile.read_dir(run_dir / "proc") if p.exe == "/usr/bin/env"]
    assert len(served) == 1, [(p.exe, p.exec_path) for p in procfile.read_dir(run_dir / "proc")]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_exec_hook_reads_the_environment_in_few_pieces(tmp_path, shell):
    """A shell's child passes on an environment that lies mostly back to
    back; its exec hook reads the heads of the entries (to take Ferry's out)
    in one read of a few pieces, those close together as one, not one piece
    each (each piece is a copy of its own; a page pinned, while the reads
    were process_vm_readv's).  dash's child is
    a vfork child, whose hook reads into a scratch area of its own; bash's
    is a fork child, whose hook reads onto the program's stack, and whose
    environment is strings bash malloc'd (it read them a piece each: ~12 us
    of every command; with a long variable among them, 9 pieces while the
    heads were read as one window and the rest apart)."""
    if not shutil.which(shell):
        pytest.skip(f"{shell} is not installed")
    # an environment of the test's own: where bash's strings land depends on
    # how many there are and of what lengths (a CI runner's 60 more variables
    # put bash's heads in 10 pieces); then 40 short ones, and one of 6 KiB
    # among them, which splits one piece
    env = _environment(tmp_path)
    env.update({f"PIECES_TEST_VAR_{i}": "x" * i for i in range(40)})
    env["PIECES_TEST_VAR_20"] = "y" * 6144
    # `; :` keeps bash from running its last command in its own process
    lines, _ = _strace_run(tmp_path, "process_vm_writev", shell, "-c", "export CHANGED=1; /bin/true; :",
                           env=env)
    # the pieces are the read's source (its local side, ferry_read_pieces),
    # the shim's buffer its one remote piece
    pieces = [int(m.group(1)) for m in
              re.finditer(r"\], (\d+), \[\{iov_base=0x[0-9a-f]+, iov_len=\d+\}\], 1, 0\) = \d+", "\n".join(lines))]
    # bash's: the variables bash set since it started, and its strings on
    # either side of the long one, lie apart: 7-8 pieces of ~60 heads, one
    # batch, as the lengths of the run's paths move bash's strings (one piece
    # a head, 60, before the heads were read as pieces)
    assert pieces and max(pieces) <= (3 if shell == "sh" else 12), sorted(pieces)


def _reads_before(lines, exe):
    """How many reads of the program's memory (process_vm_writev, the shim's
    ferry_read_pieces) the exec hook of the process that ran `exe` made
    before it: from its first, which reads the path.  A call's own argument
    read through the kernel before the hook (dash's child's sigprocmask, its
    set on the page above its stack pointer's when the environment's size
    puts it there) is not the hook's."""
    reads = collections.Counter()
    for line in lines:
        pid, call = line.split(None, 1)
        if call.startswith(f"execve(\"{exe}\""):
            return reads[pid]
        if call.startswith("process_vm_writev(") and (reads[pid] or f'iov_base="{exe}\\0' in call):
            reads[pid] += 1
    pytest.fail(f"no exec of {exe}: {lines}")


def test_the_exec_hook_reads_the_path_and_the_environment_in_two_reads(tmp_path):
    """The program's path and the first pointers of its environment array in
    one read, the heads of the entries in the next: each read through the
    kernel is ~1.5 us of a shell's command (dash's: a vfork child's hook)."""
    lines, _ = _strace_run(tmp_path, "process_vm_writev,execve", "sh", "-c", "/bin/true; :",
                           env=_environment(tmp_path))  # < 128 entries: one batch
    assert _reads_before(lines, "/bin/true") == 2, lines


@pytest.mark.parametrize("entries", [40, 64, 65, 100, 128])
def test_an_environment_of_up_to_128_entries_takes_two_reads(tmp_path, entries):
    """A desktop's shell has 40-60 variables, a CI runner's 60-100: with 64
    entries a batch, an array of exactly 64 took a third read to find its
    NULL, and one of 65 to 128 two reads more (a CI machine's shell had
    64, and failed the test above)."""
    lines, _ = _strace_run(tmp_path, "process_vm_writev,execve", str(PROGRAMS / "exec_entries"),
                           str(entries), "/bin/true")
    assert _reads_before(lines, "/bin/true") == 2, lines


def test_a_shells_command_finds_the_first_pages_of_its_record_made_by_the_shell(tmp_path):
    """The shell writes a command's vfork child's record while the kernel
    loads the command (store.c, vfork_child_leaves), and makes then the two
    pages of the command's own record that its start writes first (its
    header's and its block's first): a fault on a page that is there is
    cheaper than one on a page to allocate and zero.  fallocate, which
    writes nothing, at those two pages of the commands' slots and nowhere
    else."""
    lines, run_dir = _strace_run(tmp_path, "fallocate", "sh", "-c", "for i in 1 2 3 4 5 6; do /bin/true; done")
    made = [int(m.group(1)) for m in re.finditer(r"fallocate\(\d+, FALLOC_FL_KEEP_SIZE, (\d+), 4096\) = 0",
                                                 "\n".join(lines))]
    images = [r for r in procfile.read_dir(run_dir / "proc") if r.argv == ["/bin/true"]]
    assert len(images) == 6, images
    pages = {r.offset: (r.offset, r.offset + procfile.HEADER_SIZE) for r in images}
    ahead = [r for r in images if r.offset in made]
    # the shell's later commands: their slots were claimed ahead
    assert ahead and all(pages[r.offset][1] in made for r in ahead), (made, sorted(pages))
    assert sorted(made) == sorted(p for r in ahead for p in pages[r.offset])
    assert all(r.blocks and r.blocks[0].calls[syscall_table.NUMBERS["exit_group"]] == 1 for r in images)


def test_a_traced_process_figures_take_pages_by_use_not_by_number(tmp_path):
    """Each number a traced process times has its figures (288 bytes) next
    to the last one's, in the order first used: `ls` timed a dozen numbers
    and touched a page of its record for about each (16 pages in all), one
    more page of the run's file to fault in, allocate and write back.  Its
    errors by errno share the errno table's first page likewise, and so do
    the figures of the sites it called from (each at its site's own place,
    ~1,700 of libc's alone, they were 4 pages).  What the run reads of them
    is what the process did."""
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "ls", "-l", "/usr/bin",
              "/nonexistent", timeout=120)
    assert r.returncode != 0, r.stderr  # ls says so for /nonexistent
    (ls,) = _records(run_dir, "/usr/bin/ls")
    (block,) = ls.blocks
    assert len(block.nr) >= 10, sorted(block.nr)
    for nr, s in block.nr.items():
        if nr != 231:  # exit_group never returns through the shim
            assert sum(s.hist) == s.calls == block.calls[nr], (nr, s)
            assert 0 < s.min_ticks <= s.max_ticks <= s.ticks, (nr, s)
    assert block.nr[257].errnos.get("ENOENT", 0) >= 1, block.nr[257]  # openat
    base = ls.offset + procfile.HEADER_SIZE
    tables = procfile.BLOCK_TABLES[procfile.VERSION]
    figures = pages_with_data(ls.file, base + tables["nr_slot"], base + tables["sites"])
    assert len(figures) <= 2 + len(block.nr) * procfile.NR_STATS.size // 4096, sorted(figures)
    errnos = pages_with_data(ls.file, base + tables["errnos"], base + tables["events"])
    assert len(errnos) == 1, sorted(errnos)
    assert len(block.sites) >= 10 and all(calls >= 1 for calls, _, _ in block.sites.values()), block.sites
    assert sum(errors for _, errors, _ in block.sites.values()) >= 1  # the openat of /nonexistent
    sites = pages_with_data(ls.file, base + tables["sites"], base + tables["errnos"])
    assert len(sites) == 1, sorted(sites)


def test_an_exec_writes_no_header_page_but_the_first_for_its_path(tmp_path):
    """The path an image execs lies in the header's first page, with the
    rest every start writes: an exec (a shell's `exec`, a vfork child's
    exec) wrote a page more of the record for it, and a vfork child's record
    the page of its parent's command line room, all zeros."""
    pages = {}
    for name, script in (("exec", "exec /bin/true"), ("vfork", "/bin/true; :")):
        run_dir = tmp_path / name
        r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", script, timeout=120)
        assert r.returncode == 0, r.stderr
        (shell,) = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
        assert shell.argv == ["sh", "-c", script] and shell.exe == "/usr/bin/dash"
        head = pages_with_data(shell.file, shell.offset, shell.offset + procfile.HEADER_SIZE)
        pages[name] = sorted(p - shell.offset // 4096 for p in head)
    for name, written in pages.items():
        assert 1 not in written and 0 in written, (name, written)


def test_the_shims_own_calls_are_counted_in_the_first_page(tmp_path):
    """The shim's own calls of every record of a shell's command (the shell,
    its vfork child, the program) are counted in the header's first page:
    the table of every number, a page of its own, was one more page of each
    record to fault in (or write) and read back.  The counts are whole: the
    same as a tracer sees of the shim's calls is checked elsewhere."""
    for name, script in (("exec", "exec /bin/true"), ("vfork", "/bin/true; :")):
        run_dir = tmp_path / name
        r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", script, timeout=120)
        assert r.returncode == 0, r.stderr
        records = procfile.read_dir(run_dir / "proc")
        assert {p.exe for p in records} == {"/usr/bin/dash", "/usr/bin/true"}, records
        for p in records:
            assert sum(p.internal.values()) >= 5, (name, p.exe, p.internal)
            table = p.offset + procfile.HEADER.offset("internal")
            assert not pages_with_data(p.file, table, table + procfile.HEADER.span("internal")), (name, p.exe)


def test_a_spawn_childs_question_about_sigsys_is_answered_without_the_kernel(tmp_path):
    """A `posix_spawn` child asks every signal's action into its stack,
    SIGSYS's too, which the catch-all answers from the program's own record
    (the handler is the shim's).  The answer went through the kernel
    (`process_vm_writev`, so that a bad pointer is EFAULT: ~1.6 us of every
    spawn); an answer on the page of the stack the call came from, which
    the entry has just written, is written directly."""
    writev = syscall_table.NUMBERS["process_vm_writev"]
    script = ("import os\n"
              "for _ in range(3):\n"
              "    os.waitpid(os.posix_spawn('/bin/true', ['/bin/true'], {}), 0)\n")
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "-o", run_dir, "--", "python3", "-c", script, timeout=120)
    assert r.returncode == 0, r.stderr
    children = [p for p in procfile.read_dir(run_dir / "proc") if p.exec_path == "/bin/true"]
    assert len(children) == 3, [(p.exe, p.exec_path) for p in procfile.read_dir(run_dir / "proc")]
    # process_vm_writev is also how the shim reads the program's memory: the
    # exec hook's two reads (the path with the environment's pointers, then
    # its heads; test_the_exec_hook_reads_the_path_and_the_environment_in_two_reads)
    # are the child's only ones, no answer written through the kernel
    for p in children:
        assert p.internal.get(writev, 0) == 2, p.internal


def test_a_process_with_one_or_two_modules_writes_one_page_of_its_header(tmp_path, test_programs):
    """A process's first two module entries lie in the header's first page,
    with the rest every start writes: the module table, a page of its own,
    was one more page of every record (a fault in each enabled program, a
    page its vfork child wrote), though most processes have one module or
    two (the rewritten libc).  The shell's command: the vfork child's record
    and the image's.  A process with more still has them all, in order."""
    script = "/bin/true; :"
    ferry("run", "-p", "trace", "-o", tmp_path / "learn", "--", "sh", "-c", script, check=True, timeout=120)
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", script, timeout=120)
    assert r.returncode == 0, r.stderr
    records = procfile.read_dir(run_dir / "proc")
    command = [p for p in records if p.exec_path == "/bin/true" or p.exe == "/usr/bin/true"]
    assert len(command) == 2, [(p.exe, p.exec_path) for p in records]
    for p in command:
        assert 1 <= len(p.modules) <= 2 and all(name for name, _, _ in p.modules), (p.exe, p.modules)
        head = pages_with_data(p.file, p.offset, p.offset + procfile.HEADER_SIZE)
        assert sorted(q - p.offset // 4096 for q in head) == [0], (p.exe, p.exec_path, sorted(head))
    libs = [tmp_path / f"libsite{i}.so" for i in range(4)]
    for lib in libs:
        shutil.copy(PROGRAMS / "libsite.so", lib)
    for run in range(2):  # the first run learns the libraries' plans
        ferry("run", "-o", tmp_path / "many", "--", PROGRAMS / "dlopen_many", 1, *libs, check=True, timeout=120)
    (many,) = [p for p in procfile.read_dir(tmp_path / "many" / "proc") if p.exe.endswith("/dlopen_many")]
    names = [os.path.basename(name) for name, _, _ in many.modules]
    assert [n for n in names if n.startswith("libsite")] == [lib.name for lib in libs], names
    bases = [base for _, _, base in many.modules]
    assert bases == sorted(bases) and len(names) > 4, many.modules


# What every enabled process runs of the shim, whatever its profile: its
# start, a call, its exit, and the engine's hooks the core calls on the
# way (shim/src/util.h, FERRY_HOT_TEXT).
EVERY_PROCESS_RUNS = ("ferry_init", "ferry_start", "ferry_entry", "slow_call", "ferry_store_open",
                      "ferry_exec_configure", "ferry_exec_lasting", "ferry_exec_kept",
                      "ferry_cache_root", "ferry_wine_configure", "ferry_environ_restore",
                      "ferry_catchall_start", "ferry_plans_apply", "ferry_trace_record", "ferry_blk_get",
                      "ferry_store_exit", "ferry_strlen", "agg_exit_cancel", "agg_exit_flush",
                      "agg_threads_world", "agg_fd_guard", "agg_in_vfork_child")


def test_the_code_and_data_every_process_runs_lie_in_the_shims_first_64_kib():
    """The kernel maps a file's pages 64 KiB at a time around a fault
    (fault-around), and ld.so faults in the shim's first 64 KiB anyway
    when it reads its symbol table.  The strings a start reads lay after
    the text, and the engine's hooks a close and an exit run among the
    engine's code, 64 KiB further on: two more page faults in every
    process (2.31 of libferry's text a /bin/true, 1.02 with all of it in
    the first 64 KiB; shim/text_order.ld, the link order)."""
    import lief
    from ferry.rewriter import shimlib
    lib = lief.ELF.parse(str(shimlib.path()))
    rodata = lib.get_section(".rodata.ferry")
    assert rodata is not None and rodata.virtual_address + rodata.size <= 0x10000, rodata
    ends = {s.name: s.value + s.size for s in lib.symtab_symbols if s.name in EVERY_PROCESS_RUNS}
    assert set(ends) == set(EVERY_PROCESS_RUNS), set(EVERY_PROCESS_RUNS) - set(ends)
    assert {name: hex(end) for name, end in ends.items() if end > 0x10000} == {}


def test_a_shells_command_takes_its_pid_and_parent_from_the_child_that_started_it(tmp_path):
    """The vfork child that execs a shell's command knows the program's pid
    (its own) and its parent (the shell): it hands them on with the slot it
    claimed (FERRY_SLOT), and the program's record asks neither `getpid`
    nor `getppid` (two calls of the shim's own in every command)."""
    getpid, getppid = syscall_table.NUMBERS["getpid"], syscall_table.NUMBERS["getppid"]
    reads = (syscall_table.NUMBERS["process_vm_readv"], syscall_table.NUMBERS["process_vm_writev"])
    inner = "echo $$ $PPID"
    script = f"sh -c '{inner}'; :"
    ferry("run", "-o", tmp_path / "learn", "--", "sh", "-c", script, check=True, timeout=120)
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--", "sh", "-c", script, timeout=120)
    assert r.returncode == 0, r.stderr
    pid, ppid = (int(x) for x in r.stdout.split())
    records = procfile.read_dir(run_dir / "proc")
    (command,) = [p for p in records if p.argv == ["sh", "-c", inner]]
    assert (command.pid, command.ppid) == (pid, ppid), command
    # a read of an argument through the kernel asks its pid (ferry_memory_pid):
    # where the program keeps a call's argument decides whether there is one
    own = command.internal
    assert own.get(getppid, 0) == 0 and own.get(getpid, 0) == sum(own.get(nr, 0) for nr in reads), own
    (child,) = [p for p in records if p.exec_path and p.pid == pid]  # the vfork child's record
    assert child.ppid == ppid and os.path.basename(child.exec_path) == "sh", child
