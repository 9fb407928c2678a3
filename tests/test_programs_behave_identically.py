"""A rewritten program behaves exactly like the original, byte for byte.

Every case runs the original and the rewritten program (`ferry instrument`)
with the same arguments, argv[0], working directory, stdin and environment
(apart from FERRY_RUN_DIR, set for the rewritten run only) and asserts that
stdout, stderr and the return code are identical.  The rewritten run must also
have gone through the shim: its process record names the rewritten executable and
counts calls (so a "rewritten" program that is secretly the original, or that
bypasses the shim, fails).

Programs: real Debian 12 programs (ls, cat, sort, find, dash, tar, the
python3.11 interpreter) on inputs made once per module, and the C programs of
tests/programs/.
"""
import hashlib
import itertools
import os
import random
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, read_stats, recording_env

SCRIPTS = ROOT / "tests" / "programs"
PYTHON = "/usr/bin/python3.11"
TIMEOUT = 60
FIXED_MTIME = 1_600_000_000  # 2020-09-13 12:26:40 UTC

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": os.environ.get("HOME", "/root"),
    "LC_ALL": "C",
    "TZ": "UTC",
    "PYTHONDONTWRITEBYTECODE": "1",
}

_run_ids = itertools.count()


# --------------------------------------------------------------------------
# running both programs and comparing


@dataclass
class Pair:
    inst: object  # conftest.Instrumented
    original: subprocess.CompletedProcess
    rewritten: subprocess.CompletedProcess
    stats: dict  # {pid: stats} written by the rewritten run


def _run(argv, executable, *, cwd, stdin, env, timeout):
    with open(stdin if stdin is not None else os.devnull, "rb") as f:
        return subprocess.run([str(a) for a in argv], executable=str(executable), stdin=f,
                              capture_output=True, cwd=str(cwd), env=env, timeout=timeout)


def run_pair(inst, args, tmp_path, *, stdin=None, cwd=None, env=None, own_argv0=False,
             timeout=TIMEOUT):
    """Runs the original then the rewritten program of `inst` with `args`.

    argv[0] is the program's base name for both (so messages that quote
    argv[0] match), unless `own_argv0`: then each gets its own full path (the
    Python interpreter finds its prefix and sys.executable from it)."""
    env = dict(BASE_ENV if env is None else env)
    env.pop("FERRY_RUN_DIR", None)
    cwd = tmp_path if cwd is None else cwd
    run_dir = tmp_path / f"ferry-run-{next(_run_ids)}"
    results = []
    for exe, e in ((inst.original, env), (inst.path, recording_env(env, run_dir))):
        argv0 = str(exe) if own_argv0 else inst.original.name
        results.append(_run([argv0, *args], exe, cwd=cwd, stdin=stdin, env=e, timeout=timeout))
    return Pair(inst, results[0], results[1], read_stats(run_dir))


def _bytes_diff(what, a, b):
    n = min(len(a), len(b))
    i = next((k for k in range(n) if a[k] != b[k]), n)
    lo = max(0, i - 120)
    return (f"{what} differs at byte {i} (original {len(a)} bytes, rewritten {len(b)} bytes)\n"
            f"  original : {a[lo:i + 120]!r}\n"
            f"  rewritten: {b[lo:i + 120]!r}")


def assert_identical(pair, *, through_shim=True):
    """stdout, stderr and return code identical; the rewritten run used the shim."""
    o, r = pair.original, pair.rewritten
    problems = []
    if o.returncode != r.returncode:
        problems.append(f"return code: original {o.returncode}, rewritten {r.returncode}")
    for what in ("stdout", "stderr"):
        a, b = getattr(o, what), getattr(r, what)
        if a != b:
            problems.append(_bytes_diff(what, a, b))
    if problems:
        cmd = " ".join(map(str, r.args))
        raise AssertionError(f"`{cmd}` (rewritten: {pair.inst.path}) behaves differently:\n"
                             + "\n".join(problems)
                             + f"\n--- rewritten stderr:\n{r.stderr[-3000:]!r}")
    if through_shim:
        assert_went_through_shim(pair)


