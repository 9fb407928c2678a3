"""`ferry runs`: the runs recorded so far, newest first."""
import json
import shlex

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..console import console

COLUMNS = ("#", "start", "command", "profile", "exit", "seconds", "calls", "processes", "directory")
NUMERIC = ("#", "seconds", "calls", "processes")
# Without a terminal: one line per run, the command last (it is the long one), as `ls -l`
# or `ps` print when piped: nothing folds, and `grep`/`awk` see whole runs.
LINE_COLUMNS = ("#", "start", "profile", "exit", "seconds", "calls", "processes", "directory",
                "command")


def _cells(r):
    """{column: text} of one indexed run."""
    return {
        "#": str(r["id"]), "start": r["start"] or "", "command": shlex.join(r["command"]),
        "profile": r["profile"] or "",
        "exit": r["signal"] or ("" if r["exit_code"] is None else str(r["exit_code"])),
        "seconds": f"{r['duration_s']:.3f}" if r["duration_s"] is not None else "",
        "calls": "" if r["calls"] is None else str(r["calls"]),
        "processes": "" if r["processes"] is None else str(r["processes"]),
        "directory": r["dir"] if r["present"] else f"{r['dir']} (gone or replaced)",
    }


def lines(rows):
    """The runs as text lines, a header first, columns aligned; an empty cell is '-'."""
    table = [dict(zip(LINE_COLUMNS, LINE_COLUMNS))]
    table += [{k: v or "-" for k, v in _cells(r).items()} for r in rows]
    width = {c: max(len(t[c]) for t in table) for c in LINE_COLUMNS[:-1]}
    out = []
    for t in table:
        fields = [t[c].rjust(width[c]) if c in NUMERIC else t[c].ljust(width[c])
                  for c in LINE_COLUMNS[:-1]]
        out.append(" ".join(fields + [t["command"]]))
    return out


def _table(rows, title):
    table = Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, collapse_padding=True)
    for col in COLUMNS:
        # numbers never fold (a number cut over lines misreads); text does
        table.add_column(col, justify="right" if col in NUMERIC else "left",
                         overflow="fold", no_wrap=col in NUMERIC)
    for r in rows:
        cells = _cells(r)
        table.add_row(*(Text(cells[c], style="dim" if c == "directory" and not r["present"] else "")
                        for c in COLUMNS))
    return table


@click.command("runs")
@click.option("-n", "--limit", type=int, default=20, show_default=True, help="How many runs (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(limit, as_json):
    """List earlier runs from the run index (a table on a terminal; otherwise a line per run)."""
    from ..runindex import data_dir, runs
    rows = runs(limit or None)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    if not console.is_terminal:
        for line in lines(rows):
            click.echo(line)
        return
    console.print(_table(rows, f"runs ({data_dir() / 'runs.sqlite'})"))
