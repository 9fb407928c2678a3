"""Wine for the PE tests: one prefix and one wineserver per test session.

A new prefix costs seconds (`wineboot -u`); a program started against a
running persistent wineserver (`wineserver -p`) takes hundredths of one.  So
the session makes one prefix, keeps its server up, and kills it at the end.
Wine runs headless (no DISPLAY) and quiet (WINEDEBUG=-all).  Test programs
(tests/programs/win/*.c) are built with mingw-w64 at test time, once.

conftest.py provides the fixtures `wine` and `win_programs` to every module;
importing them into a module would give that module a prefix of its own.
"""
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WIN_SOURCES = ROOT / "tests" / "programs" / "win"
MINGW_CC = "x86_64-w64-mingw32-gcc"


@dataclass
class Wine:
    prefix: Path
    env: dict          # the environment every wine command of the session needs

    def run(self, *args, **kw):
        """`wine ARGS` (a CompletedProcess, bytes unless text=True is given)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("timeout", 120)
        return subprocess.run(["wine", *map(str, args)], env=self.env, **kw)

    def reference(self, *args, **kw):
        """`wine ARGS` as the reference a test compares Ferry's run with:
        taken again if wine did not start the program (`reference` below)."""
        return reference(lambda: self.run(*args, **kw))


def wine_silent(result):
    """Whether a run looks like wine failing to start its program: exit 1
    and not a word on either stream."""
    return result.returncode == 1 and not result.stdout and not result.stderr


def reference(run, sound=None):
    """The result of `run()` (a run without Ferry: the reference a test
    compares Ferry's run with).  Wine 8 has been seen, once in ~30 CI runs
    under load, to exit 1 without a word for a plain `wine prog.exe` in the
    middle of a session; a reference that is not what the program does
    (`sound(result)` false; by default, that wine_silent) is taken again, up
    to 3 times.  Ferry's own run never is."""
    tries = []
    for _ in range(3):
        result = run()
        if sound(result) if sound else not wine_silent(result):
            return result
        tries.append((result.stdout, result.stderr, result.returncode))
    raise AssertionError(f"wine alone never ran the program as it runs: {tries}")


def _missing():
    for tool, package in (("wine", "wine"), ("wineserver", "wine"), (MINGW_CC, "gcc-mingw-w64-x86-64")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; tools/sysdeps.sh installs it)"
    return None


@pytest.fixture(scope="session")
def wine(tmp_path_factory):
    why = _missing()
    if why:
        pytest.skip(why)
    prefix = tmp_path_factory.mktemp("wineprefix")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    # mscoree/mshtml off: wineboot would otherwise look for Mono and Gecko
    env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    server = subprocess.Popen(["wineserver", "-p", "-f"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        # not through pipes: the services wineboot starts keep them open for the
        # whole session
        log = prefix.parent / (prefix.name + "-wineboot.log")
        with open(log, "wb") as f:
            r = subprocess.run(["wine", "wineboot", "-u"], env=env, stdout=f, stderr=f, timeout=180)
        if r.returncode != 0:
            raise AssertionError(f"wineboot -u failed ({r.returncode}): {log.read_text(errors='replace')}")
        yield Wine(prefix, env)
    finally:
        subprocess.run(["wineserver", "-k"], env=env, capture_output=True, timeout=60)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def build_win_program(source, out_dir, *flags):
    """`source` (a .c file) built with mingw-w64 into out_dir/<name>.exe."""
    source = Path(source)
    exe = Path(out_dir) / (source.stem + ".exe")
    text = source.read_text()
    if "int wmain(" in text:
        flags = ("-municode",) + flags     # a wide-character main
    if "<winsock2.h>" in text:
        flags = flags + ("-lws2_32",)
    r = subprocess.run([MINGW_CC, "-O2", "-Wall", "-o", str(exe), str(source), *flags],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"{MINGW_CC} {source.name} failed:\n{r.stderr}")
    return exe


@pytest.fixture(scope="session")
def win_programs(tmp_path_factory):
    """{name: path of the .exe} for every tests/programs/win/*.c, built once."""
    why = _missing()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("winprograms")
    return {src.stem: build_win_program(src, out) for src in sorted(WIN_SOURCES.glob("*.c"))}