def assert_went_through_shim(pair):
    exe = os.path.realpath(pair.inst.path)
    mine = [s for s in pair.stats.values() if os.path.realpath(s["exe"]) == exe]
    assert mine, (f"the rewritten run left no process record for {exe} "
                  f"(records of: {[s['exe'] for s in pair.stats.values()]})")
    for s in mine:
        assert s["invalid"] == 0, s
        assert s["modules"] >= 1, s
        assert sum(s["calls"].values()) > 0, s


# --------------------------------------------------------------------------
# inputs, made once per module


def _set_mtime(path, t):
    os.utime(path, ns=(t * 10**9, t * 10**9), follow_symlinks=False)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A fixed directory tree (contents, modes and mtimes never change)."""
    base = tmp_path_factory.mktemp("tree-base")
    root = base / "tree"
    rnd = random.Random(20240607)
    files = {
        "README.txt": b"hello from the fixed tree\n",
        "empty.txt": b"",
        "with space.txt": b"a file name with a space\n",
        ".hidden": b"dot file\n",
        "data.bin": rnd.randbytes(300_000),
        "script.sh": b"#!/bin/sh\necho script\n",
        "sub/a.txt": b"".join(b"line %d of a\n" % i for i in range(1000)),
        "sub/b.log": b"log entry\n" * 50,
        "sub/deeper/c.txt": b"deep c\n",
        "sub/deeper/d.dat": rnd.randbytes(70_000),
        "sub/deeper/e.txt": b"e" * 5000,
    }
    for name, content in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        p.chmod(0o644)
    (root / "script.sh").chmod(0o755)
    (root / "empty-dir").mkdir()
    (root / "link-to-readme").symlink_to("README.txt")
    (root / "sub" / "link-to-deeper").symlink_to("deeper")
    entries = sorted(root.rglob("*"), key=lambda p: (-len(p.parts), str(p)))
    for i, p in enumerate(entries):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
        _set_mtime(p, FIXED_MTIME + 3600 * i)
    root.chmod(0o755)
    _set_mtime(root, FIXED_MTIME - 86400)
    _set_mtime(base, FIXED_MTIME - 2 * 86400)
    return root


@pytest.fixture(scope="module")
def sort_input(tmp_path_factory):
    """200 000 lines (~3 MB) of pseudo-random words and numbers, with duplicates."""
    rnd = random.Random(4242)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ-_ ") for _ in range(
        rnd.randint(1, 12))) for _ in range(20_000)]
    lines = [f"{rnd.choice(words)}\t{rnd.randint(-10**6, 10**6)}\n" for _ in range(200_000)]
    p = tmp_path_factory.mktemp("sort") / "input.txt"
    p.write_text("".join(lines))
    return p


def snapshot(root):
    """{relative path: (type, mode, mtime, content sha256 / link target)} of a tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                            hashlib.sha256(p.read_bytes()).hexdigest())
    return out


# --------------------------------------------------------------------------
# ls


def test_ls_la_output_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/ls"), ["-la", "tree"], tmp_path, cwd=tree.parent)
    assert_identical(pair)
    assert b"README.txt" in pair.original.stdout and b"link-to-readme -> README.txt" in \
        pair.original.stdout


def test_ls_recursive_long_listing_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/ls"),
                    ["-laRin", "--time-style=full-iso", "--quoting-style=shell-escape", "."],
                    tmp_path, cwd=tree)
    assert_identical(pair)
    assert b"./sub/deeper:" in pair.rewritten.stdout


def test_ls_missing_path_fails_identically(instrument, tmp_path):
    pair = run_pair(instrument("/usr/bin/ls"), ["/nonexistent/ferry-no-such-path"], tmp_path)
    assert_identical(pair)
    assert pair.rewritten.returncode == 2
    assert b"No such file or directory" in pair.rewritten.stderr


def test_ls_existing_and_missing_paths_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/ls"), ["-l", "tree/README.txt", "tree/missing", "tree/sub"],
                    tmp_path, cwd=tree.parent)
    assert_identical(pair)
    assert pair.rewritten.returncode == 2
    assert pair.rewritten.stdout and pair.rewritten.stderr


