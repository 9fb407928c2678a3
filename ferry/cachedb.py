"""The image cache as a user sees it (`ferry cache`): its entries, what each is
for, its size, whether it can still be used, and removing those that cannot.

The layout is rewriter/cache.py's.  An entry is one of
    program  programs/<sha>-<shim>-<format>/  a runnable program and its libraries
    module   modules/<sha>-<format>/    one rewritten library (or its sites)
    plan     plans/<identity>           a load-time patch plan of a library
    exec     exec/<identity>-<shim>     the shim's link from a file to its image
    shim     shims/<sha>/               the shim every program directory links
Names starting with "." are another process's work in progress and are never
listed nor removed.
"""
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .rewriter import cache
from .rewriter.layout import FORMAT

SECTIONS = ("programs", "modules", "plans", "exec", "shims")
KIND = {"programs": "program", "modules": "module", "plans": "plan", "exec": "exec", "shims": "shim"}
PLAN_MAGIC = b"FERRYPLAN\0"


@dataclass
class Entry:
    kind: str
    path: Path
    what: str  # the original file it serves
    bytes: int
    mtime: float
    problems: list = field(default_factory=list)  # why it can no longer be used

    def as_dict(self):
        return {"kind": self.kind, "path": str(self.path), "what": self.what,
                "bytes": self.bytes, "mtime": self.mtime, "problems": self.problems}


def _files(path):
    """(path, lstat) of every file under `path` (or `path` itself)."""
    if path.is_symlink() or not path.is_dir():
        yield path, path.lstat()
        return
    for d, _, names in os.walk(path):
        for n in names:
            p = Path(d, n)
            yield p, p.lstat()


def _bytes(path):
    """Bytes of the files under `path`, a file linked under two names once (a
    program directory links its libraries where ld.so looks first)."""
    return sum({(st.st_dev, st.st_ino): st.st_size for _, st in _files(path)}.values())


