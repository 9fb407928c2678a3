"""Lay the source tree out as the installed package, with symbolic links, so
that mypy (which cannot follow the editable install's import hook) sees
`ferry.rewriter` where setup.cfg's package_dir puts it.

    python tools/package_tree.py OUT     ->  OUT/ferry/{cli.py,..., rewriter/, gui/, ...}
"""
import configparser
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_dirs():
    """{package: source folder} from setup.cfg, e.g. {'ferry.rewriter': 'rewriter'}."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    pairs = (line.split("=") for line in cfg["options"]["package_dir"].strip().splitlines())
    return {k.strip(): v.strip() for k, v in pairs}


def build(out):
    out = Path(out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    dirs = package_dirs()
    for package, folder in sorted(dirs.items()):
        target = out.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted((ROOT / folder).iterdir()):
            if item.suffix == ".py" or item.name == "py.typed":
                os.symlink(item, target / item.name)


if __name__ == "__main__":
    build(sys.argv[1])
