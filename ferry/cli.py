"""The `ferry` command line: one module per subcommand in ferry/commands/."""
import os
import sys
import traceback

import click

from . import __version__
from .commands import attach, cache, doctor, gui, instrument, live, profile, report, run, runs, sites
from .base.errors import FerryError


class FerryGroup(click.Group):
    """Turns every FerryError into one line on stderr and exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FerryError as e:
            click.echo(f"ferry: {e}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt:
            click.echo("ferry: interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as e:  # a bug in Ferry: still one line unless asked
            if os.environ.get("FERRY_DEBUG"):
                traceback.print_exc()
            click.echo(f"ferry: internal error: {type(e).__name__}: {e} "
                       "(set FERRY_DEBUG=1 for the traceback)", err=True)
            ctx.exit(3)


@click.group(cls=FerryGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ferry")
def cli():
    """Rewrite the syscall sites of compiled programs so they run through Ferry's shim."""


cli.add_command(sites.command)
cli.add_command(instrument.command)
cli.add_command(run.command)
cli.add_command(runs.command)
cli.add_command(live.command)
cli.add_command(report.command)
cli.add_command(profile.command)
cli.add_command(attach.attach_command)
cli.add_command(attach.detach_command)
cli.add_command(gui.command)
cli.add_command(doctor.command)
cli.add_command(cache.command)


def main():
    sys.exit(cli.main(prog_name="ferry", standalone_mode=True))