def _read_json(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _identity(path):
    try:
        return cache.exec_key(path)
    except OSError:
        return None


def _original_problem(path, sha):
    """Why the file an entry was made from no longer matches it, or None."""
    try:
        now = cache.sha256_file(path)
    except OSError:
        return f"{path} is gone"
    return None if now == sha else f"{path} has changed since"


def _format_problem(name, layout):
    if not name.endswith(f"-{FORMAT}") or layout != FORMAT:
        return f"made by another version of the rewriter (layout {layout or 'unknown'}, now {FORMAT})"
    return None


def _program(d, shim_shas):
    m = _read_json(d / "manifest.json")
    if not isinstance(m, dict):
        return Entry("program", d, "?", _bytes(d), d.stat().st_mtime, ["no readable manifest.json"])
    e = Entry("program", d, str(m.get("input", "?")), _bytes(d), d.stat().st_mtime)
    e.problems += filter(None, [_format_problem(d.name, m.get("layout"))])
    if shim_shas and m.get("shim", {}).get("sha256") not in shim_shas:
        e.problems.append("made with another build of the shim")
    for mod in m.get("modules", []):
        e.problems += filter(None, [_original_problem(mod.get("original", "?"), mod.get("sha256"))])
        if mod.get("rewritten") and mod.get("role") != "interpreter" \
                and not (d / mod["rewritten"]).exists():
            e.problems.append(f"{mod['rewritten']} is missing")
    return e


def _module(d):
    r = _read_json(d / "module.json")
    if not isinstance(r, dict):
        return Entry("module", d, "?", _bytes(d), d.stat().st_mtime, ["no readable module.json"])
    e = Entry("module", d, str(r.get("realpath") or r.get("original", "?")), _bytes(d),
              d.stat().st_mtime)
    e.problems += filter(None, [_format_problem(d.name, r.get("layout")),
                                _original_problem(e.what, r.get("sha256"))])
    if r.get("rewritten") and not r.get("origin_dependent") and not (d / r["rewritten"]).is_file():
        e.problems.append(f"{r['rewritten']} is missing")
    return e


def _plan(p, identities):
    if "@" in p.name:
        return _plan_text(p, identities)
    e = Entry("plan", p, identities.get(p.name, "?"), p.stat().st_size, p.stat().st_mtime)
    with open(p, "rb") as f:
        if f.read(len(PLAN_MAGIC)) != PLAN_MAGIC:
            e.problems.append("not a patch plan")
    if p.name not in identities:
        e.problems.append("no cached library has this identity any more (changed or gone)")
    return e


def _plan_text(p, identities):
    """What the shim made from a plan (shim/src/plantext.c): the library's
    patched text, `<plan>.<plan inode>-<plan mtime ns>@<distance>`, and its
    trampolines and the control block after them, the same name +
    `.tramp-ctl`; usable while that plan is (`.tramp`, the trampolines alone,
    is what an older shim kept, which this one does not use)."""
    plan_name, _, made_from = p.name.partition(".")
    e = Entry("plan", p, identities.get(plan_name, "?"), p.stat().st_size, p.stat().st_mtime)
    try:
        st = (p.parent / plan_name).stat()
        current = f"{st.st_ino}-{st.st_mtime_ns}@"
    except OSError:
        current = None
    if current is None or not made_from.startswith(current):
        e.problems.append("made from a plan that is gone or was replaced")
    elif p.name.endswith(".tramp"):
        e.problems.append("trampolines without their control block, as an older shim kept them")
    elif plan_name not in identities:
        e.problems.append("no cached library has this identity any more (changed or gone)")
    return e


def _exec(link, shim_ids):
    target = Path(os.readlink(link))
    e = Entry("exec", link, "?", 0, link.lstat().st_mtime)
    program = target if target.is_dir() else target.parent
    m = _read_json(program / "manifest.json")
    if not target.exists() or not isinstance(m, dict):
        e.problems.append(f"points to {target}, which is gone")
        return e
    e.what = str(m.get("input", "?"))
    identity, _, made_for = link.name.rpartition("-")
    if _identity(e.what) != identity:
        e.problems.append(f"{e.what} is not the file this link was made for (changed or gone)")
    if shim_ids and made_for not in shim_ids:
        e.problems.append("made for another build of the shim")
    return e


def _shim(d, shim_shas):
    """The copy of a shim that program directories link (cache.shim_copy):
    one of another build serves only programs made with that build."""
    e = Entry("shim", d, ", ".join(sorted(p.name for p in d.iterdir())) or "?", _bytes(d), d.stat().st_mtime)
    if shim_shas and d.name not in shim_shas:
        e.problems.append("another build of the shim")
    return e


def _visible(d):
    return sorted(p for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []


def entries(root=None):
    """Every entry of the cache at `root` (default: the one ferry uses)."""
    root = Path(root) if root is not None else cache.root()
    from .rewriter import shimlib, static_embed
    from .base.errors import FerryError
    # the shims of this build: libferry.so, and the static one that static
    # programs carry (an image or link is current if made with either)
    shim_shas, shim_ids = set(), set()
    try:
        for shim in (shimlib.path(), static_embed.path()):
            shim_shas.add(cache.sha256_file(shim))
            shim_ids.add(shimlib.build_id(shim))
    except (FerryError, OSError):
        pass
    out = [_program(d, shim_shas) for d in _visible(root / "programs")]
    modules = [_module(d) for d in _visible(root / "modules")]
    out += modules
    # a plan is named by the identity of the library it patches; one whose
    # library has no usable module record was made by another rewriter
    identities = {i: m.what for m in modules if not m.problems and (i := _identity(m.what))}
    # ... or the identity of another file with its bytes, given its plan
    identities.update({i: copy for m in modules if not m.problems
                       for copy in cache.plan_copies(m.path) if (i := _identity(copy))})
    out += [_plan(p, identities) for p in _visible(root / "plans")]
    out += [_exec(p, shim_ids) for p in _visible(root / "exec") if p.is_symlink()]
    out += [_shim(d, shim_shas) for d in _visible(root / "shims") if d.is_dir()]
    return out


def disk_usage(root=None):
    """{section: (entries, bytes on disk)}; a file linked into several entries
    (a library shared by a module and a program) counts once, in the first."""
    root = Path(root) if root is not None else cache.root()
    seen, usage = set(), {}
    for section in SECTIONS:
        n, size = 0, 0
        for top in _visible(root / section):
            n += 1
            for _, st in _files(top):
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    size += st.st_blocks * 512
        usage[section] = (n, size)
    return usage


def remove(entry):
    if entry.path.is_dir() and not entry.path.is_symlink():
        shutil.rmtree(entry.path)
    else:
        entry.path.unlink()


def prune(root=None, dry_run=False):
    """Remove every entry that can no longer be used; returns them."""
    gone = [e for e in entries(root) if e.problems]
    if not dry_run:
        for e in gone:
            remove(e)
    return gone


def clear(root=None):
    """Remove every entry; returns how many there were."""
    root = Path(root) if root is not None else cache.root()
    n = 0
    for section in SECTIONS:
        for top in _visible(root / section):
            remove(Entry(KIND[section], top, "", 0, 0))
            n += 1
    return n
