"""`ferry run [--profile NAME|FILE] [-o DIR] -- COMMAND ARGS...`"""
import click

from ..console import err_console


def profile_option(f):
    return click.option("-p", "--profile", "profile_name", default="trace", show_default=True,
                        help="A shipped profile name or a profile file (see `ferry profile list`).")(f)


def learn_after(out_dir, verbose=False):
    """After the run: rewrite what ran without the shim, and say so (on a
    terminal, or when asked: the program's stderr stays its own)."""
    import os
    from ..runner import learn
    done = learn(out_dir)
    if done and (verbose or err_console.is_terminal):
        names = ", ".join(os.path.basename(p) for p in done)
        err_console.print(f"ferry: rewrote {len(done)} program(s) that ran without the shim ({names}); "
                          "the next run enables them")


def run_with_progress(argv, profile_name, out_dir, stage=True):
    """Load the profile, instrument showing what is rewritten, run; returns (info, returncode).
    On a terminal: the modules being analyzed and rewritten, with bars; with -v and no
    terminal: a line per module on stderr."""
    from ..profiles import load
    from ..runner import run
    from .instrument import InstrumentProgress
    profile = load(profile_name)
    # -v is the command's option; read from its context so that its signature stays as is
    ctx = click.get_current_context(silent=True)
    verbose = bool(ctx and ctx.params.get("verbose"))
    show = err_console.is_terminal
    with InstrumentProgress(f"instrument {argv[0]}", bar=show, lines=verbose and not show) as update:
        info, returncode = run(argv, profile, out_dir, progress=update, stage=stage)
    if profile.mode == "aggregate":
        _say_if_engine_unused(profile, out_dir, info)
    return info, returncode


def _say_if_engine_unused(profile, out_dir, info):
    """After the program's own output: one line when an aggregating profile aggregated
    nothing (no process made a group), so that nobody reads its counts as aggregated."""
    from ..aggdata import any_group
    from ..report.aggregation import ran_under_wine, unused_text
    if not any_group(out_dir):
        text = unused_text(profile.name, profile.agg_threads == "fibers", windows=ran_under_wine(info))
        click.echo(f"ferry: note: {text}", err=True)


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@profile_option
@click.option("-o", "--output", "out_dir", default="ferry.data", show_default=True,
              help="Run directory (the previous run there is kept as DIR.old).")
@click.option("--learn/--no-learn", default=True, show_default=True,
              help="After the run, rewrite the programs that ran without the shim.")
@click.option("--stage/--no-stage", default=True, show_default=True,
              help="Keep the process records in memory (a tmpfs) while the program runs and "
                   "move them into DIR when it ends: each process starts faster.  --no-stage "
                   "writes them into DIR directly (a trace larger than the memory free).")
@click.option("-v", "--verbose", is_flag=True, help="Say what was rewritten after the run.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def command(profile_name, out_dir, learn, stage, verbose, command):
    """Run COMMAND with the shim and record a run directory.

    COMMAND's stdin, stdout and stderr are its own; its exit status, or the
    signal that killed it, becomes ferry's."""
    from ..runner import exit_like
    info, returncode = run_with_progress(list(command), profile_name, out_dir, stage)
    program = info.get("program") or {}
    if verbose or err_console.is_terminal:
        if program.get("note"):
            err_console.print(f"ferry: {program['note']}")
        if program.get("enabled") is False:
            # else the run looks empty: say it at once, not only in `ferry report`
            err_console.print(f"ferry: {program.get('original')} ran without the shim: "
                              f"{program.get('reason') or 'reason unknown'}; nothing of it was recorded")
    if learn:
        learn_after(out_dir, verbose)
    exit_like(returncode)
