"""The images enabled processes map (the shim, the rewritten libraries) are
kept in the page cache in large folios: made so, and read back so once per
boot after they left the cache (base/folios.py), where ld.so's reads and
faults read them back in 4 KiB pages."""
import mmap
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import evict, ferry
from ferry.base import folios
from ferry.rewriter import cache


def _pages_in_large_folios(path):
    """(pages of the file in a large folio, pages), from /proc/kpageflags;
    the file must be cached whole (mapping its pages reads in what is not,
    and that is what this looks at)."""
    KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 1 << 15, 1 << 16
    size = os.path.getsize(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
        m.madvise(folios.MADV_POPULATE_READ)
        start = int(next(line.split("-")[0] for line in Path("/proc/self/maps").read_text().splitlines()
                         if line.endswith(" " + str(path))), 16)
        large = 0
        with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
            for i in range(-(-size // 4096)):
                pm.seek((start // 4096 + i) * 8)
                entry = struct.unpack("<Q", pm.read(8))[0]
                kf.seek((entry & ((1 << 55) - 1)) * 8)
                large += bool(struct.unpack("<Q", kf.read(8))[0] & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))
    return large, -(-size // 4096)


@pytest.fixture
def filled(tmp_path, monkeypatch):
    """(env, program, the linked images): a private cache holding a copy of
    `true` rewritten, run once."""
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    env = dict(os.environ)
    program = tmp_path / "mytrue"
    shutil.copy2("/usr/bin/true", program)
    ferry("run", "-o", tmp_path / "run", "--", program, env=env, check=True)
    images = sorted(cache.linked_images())
    names = sorted(p.name for p in images)
    assert "libferry.so" in names and "libc.so.6" in names, images
    return env, program, images


def test_the_images_are_read_back_once_a_boot_and_no_more(filled):
    env, _, images = filled
    root = env["FERRY_CACHE"]
    marker = next(Path(root).glob("folios-*"))
    # made this boot: settled as they were written, nothing to read back
    assert folios.warm(images, root) == []
    marker.unlink()         # as after a reboot
    assert sorted(folios.warm(images, root)) == images
    assert folios.warm(images, root) == []
    lone = Path(root) / "lone.so"       # linked by no program directory
    shutil.copy2(images[0], lone)
    marker.unlink()
    assert lone not in folios.warm([*images, lone], root)
    # text patched from a plan: read back once a process of this boot mapped it
    evict(lone)
    assert folios.warm([lone], root, in_use="cached") == []
    lone.read_bytes()
    assert folios.warm([lone], root, in_use="cached") == [lone]
    assert folios.warm([lone], root, in_use="cached") == []


def _kernel_gives_large_folios(tmp_path):
    if os.geteuid() != 0 or not os.access("/proc/kpageflags", os.R_OK):
        pytest.skip("/proc/kpageflags is root's")
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(1 << 20))
    folios.settle(probe)
    large, pages = _pages_in_large_folios(probe)
    if large < pages // 2:
        pytest.skip("this kernel or file system caches no file in large folios")


def test_images_read_back_in_small_pages_after_a_reboot_are_read_back_in_large_folios(filled, tmp_path):
    env, program, images = filled
    _kernel_gives_large_folios(tmp_path)
    for image in images:
        large, pages = _pages_in_large_folios(image)
        assert large > pages // 2, f"{image} was not made in large folios ({large} of {pages} pages)"
    # out of the cache, then read back by ld.so and the faults of a process
    # that maps them: in 4 KiB pages
    for image in images:
        evict(image)
    libs = next(p for p in images if p.name == "libc.so.6")
    shim = next(p for p in images if p.name == "libferry.so")
    subprocess.run(["/bin/true"], env=dict(os.environ, LD_LIBRARY_PATH=str(libs.parent),
                                           LD_PRELOAD=str(shim)), check=True)
    for image in images:
        cached = subprocess.run(["cat", str(image)], stdout=subprocess.DEVNULL, check=True)
        assert cached.returncode == 0
    small = {image: _pages_in_large_folios(image) for image in images}
    if all(large > pages // 2 for large, pages in small.values()):
        pytest.skip("this kernel reads a file back in large folios itself")
    next(Path(env["FERRY_CACHE"]).glob("folios-*")).unlink()     # a reboot
    ferry("run", "-o", tmp_path / "again", "--", program, env=env, check=True)
    for image in images:
        large, pages = _pages_in_large_folios(image)
        assert large > pages // 2, f"{image} stayed in small pages ({large} of {pages} pages)"