# --------------------------------------------------------------------------
# cat


def test_cat_files_output_identical(instrument, tree, tmp_path):
    names = ["README.txt", "data.bin", "empty.txt", "sub/a.txt", "sub/deeper/d.dat"]
    pair = run_pair(instrument("/usr/bin/cat"), names, tmp_path, cwd=tree)
    assert_identical(pair)
    assert pair.rewritten.stdout == b"".join((tree / n).read_bytes() for n in names)


def test_cat_stdin_output_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/cat"), ["README.txt", "-", "sub/b.log"], tmp_path,
                    cwd=tree, stdin=tree / "data.bin")
    assert_identical(pair)
    assert pair.rewritten.stdout == ((tree / "README.txt").read_bytes()
                                     + (tree / "data.bin").read_bytes()
                                     + (tree / "sub/b.log").read_bytes())


def test_cat_numbered_stdin_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/cat"), ["-n", "-A"], tmp_path,
                    stdin=tree / "sub" / "a.txt")
    assert_identical(pair)


def test_cat_missing_file_fails_identically(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/cat"), ["README.txt", "nope.txt", "empty.txt"], tmp_path,
                    cwd=tree)
    assert_identical(pair)
    assert pair.rewritten.returncode == 1
    assert b"nope.txt: No such file or directory" in pair.rewritten.stderr


# --------------------------------------------------------------------------
# sort


def test_sort_output_identical(instrument, sort_input, tmp_path):
    pair = run_pair(instrument("/usr/bin/sort"), [sort_input], tmp_path)
    assert_identical(pair)
    expected = b"".join(sorted(sort_input.read_bytes().splitlines(keepends=True)))
    assert pair.rewritten.stdout == expected


def test_sort_unique_reverse_output_identical(instrument, sort_input, tmp_path):
    pair = run_pair(instrument("/usr/bin/sort"), ["-u", "-r", sort_input], tmp_path)
    assert_identical(pair)
    expected = b"".join(sorted(set(sort_input.read_bytes().splitlines(keepends=True)),
                               reverse=True))
    assert pair.rewritten.stdout == expected


def test_sort_parallel_with_temporary_files_identical(instrument, sort_input, tmp_path):
    # A small buffer forces temporary files and a merge; --parallel uses threads.
    tmp = tmp_path / "sort-tmp"
    tmp.mkdir()
    pair = run_pair(instrument("/usr/bin/sort"),
                    ["-t", "\t", "-k2,2n", "-k1,1", "-S", "256K", "--parallel=4", "-T", tmp,
                     sort_input], tmp_path)
    assert_identical(pair)
    assert len(pair.rewritten.stdout) == sort_input.stat().st_size
    assert list(tmp.iterdir()) == []


def test_sort_stdin_identical(instrument, sort_input, tmp_path):
    pair = run_pair(instrument("/usr/bin/sort"), ["-f", "-s", "-k1,1"], tmp_path,
                    stdin=sort_input)
    assert_identical(pair)


# --------------------------------------------------------------------------
# find


def test_find_type_name_output_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/find"), [".", "-type", "f", "-name", "*.txt"], tmp_path,
                    cwd=tree)
    assert_identical(pair)
    assert sorted(pair.rewritten.stdout.splitlines()) == sorted(
        b"./" + str(p.relative_to(tree)).encode() for p in tree.rglob("*.txt"))


def test_find_printf_output_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/find"),
                    ["tree", "-printf", "%p %s %M %y %l %T+\n"], tmp_path, cwd=tree.parent)
    assert_identical(pair)
    assert b"tree/data.bin 300000 -rw-r--r--" in pair.rewritten.stdout


def test_find_exec_output_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/find"),
                    [".", "-type", "f", "-name", "*.txt", "-exec", "wc", "-c", "{}", ";",
                     "-o", "-name", "*.log", "-exec", "cat", "{}", "+"], tmp_path, cwd=tree)
    assert_identical(pair)
    assert b"log entry" in pair.rewritten.stdout


