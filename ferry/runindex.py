"""The index of runs: a SQLite database in the user's data directory
($FERRY_DATA, else $XDG_DATA_HOME/ferry, else ~/.local/share/ferry)."""
import json
import os
import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dir TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT,
    start TEXT,
    end TEXT,
    duration_s REAL,
    exit_code INTEGER,
    signal TEXT,
    profile TEXT,
    mode TEXT,
    calls INTEGER,
    processes INTEGER
)
"""


def data_dir():
    env = os.environ.get("FERRY_DATA")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg if xdg else Path.home() / ".local" / "share") / "ferry"


def _connect():
    d = data_dir()
    d.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(d / "runs.sqlite", timeout=10)
    db.execute(SCHEMA)
    return db


def add(run_dir, info):
    """Index a finished run; its totals come from the run directory."""
    calls = processes = None
    try:
        from .rundata import load_run
        model = load_run(run_dir, reuse=True)
        calls, processes = model["totals"]["calls"], model["totals"]["processes"]
    except Exception:
        pass  # a damaged run is still indexed, without totals
    exit_ = info.get("exit") or {}
    with _connect() as db:
        db.execute("INSERT INTO runs (dir, command, cwd, start, end, duration_s, exit_code, signal, "
                   "profile, mode, calls, processes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                   (str(Path(run_dir).absolute()), json.dumps(info["command"]), info.get("cwd"),
                    info.get("start"), info.get("end"), info.get("duration_s"), exit_.get("code"),
                    exit_.get("signal"), info["profile"]["name"], info["profile"]["mode"], calls,
                    processes))


def remove(run_id):
    """Forget the indexed run `run_id` (its directory is left as it is)."""
    db = _connect()
    try:
        with db:
            db.execute("DELETE FROM runs WHERE id = ?", (int(run_id),))
    finally:
        db.close()


def runs(limit=None):
    """Indexed runs, newest first, as dicts (`present`: the directory still holds that run)."""
    db = _connect()
    try:
        db.row_factory = sqlite3.Row
        q = "SELECT * FROM runs ORDER BY id DESC" + (f" LIMIT {int(limit)}" if limit else "")
        rows = [dict(r) for r in db.execute(q)]
    finally:
        db.close()
    for r in rows:
        r["command"] = json.loads(r["command"])
        info = Path(r["dir"]) / "info.json"
        try:
            r["present"] = json.loads(info.read_text()).get("start") == r["start"]
        except (OSError, ValueError):
            r["present"] = False
    return rows
