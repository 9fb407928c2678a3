"""`ferry cache`: the image cache (FX!32's database of translated images) as a
user sees it: list, size, verify, prune, clear."""
import json
import time

import click
from rich import box
from rich.table import Table
from rich.text import Text

from .. import cachedb
from ..console import console
from ..rewriter import cache as imagecache


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _state(e):
    return "; ".join(e.problems) if e.problems else "ok"


def _made(e):
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime))


def _show_entries(entries, title):
    """A table on a terminal; otherwise one whole line per entry, the file it
    serves last (as `ferry runs` does), so nothing folds under grep."""
    if console.is_terminal:
        console.print(_entry_table(entries, title))
        return
    click.echo(title)
    for e in entries:
        size = _size(e.bytes) if e.kind != "exec" else "-"
        click.echo(f"{e.kind:7} {size:>9}  {_made(e)}  {e.what}  [{_state(e)}]")


def _entry_table(entries, title):
    table = Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
    for col in ("kind", "for", "size", "made", "state"):
        table.add_column(col, justify="right" if col == "size" else "left", overflow="fold",
                         no_wrap=col == "size")
    for e in entries:
        state = Text(_state(e), style="yellow" if e.problems else "green")
        table.add_row(e.kind, e.what, _size(e.bytes) if e.kind != "exec" else "", _made(e), state)
    return table


@click.group("cache")
def command():
    """The image cache: rewritten programs and libraries, patch plans, and the
    links the shim follows at exec.  Its root is $FERRY_CACHE, else
    $XDG_CACHE_HOME/ferry, else ~/.cache/ferry."""


@command.command("list")
@click.option("--json", "as_json", is_flag=True, help="The entries as JSON.")
def list_command(as_json):
    """Every entry, what it was made from, and whether it can still be used."""
    entries = cachedb.entries()
    if as_json:
        click.echo(json.dumps([e.as_dict() for e in entries], indent=1))
    elif not entries:
        console.print(f"the image cache {imagecache.root()} is empty")
    else:
        _show_entries(entries, f"image cache {imagecache.root()}")


@command.command("size")
@click.option("--json", "as_json", is_flag=True, help="The sizes as JSON.")
def size_command(as_json):
    """Disk space per part of the cache (a file shared by two entries counts once)."""
    usage = cachedb.disk_usage()
    if as_json:
        click.echo(json.dumps({s: {"entries": n, "bytes": b} for s, (n, b) in usage.items()}))
        return
    table = Table(title=Text(f"image cache {imagecache.root()}"), title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("part", "entries", "on disk"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for section, (n, b) in usage.items():
        table.add_row(section, str(n), _size(b))
    table.add_row("total", str(sum(n for n, _ in usage.values())),
                  _size(sum(b for _, b in usage.values())), style="bold")
    console.print(table)


@command.command("verify")
def verify_command():
    """Check every entry against the files it was made from; exit 1 if any
    can no longer be used (`ferry cache prune` removes those)."""
    entries = cachedb.entries()
    bad = [e for e in entries if e.problems]
    if bad:
        _show_entries(bad, f"{len(bad)} of {len(entries)} entries can no longer be used")
        raise SystemExit(1)
    console.print(f"{len(entries)} entries, all usable")


@command.command("prune")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def prune_command(dry_run):
    """Remove the entries that can no longer be used: made by another version
    of Ferry, or from files that have changed or are gone."""
    gone = cachedb.prune(dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for e in gone:
        console.print(f"{verb} {e.kind} {e.path.name} ({e.what}): {'; '.join(e.problems)}")
    console.print(f"{verb} {len(gone)} entries")


@command.command("clear")
@click.confirmation_option(prompt="Remove every entry of the image cache?")
def clear_command():
    """Remove every entry; programs are rewritten again on their next run."""
    n = cachedb.clear()
    console.print(f"removed {n} entries from {imagecache.root()}")
