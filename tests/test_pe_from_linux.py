"""A Windows program started by a Linux program under `ferry run` (a shell
script calling `wine app.exe`): the shim's exec hook starts it with ferry.dll
as `ferry run app.exe` would, so it is enabled, counted, and its output and
exit code are those of the same script without Ferry."""
import json
import subprocess

import pytest

from conftest import FERRY, ferry
from test_pe_run import ferry_dll_built  # noqa: F401 (fixture)
from winenv import reference


def _plain(wine, argv, cwd, sound):
    """The script's result without Ferry: the reference Ferry's run must equal
    (winenv.reference: taken again if wine did not run the program)."""
    return reference(lambda: subprocess.run(argv, env=wine.env, capture_output=True, timeout=120, cwd=cwd),
                     sound)


def _same_as_plain(wine, script, run_dir, cwd, sound):
    plain = _plain(wine, ["sh", "-c", script], cwd, sound)
    r = ferry("run", "-p", "count", "-o", run_dir, "--", "sh", "-c", script, env=wine.env, timeout=180,
              cwd=cwd, text=False)
    assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
    return r


def _model(run_dir, env):
    r = ferry("report", "--json", run_dir, env=env, timeout=120, text=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _write_calls(model):
    return sum(s["calls"] for s in model["syscalls"] if s["name"] == "NtWriteFile")


def test_wine_from_a_script_runs_the_program_with_ferry_dll(wine, win_programs, ferry_dll_built,
                                                             tmp_path):
    exe = win_programs["write_count"]
    counts = {}
    for n in (0, 37):
        run_dir = tmp_path / f"run{n}"
        # a path relative to the script's directory, as scripts give it
        script = f"wine ./{exe.name} out{n}.bin {n}; echo after $?"
        _same_as_plain(wine, script, run_dir, exe.parent,
                       lambda p: p.stdout == f"wrote {n} bytes\r\nafter {n % 7}\n".encode())
        assert (exe.parent / f"out{n}.bin").read_bytes() == b"x" * n
        model = _model(run_dir, wine.env)
        procs = model["processes"]
        windows = [p for p in procs if p.get("windows")]
        assert len(windows) == 1 and windows[0]["enabled"], procs
        assert windows[0]["exe"].lower().endswith("\\write_count.exe"), windows
        assert windows[0]["argv"][1:] == [f"out{n}.bin", str(n)]
        assert windows[0]["exit"] == {"code": n % 7, "signal": None}
        # the shell's exec of wine says what became of it; wine itself runs without libferry.so
        wine_rows = [p for p in procs if p["exe"] == "/usr/bin/wine"]
        assert len(wine_rows) == 1 and not wine_rows[0]["enabled"], procs
        assert "ferry.dll" in wine_rows[0]["reason"]
        counts[n] = _write_calls(model)
    assert counts[37] - counts[0] == 37, counts


def test_children_of_a_program_from_a_script_are_enabled(wine, win_programs, ferry_dll_built,
                                                         tmp_path):
    """spawn_tree under a shell: its child (CreateProcessW), grandchild
    (`cmd.exe /c`) and so on all carry ferry.dll."""
    exe = win_programs["spawn_tree"]
    _same_as_plain(wine, f"wine {exe} 2 3 {tmp_path / 'out'}", tmp_path / "run", tmp_path,
                   lambda p: p.returncode == 2)
    procs = [p for p in _model(tmp_path / "run", wine.env)["processes"] if p.get("windows")]
    names = sorted(p["exe"].split("\\")[-1].lower() for p in procs)
    assert names == ["cmd.exe", "spawn_tree.exe", "spawn_tree.exe", "spawn_tree.exe"], names
    assert all(p["enabled"] for p in procs), procs


def test_program_from_a_script_sees_no_ferry_variable(wine, win_programs, ferry_dll_built, tmp_path):
    exe = win_programs["show_env"]
    script = f"wine {exe} | grep -c -E 'FERRY_(MODE|WIN_|RUN_DIR|SHIM)'; true"
    _same_as_plain(wine, script, tmp_path / "run", tmp_path, lambda p: p.stdout == b"0\n")
    windows = [p for p in _model(tmp_path / "run", wine.env)["processes"] if p.get("windows")]
    assert len(windows) == 1 and windows[0]["enabled"], windows


def _own_binfmt(cmd):
    """`cmd` in a user and mount namespace of its own whose binfmt_misc hands
    files starting with "MZ" to wine, as Debian's binfmt-support entry does
    (since Linux 6.7 such a registration is that namespace's alone)."""
    script = ("mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && "
              "echo ':ferry-test-wine:M::MZ::/usr/bin/wine:' > /proc/sys/fs/binfmt_misc/register && "
              'exec "$@"')
    return ["unshare", "-U", "-r", "-m", "sh", "-c", script, "sh", *map(str, cmd)]


def test_program_run_directly_through_binfmt_is_enabled(wine, win_programs, ferry_dll_built, tmp_path):
    """`./app.exe ARGS` from a script, which the kernel hands to wine through
    binfmt_misc: started with ferry.dll as `wine app.exe ARGS` is."""
    probe = subprocess.run(_own_binfmt(["true"]), capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"no binfmt_misc of a user namespace's own here: {probe.stderr.decode().strip()}")
    exe = win_programs["write_count"]
    counts = {}
    for n in (0, 21):
        script = f"./{exe.name} direct{n}.bin {n}; echo after $?"
        plain = _plain(wine, _own_binfmt(["sh", "-c", script]), exe.parent,
                       lambda p: p.stdout == f"wrote {n} bytes\r\nafter {n % 7}\n".encode())
        run_dir = tmp_path / f"run{n}"
        r = subprocess.run(_own_binfmt(FERRY + ["run", "-p", "count", "-o", run_dir, "--", "sh", "-c",
                                                script]),
                           env=wine.env, capture_output=True, timeout=180, cwd=exe.parent)
        assert (r.stdout, r.stderr, r.returncode) == (plain.stdout, plain.stderr, plain.returncode)
        model = _model(run_dir, wine.env)
        windows = [p for p in model["processes"] if p.get("windows")]
        assert len(windows) == 1 and windows[0]["enabled"], model["processes"]
        counts[n] = _write_calls(model)
    assert counts[21] - counts[0] == 21, counts
