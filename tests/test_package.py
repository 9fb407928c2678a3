"""`pip install .` gives a ferry that carries its own shim.

The wheel is built from this source tree, installed into a new virtualenv and
run from a directory outside the tree, with no FERRY_SHIM: the only shim it can
find is the one inside the wheel.  The new virtualenv borrows the test
virtualenv's third-party packages through a path file instead of downloading
them (a path file's own .pth files are not processed, so the editable install
of this tree stays invisible to it).
"""
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

SHIM_IN_WHEEL = "ferry/_shim/libferry.so"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", str(ROOT), "-w", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("ferry-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def outside_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FERRY_SHIM", "PYTHONPATH")}
    env["FERRY_CACHE"] = str(tmp_path / "cache")
    return env


def test_wheel_carries_the_shim(wheel):
    assert not wheel.name.endswith("-none-any.whl"), "a wheel holding native code must name its platform"
    with zipfile.ZipFile(wheel) as z:
        shim = z.read(SHIM_IN_WHEEL)
        static = z.read(SHIM_IN_WHEEL.replace("libferry.so", "libferry-static.so"))  # for static programs
        layouts = z.read("ferry/base/_layouts.py").decode()
    assert shim[:4] == static[:4] == b"\x7fELF"
    # the shared formats, generated from the headers the shim was built from
    assert layouts == (ROOT / "base" / "_layouts.py").read_text()
    assert int.from_bytes(shim[16:18], "little") == 3  # ET_DYN: a shared object


def test_installed_ferry_runs_outside_the_source_tree(installed, tmp_path):
    env = outside_env(tmp_path)
    listed = tmp_path / "listed"
    listed.mkdir()
    for name in ("b", "a", "c"):
        (listed / name).write_text(name)
    native = subprocess.run(["/bin/ls", str(listed)], capture_output=True, text=True, timeout=60)
    ferry = str(installed / "bin" / "ferry")
    r = subprocess.run([ferry, "run", "-o", "run", "--", "/bin/ls", str(listed)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (native.returncode, native.stdout), r.stderr
    r = subprocess.run([ferry, "report", "--json", "run"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (proc,) = json.loads(r.stdout)["processes"]
    assert proc["enabled"] and proc["calls"] > 0
    where = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "from ferry.rewriter import shimlib; print(shimlib.path())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(installed)


def test_ferry_shim_still_overrides(installed, tmp_path):
    env = dict(outside_env(tmp_path), FERRY_SHIM=str(tmp_path / "elsewhere.so"))
    r = subprocess.run([str(installed / "bin" / "ferry"), "run", "-o", "run", "--", "/bin/true"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "elsewhere.so" in r.stderr, r.stderr