# --------------------------------------------------------------------------
# dash

DASH_SCRIPT = r"""
i=0
total=0
while [ $i -lt 100 ]; do total=$((total + i)); i=$((i + 1)); done
echo "total=$total"
for w in alpha beta gamma delta; do printf '%s\n' "$w"; done | sort -r | tr a-z A-Z
x=$(echo sub; (echo nested; exit 5); echo "nested status $?")
echo "$x"
( cd / && pwd )
pwd | wc -c >/dev/null
echo "to stderr" >&2
f() { echo "func $1"; return 4; }
f arg || echo "f returned $?"
cat <<EOF | wc -l
a
b
c
EOF
case "$total" in 4950) echo match;; *) echo nomatch;; esac
n=0; for j in 1 2 3 4 5 6 7 8 9 10; do n=$((n + $(echo $j | tr -d '\n' | wc -c))); done; echo "n=$n"
read line < /etc/hostname && echo "read ok"
trap 'echo trapped EXIT' EXIT
exit 3
"""


def test_dash_script_output_and_exit_status_identical(instrument, tmp_path):
    pair = run_pair(instrument("/usr/bin/dash"), ["-c", DASH_SCRIPT], tmp_path)
    assert_identical(pair)
    assert pair.rewritten.returncode == 3
    assert b"total=4950\nGAMMA\nDELTA\nBETA\nALPHA\n" in pair.rewritten.stdout
    assert pair.rewritten.stdout.endswith(b"trapped EXIT\n")
    assert pair.rewritten.stderr == b"to stderr\n"


def test_dash_script_from_stdin_identical(instrument, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text(DASH_SCRIPT)
    pair = run_pair(instrument("/usr/bin/dash"), ["-s"], tmp_path, stdin=script)
    assert_identical(pair)
    assert pair.rewritten.returncode == 3


def test_dash_failing_command_identical(instrument, tmp_path):
    pair = run_pair(instrument("/usr/bin/dash"),
                    ["-c", "set -e; echo before; /nonexistent/cmd; echo after"], tmp_path)
    assert_identical(pair)
    assert pair.rewritten.returncode == 127


# --------------------------------------------------------------------------
# tar

TAR_CREATE = ["--sort=name", f"--mtime=@{FIXED_MTIME}", "--owner=0", "--group=0",
              "--numeric-owner", "--format=gnu"]


def test_tar_create_to_stdout_identical(instrument, tree, tmp_path):
    pair = run_pair(instrument("/usr/bin/tar"), ["-cf", "-", *TAR_CREATE, "-C", tree, "."],
                    tmp_path)
    assert_identical(pair)
    archive = pair.rewritten.stdout
    assert len(archive) > 300_000 and len(archive) % 512 == 0
    path = tmp_path / "a.tar"
    path.write_bytes(archive)
    with tarfile.open(path) as tf:
        names = set(tf.getnames())
    assert {"./README.txt", "./sub/deeper/d.dat", "./link-to-readme", "./empty-dir"} <= names


def test_tar_list_from_stdin_identical(instrument, tree, tmp_path):
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "-cf", archive, *TAR_CREATE, "-C", tree, "."], check=True,
                   env=BASE_ENV, timeout=TIMEOUT)
    pair = run_pair(instrument("/usr/bin/tar"), ["-tvf", "-"], tmp_path, stdin=archive)
    assert_identical(pair)
    assert b"./link-to-readme -> README.txt" in pair.rewritten.stdout


