"""The recently used projects: a small JSON list in the user's config directory
($XDG_CONFIG_HOME/ferry/recent-projects.json, else ~/.config/ferry/...)."""
import json
import os
from pathlib import Path

from ..base import atomic

KEEP = 10


def _file():
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg if xdg else Path.home() / ".config") / "ferry" / "recent-projects.json"


def load():
    """Recent project paths, most recent first (ones that no longer exist left out)."""
    try:
        paths = json.loads(_file().read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(paths, list):
        return []
    return [p for p in paths if isinstance(p, str) and Path(p).is_file()]


def add(path):
    """Put `path` first in the list and keep the list short; never fails."""
    path = str(Path(path).absolute())
    paths = [path] + [p for p in load() if p != path]
    f = _file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(f, json.dumps(paths[:KEEP], indent=1) + "\n")
    except OSError:
        pass  # a list of recent projects is a convenience
    return paths[:KEEP]
