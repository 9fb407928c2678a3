"""`ferry instrument` of a static program (kind static or static-pie): one
module, rewritten with the shim inside it (static_embed), so the program
directory's executable is one self-contained file:

    DIR/<program>       the rewritten executable, the shim in it
    DIR/manifest.json   its sites

It needs nothing beside it: copied anywhere, it runs.
"""
import shutil
import time
from pathlib import Path

from . import cache, manifest, shimlib, static_embed
from . import instrument as common
from ..base.errors import InputError


def instrument(path, out_dir, progress, started):
    shim = static_embed.path()
    shim_sha = cache.sha256_file(shim)
    in_cache = out_dir is None
    from . import elfload, patcher
    from .modules import Module
    image = elfload.load(path)
    if elfload.ferry_control_block(image):
        raise common.AlreadyRewritten(path)
    if not image.is_executable:
        raise InputError(path, "a static file that is not a program")
    # keyed by the shim it carries: a rebuilt static shim makes a new image
    static_id = shimlib.build_id(shim)
    out_dir = common.output_dir(out_dir, image.sha256, static_id)
    cached = common._current_manifest(out_dir, shim_sha, [image.sha256])
    if cached is not None:
        result = common._served(path, out_dir, cached, False, started, progress)
        if in_cache:
            _register(path, result.entry, static_id)
        return result

    blob = static_embed.load(shim)
    root_name = Path(path).name
    mod = Module(root_name, Path(path), "executable")
    progress("start", None, total=1)
    progress("analyze", mod.name)
    cmap, sites = common.analyze_module(image, progress, mod.name)
    tmp = common.staging_dir(out_dir)
    try:
        progress("rewrite", mod.name)
        patcher.rewrite(image, sites, cmap, tmp / root_name, None,
                        embed=lambda binary: static_embed.embed(binary, blob, path))
        record = common.module_record(image, mod, sites, cmap, root_name)
        progress("advance", mod.name)
        m = common.manifest_of(path, "executable", root_name, root_name,
                               {"file": None, "embedded": static_embed.NAME, "sha256": shim_sha},
                               [record], static=True)
        manifest.write_json(tmp / "manifest.json", m)
        common._move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress("done", mod.name)
    entry = out_dir / root_name
    if in_cache:
        _register(path, entry, static_id)
    return common.Result(out_dir, entry, m, False, time.monotonic() - started)


def _register(path, entry, static_id):
    """Let exec hooks run `entry` for `path`: a static parent's looks it up by
    the static shim's build id, a dynamic parent's by libferry.so's (the two
    are built together)."""
    cache.register_exec(path, entry, static_id)
    cache.register_exec(path, entry, shimlib.build_id())