def test_tar_create_pipe_list_identical(instrument, tree, tmp_path):
    # tar -cf - -C tree . | tar -tvf -   with the original tar at both ends, then
    # with the rewritten tar at both ends.
    tar = instrument("/usr/bin/tar")
    outs = []
    for exe in (tar.original, tar.path):
        env = recording_env(BASE_ENV, tmp_path / f"run-{len(outs)}") if exe == tar.path \
            else BASE_ENV
        create = subprocess.Popen(["tar", "-cf", "-", *TAR_CREATE, "-C", tree, "."],
                                  executable=exe, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        listing = subprocess.run(["tar", "-tvf", "-"], executable=exe, stdin=create.stdout,
                                 capture_output=True, env=env, timeout=TIMEOUT)
        create.stdout.close()
        create_err = create.stderr.read()
        create.stderr.close()
        outs.append((create.wait(timeout=TIMEOUT), create_err, listing.returncode,
                     listing.stdout, listing.stderr))
    assert outs[1] == outs[0]
    assert outs[0][2] == 0 and b"./sub/deeper/e.txt" in outs[0][3]
    assert len(read_stats(tmp_path / "run-1")) == 2  # both rewritten tars recorded
    assert not (tmp_path / "run-0").exists()


def test_tar_extract_produces_identical_tree(instrument, tree, tmp_path):
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "-cf", archive, *TAR_CREATE, "-C", tree, "."], check=True,
                   env=BASE_ENV, timeout=TIMEOUT)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "original").mkdir()
    (dest / "rewritten").mkdir()
    tar = instrument("/usr/bin/tar")
    run_dir = tmp_path / "run"
    results = []
    for exe, sub in ((tar.original, "original"), (tar.path, "rewritten")):
        env = recording_env(BASE_ENV, run_dir) if sub == "rewritten" else BASE_ENV
        results.append(_run(["tar", "-xpf", archive, "-C", dest / sub], exe, cwd=tmp_path,
                            stdin=None, env=env, timeout=TIMEOUT))
    o, r = results
    assert (r.returncode, r.stdout, r.stderr) == (o.returncode, o.stdout, o.stderr)
    assert o.returncode == 0
    original_tree = snapshot(dest / "original")
    rewritten_tree = snapshot(dest / "rewritten")
    assert rewritten_tree == original_tree
    # and both are the source tree (mtimes aside: the archive has --mtime)
    strip = {k: (v[0], v[1], *v[3:]) if v[0] == "file" else v[:2] for k, v in
             snapshot(tree).items()}
    assert {k: (v[0], v[1], *v[3:]) if v[0] == "file" else v[:2]
            for k, v in rewritten_tree.items()} == strip
    assert read_stats(run_dir), "the rewritten tar left no process record"


def test_tar_gzip_through_child_process_identical(instrument, tree, tmp_path):
    # tar forks and execs gzip, writing through a pipe.
    pair = run_pair(instrument("/usr/bin/tar"),
                    ["-cf", "-", "--use-compress-program=gzip -n -6", *TAR_CREATE, "-C", tree,
                     "sub"], tmp_path)
    assert_identical(pair)
    assert pair.rewritten.stdout[:2] == b"\x1f\x8b"


# --------------------------------------------------------------------------
# the Python interpreter


@pytest.fixture(scope="module")
def python(instrument):
    return instrument(PYTHON)


def test_python_prefix_and_path_identical(python, tmp_path):
    code = ("import sys; print(sys.prefix); print(sys.exec_prefix); print(sys.base_prefix); "
            "print(sys.path); print(sys.version); print(sys.flags); print(sys.platlibdir); "
            "import os; print(os.__file__)")
    pair = run_pair(python, ["-c", code], tmp_path, own_argv0=True)
    assert_identical(pair)
    assert pair.rewritten.stdout.splitlines()[0] == b"/usr"
    who = run_pair(python, ["-c", "import sys; print(sys.executable)"], tmp_path, own_argv0=True)
    assert who.original.stdout == f"{PYTHON}\n".encode()
    assert who.rewritten.stdout == f"{python.path}\n".encode()


@pytest.mark.parametrize("script", ["py_threads.py", "py_subprocess.py", "py_signals.py"])
def test_python_script_output_identical(python, script, tmp_path):
    pair = run_pair(python, [SCRIPTS / script], tmp_path, own_argv0=True)
    assert_identical(pair)
    assert pair.original.returncode == 0, pair.original.stderr
    assert pair.original.stdout


