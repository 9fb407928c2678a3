"""A child started through the image cache runs the shim of its run (issue 17).

Every cached image carries a copy of the shim (libferry.so beside it).  After
the shim is rebuilt, or with several builds of Ferry sharing one cache, the
exec hook must never hand a child an image made with another shim.  A second
build is a copy of the shim with another build id (FERRY_SHIM names it); the
child is a `cat` of its own /proc/self/maps, which says which file it loaded
as libferry.so, and that file's build id says which shim it is.
"""
import os
import shutil
from pathlib import Path

import pytest

from conftest import ferry
from ferry.rewriter import cache, shimlib


@pytest.fixture
def other_shim(tmp_path):
    """A second build of the shim: the same code under another build id."""
    shim = shimlib.SOURCE_TREE_SHIM
    data = shim.read_bytes()
    old = bytes.fromhex(shimlib.build_id(shim))
    assert data.count(old) == 1
    new = bytes(b ^ 0x5A for b in old)
    copy = tmp_path / "other" / "libferry.so"
    copy.parent.mkdir()
    copy.write_bytes(data.replace(old, new))
    assert shimlib.build_id(copy) == new.hex()
    return copy


def _env(shim):
    env = dict(os.environ)
    env.pop("FERRY_SHIM", None)
    if shim is not None:
        env["FERRY_SHIM"] = str(shim)
    return env


def _child_shim(tmp_path, name, cat, shim):
    """The libferry.so file a `cat` started by a shell under `ferry run` maps."""
    r = ferry("run", "--no-learn", "-o", tmp_path / f"run-{name}", "--", "sh", "-c", f"{cat} /proc/self/maps",
                  env=_env(shim), check=True)
    mapped = {line.split()[-1] for line in r.stdout.splitlines() if line.endswith("/libferry.so")}
    assert len(mapped) == 1, r.stdout
    return Path(mapped.pop())


def test_child_never_runs_an_image_made_with_another_shim(tmp_path, other_shim):
    cat = tmp_path / "cat"
    shutil.copy2("/bin/cat", cat)
    current = shimlib.build_id(shimlib.SOURCE_TREE_SHIM)
    ferry("instrument", cat, env=_env(None), check=True)      # an image made by this build

    # another build, sharing the cache, has no image of cat yet: the child
    # is enabled with that build's shim, not with the image this one made
    loaded = _child_shim(tmp_path, "other-first", cat, other_shim)
    assert shimlib.build_id(loaded) == shimlib.build_id(other_shim), loaded

    # once it has made its own image, each build runs its own
    ferry("instrument", cat, env=_env(other_shim), check=True)
    for name, shim, want in (("other", other_shim, shimlib.build_id(other_shim)),
                             ("this", None, current)):
        loaded = _child_shim(tmp_path, name, cat, shim)
        assert loaded.is_relative_to(cache.root() / "programs"), loaded  # the cached image ran
        assert shimlib.build_id(loaded) == want, (name, loaded)

