"""Running the aggregation test programs (tests/programs/agg_*.c).

They call the Ferry API, so they link libferry.so; their calls reach the
shim through libc, which is rewritten once per session (`ferry instrument`)
and found first through LD_LIBRARY_PATH.
"""
import os
import subprocess

import pytest

from conftest import LIBC, ferry

TIMEOUT = 60


@pytest.fixture(scope="session")
def agg(tmp_path_factory, test_programs):
    """agg(program, *args, env=None, check=True) -> CompletedProcess."""
    libc_dir = tmp_path_factory.mktemp("agg-libc") / "libc"
    ferry("instrument", LIBC, "-o", libc_dir, check=True)

    def run(program, *args, env=None, check=True, cwd=None):
        full = dict(os.environ, PATH="/usr/bin:/bin", LC_ALL="C", LD_LIBRARY_PATH=str(libc_dir))
        full.pop("FERRY_MODE", None)
        full.pop("FERRY_AGG", None)
        full.update(env or {})
        r = subprocess.run([str(test_programs / program), *map(str, args)], capture_output=True,
                           text=True, timeout=TIMEOUT, env=full, cwd=cwd)
        if check:
            assert r.returncode == 0, f"{program} {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        return r

    return run


def pool_setting(wait, limit=0, timeout_ns=0, entries=256):
    """FERRY_AGG for one pool with the given wait policy (docs/aggregate.md)."""
    return f"workers=4;pool={entries},0,0,-1,0,{wait},{limit},{timeout_ns}"


def engine_stats(stderr):
    """The `stats key=value ...` line the programs write to stderr."""
    for line in stderr.splitlines():
        if line.startswith("stats "):
            return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    raise AssertionError(f"no stats line in:\n{stderr}")
