"""`ferry runs`: the runs recorded so far, newest first."""
import json
import shlex

import click
from rich.table import Table

from ..console import console


@click.command("runs")
@click.option("-n", "--limit", type=int, default=20, show_default=True, help="How many runs (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(limit, as_json):
    """List earlier runs from the run index."""
    from ..runindex import data_dir, runs
    rows = runs(limit or None)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    table = Table(title=f"runs ({data_dir() / 'runs.sqlite'})")
    for col in ("#", "start", "command", "profile", "exit", "seconds", "calls", "processes", "directory"):
        table.add_column(col, justify="right" if col in ("#", "seconds", "calls", "processes") else "left",
                         overflow="fold")
    for r in rows:
        exit_ = r["signal"] or ("" if r["exit_code"] is None else str(r["exit_code"]))
        where = r["dir"] if r["present"] else f"[dim]{r['dir']} (gone or replaced)[/]"
        table.add_row(str(r["id"]), r["start"] or "", shlex.join(r["command"]), r["profile"] or "",
                      exit_, f"{r['duration_s']:.3f}" if r["duration_s"] is not None else "",
                      "" if r["calls"] is None else str(r["calls"]),
                      "" if r["processes"] is None else str(r["processes"]), where)
    console.print(table)
