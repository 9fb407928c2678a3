"""`ferry run` as a supervisor: the program gets the terminal's signals as it
would natively, its death by any signal is mirrored, it does not outlive a
killed `ferry run` (whose run is then reported as cut off), two runs never
share a run directory, and a bad environment is one line, exit 2."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ALL_PROFILES, FERRY, ferry
from ferry.rundata import load_run


pytestmark = pytest.mark.usefixtures("own_index")


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _interrupt_group(argv, sig=signal.SIGINT):
    """Start `argv` in a group of its own with default dispositions, send
    `sig` to the whole group after the program is up, as a terminal does."""
    p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    time.sleep(1.5)
    os.killpg(p.pid, sig)
    out, err = p.communicate(timeout=30)
    return p.returncode, out, err


@pytest.mark.parametrize("profile", ALL_PROFILES)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT])
def test_terminal_signals_reach_the_program(tmp_path, sig, profile):
    argv = ["sh", "-c", "sleep 20; echo after"]
    native = _interrupt_group(argv, sig)
    under = _interrupt_group([*FERRY, "run", "-p", profile, "-o", str(tmp_path / "run"), "--", *argv], sig)
    assert native[:2] == (-sig, b"")
    assert under[:2] == native[:2], under[2]


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_python_gets_keyboard_interrupt(tmp_path, profile):
    argv = ["/usr/bin/python3", "-c", "import time\ntry:\n time.sleep(20)\nexcept KeyboardInterrupt:\n"
            " print('interrupted')\n raise SystemExit(42)"]
    native = _interrupt_group(argv)
    under = _interrupt_group([*FERRY, "run", "-p", profile, "-o", str(tmp_path / "run"), "--", *argv])
    assert native[:2] == (42, b"interrupted\n")
    assert under[:2] == native[:2], under[2]


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_ignored_signals_stay_ignored(tmp_path, profile):
    # nohup-style: what `ferry run` was told to ignore, the program ignores too
    script = "grep SigIgn /proc/self/status"
    run = lambda argv: subprocess.run(argv, capture_output=True, timeout=60,
                                      preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    native = run(["sh", "-c", script])
    under = run([*FERRY, "run", "-p", profile, "-o", str(tmp_path / "run"), "--", "sh", "-c", script])
    # SIGHUP's bit: the low hex digit is 1 only when nothing else below SIGFPE
    # is ignored, and a job started in the background ignores SIGINT and SIGQUIT
    assert under.stdout == native.stdout and int(native.stdout.split()[1], 16) & 1 << (signal.SIGHUP - 1)


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_program_killed_by_sigkill_is_mirrored(tmp_path, profile):
    r = ferry("run", "-p", profile, "-o", tmp_path / "run", "--", "sh", "-c", "kill -9 $$", timeout=60,
              text=False)
    assert r.returncode == -signal.SIGKILL and b"internal error" not in r.stderr, r.stderr
    assert load_run(tmp_path / "run")["info"]["exit"] == {"code": None, "signal": "SIGKILL"}


def _wait_for_pid(run_dir):
    for _ in range(200):
        try:
            pid = json.loads((run_dir / "info.json").read_text()).get("pid")
            if pid:
                return pid
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("the program never started")


def test_the_program_dies_with_a_killed_ferry_run_and_the_run_is_cut_off(tmp_path):
    run_dir = tmp_path / "run"
    run = subprocess.Popen([*FERRY, "run", "-o", str(run_dir), "--", "sleep", "60"])
    pid = _wait_for_pid(run_dir)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    for _ in range(200):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the program outlived ferry run")
    assert load_run(run_dir)["info"]["state"] == "cut off"
    report = ferry("report", run_dir, timeout=60)
    assert "cut off" in report.stdout


def test_a_second_run_into_a_busy_directory_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    first = subprocess.Popen([*FERRY, "run", "-o", str(run_dir), "--", "sleep", "3"])
    try:
        pid = _wait_for_pid(run_dir)
        second = ferry("run", "-o", run_dir, "--", "true", timeout=60)
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1 and "still recording" in second.stderr
    finally:
        assert first.wait(timeout=30) == 0
    model = load_run(run_dir)
    assert model["info"]["pid"] == pid and model["info"]["state"] == "finished"
    assert not (tmp_path / "run.old").exists()


def _mounted_tmpfs(path, options):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"{options},size=4m", "tmpfs", str(path)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")


@pytest.mark.parametrize("case", ["cache-is-a-file", "noexec-cache", "read-only-cache", "read-only-output"])
def test_a_bad_environment_is_one_line(tmp_path, case):
    env = dict(os.environ)
    out = tmp_path / "run"
    mnt = tmp_path / "mnt"
    if case == "cache-is-a-file":
        (tmp_path / "file").write_text("")
        env["FERRY_CACHE"] = str(tmp_path / "file")
    else:
        _mounted_tmpfs(mnt, "ro" if case.startswith("read-only") else "noexec")
        if case == "read-only-output":
            out = mnt / "run"
        else:
            env["FERRY_CACHE"] = str(mnt / "cache")
    try:
        r = ferry("run", "-o", out, "--", "true", timeout=60, env=env)
    finally:
        if mnt.exists():
            subprocess.run(["umount", str(mnt)], capture_output=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("ferry: /") and "internal error" not in r.stderr
    assert not out.exists()
