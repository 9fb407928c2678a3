"""`ferry instrument BINARY [-o DIR]`: rewrite a program and its libraries."""
import json

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..console import console, err_console, percent
from ..rewriter.instrument import AlreadyRewritten, instrument


def _progress_callback(progress, task):
    def update(stage, name, total=None):
        if stage == "start":
            progress.update(task, total=total, completed=0)
        elif stage == "advance":
            progress.advance(task)
        elif stage in ("analyze", "rewrite", "cached"):
            progress.update(task, description=f"{stage} {name}")
    return update


def summary_table(result):
    m = result.manifest
    table = Table(title=f"ferry instrument {m['input']}")
    for col in ("module", "role", "sites", "patched", "", "output"):
        table.add_column(col, justify="right" if col in ("sites", "patched", "") else "left")
    for mod in m["modules"]:
        total, patched = mod.get("sites_total"), mod.get("sites_patched")
        if mod["role"] == "interpreter":
            out = "[dim]not rewritten (runs before the shim)[/]"
        elif mod.get("rewritten"):
            out = mod["rewritten"]
        else:
            out = "[dim]unchanged (no syscall sites)[/]"
        table.add_row(mod["name"], mod["role"], "-" if total is None else str(total),
                      "-" if patched is None else str(patched),
                      percent(patched or 0, total) if total else "", out)
    return table


@click.command("instrument")
@click.argument("binary", type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=str), default=None,
              help="Directory to write into (default: the image cache).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the path of the rewritten program.")
def command(binary, out_dir, as_json, quiet):
    """Rewrite BINARY and every library it loads that makes system calls."""
    show = not (as_json or quiet) and err_console.is_terminal
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err_console, transient=True, disable=not show) as progress:
        task = progress.add_task(f"instrument {binary}", total=None)
        try:
            result = instrument(binary, out_dir, progress=_progress_callback(progress, task))
        except AlreadyRewritten as e:
            # Idempotent: a rewritten file is recognized and left as it is.
            err_console.print(f"ferry: {e}")
            return
    target = str(result.entry or result.out_dir)
    if as_json:
        click.echo(json.dumps({
            "out_dir": str(result.out_dir), "entry": str(result.entry) if result.entry else None,
            "from_cache": result.from_cache, "seconds": round(result.seconds, 3),
            "modules": [{k: v for k, v in mod.items() if k != "sites"} for mod in result.manifest["modules"]],
        }, indent=1))
        return
    if quiet:
        click.echo(target)
        return
    console.print(summary_table(result))
    how = "from the cache" if result.from_cache else "rewritten"
    console.print(f"{how} in {result.seconds:.2f}s; run: {target}")
