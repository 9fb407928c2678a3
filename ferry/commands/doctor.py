"""`ferry doctor`: what this machine supports, what each part enables, and how
to get what is missing.  Always exits 0: it reports, it does not judge."""
import json

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .. import machine
from ..console import console

STYLE = {machine.OK: "green", machine.LIMITED: "yellow", machine.MISSING: "red"}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="The checks as JSON.")
def command(as_json):
    """Check what this machine supports: kernel, io_uring, Syscall User Dispatch,
    FSGSBASE, ptrace scope, wine, the image cache and the shim."""
    checks = machine.checks()
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in checks], indent=1))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("check", no_wrap=True)
    table.add_column("ok", no_wrap=True)
    table.add_column("found, what it enables, how to fix", overflow="fold")
    for c in checks:
        detail = Text(c.found)
        detail.append(f"\nenables: {c.enables}", style="dim")
        if c.fix:
            detail.append(f"\nto fix: {c.fix}", style=STYLE[c.status])
        table.add_row(c.name, Text(c.status, style=STYLE[c.status]), detail)
    console.print(table)
