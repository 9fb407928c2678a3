"""`ferry live [--profile NAME|FILE] [-o DIR] -- COMMAND ARGS...`: run, then report."""
import click

from ..console import err_console
from .run import learn_after, profile_option, run_with_progress


@click.command("live", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@profile_option
@click.option("-o", "--output", "out_dir", default="ferry.data", show_default=True,
              help="Run directory (the previous run there is kept as DIR.old).")
@click.option("--by", type=click.Choice(["syscall", "site", "process"]), default="syscall",
              show_default=True, help="What the report's table is about.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def command(ctx, profile_name, out_dir, by, command):
    """Run COMMAND with the shim, then print the report of the run.

    The report goes to stderr so that COMMAND's own output stays as it was;
    the exit status is COMMAND's."""
    from ..runner import exit_like
    from . import report
    info, returncode = run_with_progress(list(command), profile_name, out_dir)
    err_console.rule(f"ferry report {out_dir}")
    with _stdout_to_stderr():
        ctx.invoke(report.command, run_dir=out_dir, by=by)
    learn_after(out_dir)
    exit_like(returncode)


class _stdout_to_stderr:
    def __enter__(self):
        import os
        import sys
        sys.stdout.flush()
        self.saved = os.dup(1)
        os.dup2(2, 1)
        return self

    def __exit__(self, *exc):
        import os
        import sys
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)
