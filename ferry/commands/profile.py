"""`ferry profile list | show NAME|FILE | check FILE...`: the profiles the shim runs with."""
import click
from rich.table import Table
from rich.text import Text

from ..console import console
from ..profiles import given_keys, load, read_text, resolve, shipped


@click.group("profile")
def command():
    """List, show and check profiles (TOML files saying what the shim does)."""


@command.command("list")
def list_command():
    """List the shipped profiles."""
    table = Table(title="shipped profiles")
    for col in ("name", "mode", "description", "path"):
        table.add_column(col, overflow="fold")
    for p in shipped():
        table.add_row(Text(p.name), Text(p.mode), Text(p.description), Text(str(p.path)))
    console.print(table)


@command.command("show")
@click.argument("profile", metavar="NAME|FILE")
def show_command(profile):
    """Print a profile's TOML text and the settings in effect.

    A bare NAME is a shipped profile (`ferry profile list`); anything with a /
    or ending in .toml is a file."""
    path = resolve(profile)
    p = load(path)
    text = read_text(path)
    given = given_keys(text)
    click.echo(f"# {path}")
    click.echo(text, nl=not text.endswith("\n"))
    table = Table(title=f"effective settings of {p.name} (mode {p.mode})", title_justify="left")
    for col in ("key", "value", ""):
        table.add_column(col, overflow="fold")
    for key, value, used in p.settings():
        notes = [] if key in given or key.rsplit(".", 1)[0] in given else ["default"]
        if not used:
            notes.append(f"not used in mode {p.mode}")
        table.add_row(Text(key), Text(value), Text(", ".join(notes), style="dim"))
    console.print(table)
    console.print(Text("shim environment: " +
                       " ".join(f"{k}={v}" for k, v in p.shim_env().items())))


@command.command("check")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
def check_command(files):
    """Validate profile files; stop at the first invalid one (exit status 2)."""
    for f in files:
        p = load(f)
        click.echo(f"{f}: ok (mode {p.mode})")