def test_python_stdlib_modules_output_identical(python, tree, tmp_path):
    pair = run_pair(python, [SCRIPTS / "py_stdlib.py", tree], tmp_path, own_argv0=True)
    assert_identical(pair)
    assert pair.original.returncode == 0, pair.original.stderr
    assert b"walk: sub/deeper/d.dat 70000" in pair.rewritten.stdout


def test_python_uncaught_exception_identical(python, tmp_path):
    pair = run_pair(python, ["-c", "import sys\nprint('out')\nsys.stdout.flush()\n"
                             "raise ValueError('boom')"], tmp_path, own_argv0=True)
    assert_identical(pair)
    assert pair.rewritten.returncode == 1
    assert b"ValueError: boom" in pair.rewritten.stderr


# --------------------------------------------------------------------------
# the C test programs (tests/programs)


@pytest.mark.parametrize("args", [["12345"], ["100", "7"]])
def test_getppid_loop_output_identical(instrument, test_programs, args, tmp_path):
    pair = run_pair(instrument(test_programs / "getppid_loop"), args, tmp_path)
    assert_identical(pair)
    assert f"parent getppid calls: {args[0]} (all equal: yes)\n".encode() in pair.rewritten.stdout


def test_threads_output_identical(instrument, test_programs, tmp_path):
    pair = run_pair(instrument(test_programs / "threads"), [], tmp_path)
    assert_identical(pair)
    assert b"total: 21000 (expected 21000)\n" in pair.rewritten.stdout
    assert b"same pid in every thread: yes\n" in pair.rewritten.stdout


def test_sigrestart_interrupted_calls_identical(instrument, test_programs, tmp_path):
    pair = run_pair(instrument(test_programs / "sigrestart"), [], tmp_path)
    assert_identical(pair)
    out = pair.rewritten.stdout
    assert out.count(b"data matches: yes") == 3
    assert out.count(b"errno -, interrupted: yes\n") == 3
    assert b"phase1 waitpid: returned child: yes errno -, interrupted: yes, exit 7" in out
    assert b"(EINTR: yes), handler ran: yes" in out


def test_rawsyscall_output_identical(instrument, test_programs, tmp_path):
    pair = run_pair(instrument(test_programs / "rawsyscall"), ["500"], tmp_path)
    assert_identical(pair)
    out = pair.rewritten.stdout
    assert out.count(b"raw write ") == 500
    assert b"writes ok: 500/500\nclose(-1): -1 errno Bad file descriptor\nmmap+munmap: ok\n" in out


@pytest.mark.parametrize("mode, returncode", [("segv", -11), ("abort", -6), ("kill", -15),
                                              ("exit", 42)])
def test_crash_ends_with_same_signal(instrument, test_programs, mode, returncode, tmp_path):
    pair = run_pair(instrument(test_programs / "crash"), [mode], tmp_path)
    # killed by a signal: no exit_group, so no record that ended through the shim
    assert_identical(pair, through_shim=returncode > 0)
    assert pair.rewritten.returncode == returncode
    assert pair.rewritten.stderr.startswith(b"about to ")


def test_forkexec_output_identical(instrument, test_programs, tmp_path):
    pair = run_pair(instrument(test_programs / "forkexec"), [], tmp_path)
    assert_identical(pair)
    out = pair.rewritten.stdout
    for line in (b"hello from fork+execve\n", b"fork+execve /bin/echo: exit 0\n",
                 b"vfork+execv /bin/true: exit 0\n", b"vfork+execv /bin/false: exit 1\n",
                 b"hello from posix_spawn\n", b"posix_spawnp sh -c 'exit 3': exit 3\n",
                 b"fork without exec: exit 5\n",
                 b"forked child: own pid differs from parent: yes\n"):
        assert line in out
    # stats from the parent, the child forked without exec and the posix_spawn
    # child whose exec failed (it exits through the rewritten libc); children
    # that exec'd a program with a rewritten image in the cache (the exec
    # hook runs that image) write their own too
    assert len(pair.stats) >= 3
    parent = min(pair.stats.values(), key=lambda s: s["pid"])
    children = [s for s in pair.stats.values() if s["ppid"] == parent["pid"]]
    assert len(children) >= 2
