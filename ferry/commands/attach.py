"""`ferry attach PID` and `ferry detach PID`."""
import os
import time

import click

from ..console import err_console
from .run import profile_option


def _cmdline(pid):
    """The process's command line as it shows it now. A program that set its title
    (nginx, postgres, setproctitle) wrote it over its arguments and padded the rest of
    their area with NULs: those read as trailing empty arguments, and are dropped (so
    is a real trailing "" argument, which cannot be told apart)."""
    try:
        raw = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return [str(pid)]
    args = raw.split(b"\0")
    while args and not args[-1]:
        args.pop()
    return [a.decode("utf-8", "surrogateescape") for a in args] or [str(pid)]


@click.command("attach")
@profile_option
@click.option("-o", "--output", "out_dir", default="ferry.data", show_default=True,
              help="Run directory (the previous run there is kept as DIR.old).")
@click.argument("pid", type=int)
def attach_command(profile_name, out_dir, pid):
    """Enable the running process PID and record it until it exits or is detached."""
    from .. import runner
    from ..injector import attach
    from ..injector.environment import run_settings
    from ..profiles import load
    from ..rewriter.instrument import instrument
    from ..rewriter.manifest import write_json
    profile = load(profile_name)
    exe = os.path.realpath(f"/proc/{pid}/exe") if os.path.exists(f"/proc/{pid}") else None
    if exe is None:
        from ..base.errors import FerryError
        raise FerryError(pid, "no such process")
    result = instrument(exe)  # leaves the patch plans of its libraries in the cache
    out = runner.open_run_dir(out_dir, result.manifest, profile)
    started = time.monotonic()
    info = runner.new_info(_cmdline(pid), profile,
                           {"original": exe, "executable": exe, "enabled": True, "reason": None},
                           {}, pid=pid, attached=True)
    write_json(out / "info.json", info)
    env = run_settings(profile, out)
    attach.attach(pid, env["FERRY_SHIM"], env)
    from ..procfile import records_of
    if not records_of(out / "proc", pid):
        # The shim's constructor ran inside dlopen: its record exists by now, or never will.
        from ..base.errors import FerryError
        raise FerryError(pid, f"the shim is loaded but could not create its process file in "
                              f"{out}/proc (the process runs as uid {attach.real_uid(pid)}); "
                              "nothing is recorded")
    err_console.print(f"ferry: attached to {pid}; recording into {out} until it exits "
                      f"or `ferry detach {pid}`")
    try:
        while os.path.exists(f"/proc/{pid}") and not _detached(out, pid):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    runner.finish_info(info, started)
    write_json(out / "info.json", info)


def _detached(out, pid):
    from ..procfile import STATE_DETACHED, records_of
    return any(r.state == STATE_DETACHED for r in records_of(out / "proc", pid))


@click.command("detach")
@click.argument("pid", type=int)
def detach_command(pid):
    """Stop intercepting the calls of PID (attached with `ferry attach`)."""
    from ..injector import attach
    attach.detach(pid)
    err_console.print(f"ferry: detached from {pid}")
