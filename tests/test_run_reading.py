"""Reading a run's process files reads what the processes wrote, and nothing
of the room they left empty: a record is mostly holes (every syscall's and
site's figures of each thread), and reading a hole has the kernel make page
cache, zeroed, for it.  A run of a thousand processes took seconds so."""
import os
import subprocess

import pytest

from conftest import evict, ferry
from ferry import procfile
from ferry.base.syscall_table import NUMBERS
from ferry.rundata import load_run


def _resident(path):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def _run(tmp_path):
    run_dir = tmp_path / "run"
    r = ferry("run", "-p", "trace", "--no-learn", "-o", run_dir, "--",
              "sh", "-c", "/bin/true; /bin/true; ls / >/dev/null", timeout=120)
    assert r.returncode == 0, r.stderr
    return run_dir


def test_reading_a_run_leaves_its_holes_unread(tmp_path):
    run_dir = _run(tmp_path)
    files = sorted((run_dir / "proc").glob("*.ferry"))
    assert files
    for f in files:
        evict(f)
        assert _resident(f) == 0
    model = load_run(run_dir)
    assert len(model["processes"]) >= 4
    for f in files:
        allocated = os.stat(f).st_blocks * 512
        # what the records hold, at most; every header and block read whole was
        # ~330 KiB a record of page cache
        assert _resident(f) <= allocated, f


def _plain_read_used(f, base, size):
    """The reader's bytes of a record, read plainly, holes and all."""
    f.seek(base)
    data = f.read(procfile.HEADER_SIZE)
    h = procfile.HEADER.unpack(data)
    data += f.read(min(h["nblocks"], h["max_blocks"]) * h["block_size"])
    return data


def test_records_read_as_written(tmp_path):
    run_dir = _run(tmp_path)
    n = 0
    for path in sorted((run_dir / "proc").glob("*.ferry")):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for base in procfile.record_offsets(f):
                data, _ = procfile._read_used(f, base, size)
                assert bytes(data) == _plain_read_used(f, base, size)
                n += 1
    assert n >= 4


def test_a_tables_used_rows_are_those_whose_word_is_set():
    """The rows of a table that are used (a site's calls, the table's first
    word, not zero) are found wherever they lie against pages and at either
    end of the table; a row with only another word set is not one."""
    rows = procfile.SITE_STATS
    for size in (0, 1, 4095, 4096, 4097, 3 * 4096 + 5):
        for marks in ((), (0,), (size - 1,), (17, size - 3), (4095,), (4096,), (8191, 8200)):
            data = bytearray(8 + size * rows.size)  # the table at 8: not at a page's start
            for m in marks:
                if 0 <= m < size:
                    rows.pack_into(data, 8 + m * rows.size, site=m + 1, calls=7 << 8, errors=m, time_total=3)
            if size > 2:
                rows.pack_into(data, 8 + rows.size, errors=5)  # errors alone: not a used row
            got = procfile._table_rows(rows, data, 8, size * rows.size, None, procfile._SITE_WORD)
            used = sorted({m for m in marks if 0 <= m < size})
            assert [i for i, _ in got] == used, (size, marks)
            at_ = [rows.position(f) for f in ("site", "calls", "errors", "time_total")]
            assert all([row[k] for k in at_] == [i + 1, 7 << 8, i, 3] for i, row in got)


