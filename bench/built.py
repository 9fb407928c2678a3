"""The programs a benchmark runs, brought up to date before it measures:
run by hand (`python bench/x.py`), a benchmark must not find its program
missing, nor measure one older than its source."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make(where, bench):
    """`make -s -C ROOT/where` (quick when nothing changed); on failure, make's
    output, then one line that says which benchmark could not start."""
    r = subprocess.run(["make", "-s", "-C", str(ROOT / where)], capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"bench/{bench}: make -C {where} failed (exit {r.returncode}); the output is above")


def with_carriers(profile, n, tmp):
    """A copy of `profile` (a file with one `carriers = N` line) asking for n
    carriers, in the directory tmp."""
    text, found = re.subn(r"(?m)^carriers\s*=\s*\d+", f"carriers = {n}", Path(profile).read_text())
    if found != 1:
        raise SystemExit(f"{profile}: no single `carriers = N` line to change")
    path = Path(tmp) / f"{Path(profile).stem}-{n}carriers.toml"
    path.write_text(text)
    return path
