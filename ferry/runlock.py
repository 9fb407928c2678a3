"""Who owns a run directory: the `ferry run` recording into it holds an
exclusive flock on the directory for as long as the program runs.

A second run into the same directory would otherwise rotate the first one
away while its processes still write into the path, mixing two runs.  The
lock also tells a run that is still going on from one whose `ferry run` was
killed (info.json still says "running", nobody holds the lock): cut off.
"""
import fcntl
import json
import os

from .base.errors import FerryError


def hold(run_dir):
    """Take the run's lock; returns the descriptor to keep open (close-on-exec,
    so the program never inherits it)."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FerryError(run_dir, "another `ferry run` is recording into this directory "
                                  "(choose another with -o)") from None
    return fd


def release(fd):
    os.close(fd)


def is_live(run_dir):
    """Whether a `ferry run` is recording into `run_dir` right now."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def refuse_if_live(run_dir):
    if is_live(run_dir):
        pid = None
        try:
            pid = json.loads((run_dir / "info.json").read_text()).get("pid")
        except (OSError, ValueError):
            pass
        who = f" (program pid {pid})" if pid else ""
        raise FerryError(run_dir, f"a run is still recording into this directory{who}; "
                                  "not replacing it (choose another with -o)")


def cut_off(run_dir, info):
    """Whether the run in `run_dir` was cut off: never finished, and nobody
    is recording into it any more."""
    return info.get("state") == "running" and not is_live(run_dir)