def test_a_tables_rows_are_looked_for_only_where_data_was_read():
    """The rows of a table found from the pieces of the record read from the
    file (the rest is holes, zeros) are those found by looking at all of it,
    wherever the pieces lie against the table and its rows."""
    rows = procfile.SITE_STATS
    n, at = 3 * 4096 // rows.size + 7, 100
    for marks in ((), (0,), (n - 1,), (17, n - 3), (4095 // rows.size, 4096 // rows.size + 1)):
        data = bytearray(at + n * rows.size + 50)
        for m in marks:
            data[at + m * rows.size + 8 * procfile._SITE_WORD + 1] = 7
        whole = procfile._table_rows(rows, data, at, n * rows.size, None, procfile._SITE_WORD)
        pages = sorted({(at + m * rows.size) // 4096 for m in marks})
        for extents in ([(p * 4096, 4096) for p in pages],                     # the pages read
                        [(0, len(data))],                                      # no holes known
                        [(p * 4096 - 5, 4096 + 9) for p in pages] + [(0, at)]):  # pieces not at rows
            got = procfile._table_rows(rows, data, at, n * rows.size, extents, procfile._SITE_WORD)
            assert list(got) == list(whole), (marks, extents)
        assert [i for i, _ in whole] == sorted(marks)


# The last commits whose shims wrote the earlier versions of the process
# record: 1, each number's figures at a fixed place in a block; 2, the
# shim's own calls all in the header's table of every number; 3, each
# site's figures at a fixed place in a block; 4, every module entry in the
# module table, the command line where version 5 has its first two; 5, a
# vfork child's block in pages of its own, never packed into its header.
EARLIER_SHIMS = {1: "c3d6b22", 2: "1a8f670", 3: "a9fdb67", 4: "67b3889", 5: "5f123a8"}


@pytest.mark.parametrize("version", sorted(EARLIER_SHIMS))
def test_runs_recorded_by_an_earlier_shim_still_read(tmp_path, version):
    """A run recorded by the shim of an earlier version of the record reads
    as it did: the same processes, calls, figures and errnos as the same
    program recorded now, and the shim's own calls."""
    import shutil
    import tarfile

    from conftest import ROOT, ferry_env
    commit = EARLIER_SHIMS[version]
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", commit], capture_output=True).returncode:
        pytest.skip(f"needs the source's git history to build the version {version} shim")
    archive = tmp_path / "old.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit, "shim"], check=True)
    with tarfile.open(archive) as t:
        t.extractall(tmp_path / "old", filter="data")
    subprocess.run(["make", "-s", "-C", str(tmp_path / "old" / "shim"), "build/libferry.so"],
                   check=True, capture_output=True, timeout=300)
    argv = ["--", "sh", "-c", "exec ls -l /usr/bin /nonexistent"]
    runs = {}
    for name, env in (("old", ferry_env(FERRY_SHIM=tmp_path / "old/shim/build/libferry.so",
                                        FERRY_CACHE=tmp_path / "cache-old")),
                      ("now", ferry_env(FERRY_CACHE=tmp_path / "cache-now"))):
        r = ferry("run", "-p", "trace", "--no-learn", "-o", tmp_path / f"run-{name}", *argv, env=env, timeout=120)
        assert r.returncode == 2, r.stderr
        procs = procfile.read_dir(tmp_path / f"run-{name}" / "proc")
        (ls,) = [p for p in procs if p.exe == "/usr/bin/ls"]
        with open(ls.file, "rb") as f:
            version_read = procfile.HEADER.unpack(os.pread(f.fileno(), procfile.HEADER_SIZE, ls.offset))["version"]
        runs[name] = (version_read, ls.blocks[0], sorted((p.exe, p.argv, p.exec_path) for p in procs), ls.internal,
                      ls.modules)
    assert runs["old"][0] == version and runs["now"][0] == procfile.VERSION
    assert runs["old"][2] == runs["now"][2]
    modules = {name: [[os.path.basename(m[0]), m[1]] for m in run[4]] for name, run in runs.items()}
    assert modules["old"] == modules["now"] and modules["now"], modules
    # the image's claim of its slot: its file's lock taken and given back
    flock = NUMBERS["flock"]
    assert runs["old"][3].get(flock) == runs["now"][3].get(flock) == 2, (runs["old"][3], runs["now"][3])
    assert ("/usr/bin/dash", ["sh", "-c", "exec ls -l /usr/bin /nonexistent"], "/usr/bin/ls") in runs["now"][2]
    old, new = runs["old"][1], runs["now"][1]
    assert old.calls == new.calls
    assert sorted(old.nr) == sorted(new.nr) and len(old.nr) >= 10
    for nr in new.nr:
        assert (old.nr[nr].calls, old.nr[nr].errors, old.nr[nr].errnos) == \
               (new.nr[nr].calls, new.nr[nr].errors, new.nr[nr].errnos), nr
        assert sum(old.nr[nr].hist) == sum(new.nr[nr].hist), nr
    assert sorted(old.sites) == sorted(new.sites) and len(new.sites) >= 10
    assert {g: s[:2] for g, s in old.sites.items()} == {g: s[:2] for g, s in new.sites.items()}


def test_a_run_asked_for_by_another_name_is_read_once(tmp_path, monkeypatch):
    # `ferry run -o ferry.data` indexes the run by the name it was given and
    # learns from it by its absolute name: a run of a thousand processes
    # was read twice, ~0.3 ms a process after every program
    run_dir = _run(tmp_path)
    monkeypatch.chdir(tmp_path)
    first = load_run("run", reuse=True)
    assert load_run(run_dir.absolute(), reuse=True) is first
    assert load_run("./run", reuse=True) is first
    # what changed is read again (a second later: a file system's clock may
    # be coarser than the time reading the run took)
    info = run_dir / "info.json"
    st = info.stat()
    os.utime(info, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert load_run(run_dir, reuse=True) is not first
