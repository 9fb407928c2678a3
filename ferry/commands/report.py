"""`ferry report [DIR]`: what a run did, as tables like `strace -c`, JSON, CSV, an HTML page
with plots, a Chrome/Perfetto trace, or the difference between two runs (docs/report.md)."""
import io
import os
from pathlib import Path

import click

FORMATS = ("json", "csv", "html", "chrome")


def _default_output(source, fmt):
    """Where --html/--chrome write without -o: into the run directory, or beside a model file."""
    p = Path(source)
    if p.is_dir():
        return p / ("report.html" if fmt == "html" else "trace.json")
    return p.with_name(p.stem + (".html" if fmt == "html" else ".trace.json"))


def _text_console(file=None):
    """The console for the text report: the terminal's width, or wide when redirected."""
    from rich.console import Console

    from ..console import console
    if file is not None:
        return Console(file=file, width=160, color_system=None, highlight=False)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=160, highlight=False)


def _print(out, parts):
    """Print the parts of the text report, a blank line before each table."""
    from rich.table import Table
    for part in parts:
        if isinstance(part, Table):
            out.print()
        out.print(part)


def _render(model, other, fmt, by, key, source, other_source):
    """The whole report, rendered before anything is written: text, or for the text report a
    list of rich renderables."""
    if other is not None:
        from ..report import diff
        d = diff.diff(other, model, by, label_a=other_source, label_b=source)
        if fmt == "json":
            import json
            return json.dumps(d, indent=1, ensure_ascii=False) + "\n"
        if fmt == "csv":
            from ..report.export import csv_text
            return csv_text(*diff.csv_rows(d))
        return diff.render(d)
    if fmt == "json":
        from ..report.export import to_json
        return to_json(model)
    if fmt == "csv":
        from ..report.export import to_csv
        return to_csv(model, by, key)
    if fmt == "html":
        from ..report.html import to_html
        return to_html(model, key)
    if fmt == "chrome":
        from ..report.chrome import to_chrome
        return to_chrome(model)
    from ..report import table
    return table.render(model, by, key)


@click.command("report")
@click.argument("run_dir", metavar="[DIR]", default="ferry.data", required=False)
@click.option("--by", type=click.Choice(["syscall", "site", "process", "thread", "pool", "carrier"]),
              default="syscall", show_default=True,
              help="One row per syscall, per site, per process, per thread, per aggregation "
                   "pool, or per carrier of fibers.")
@click.option("--sort", "sort_key", type=click.Choice(["time", "calls", "errors", "name", "avg"]),
              default="time", show_default=True,
              help="Order of the rows: most time, calls, errors, longest average call, or by name.")
@click.option("--json", "as_json", is_flag=True, help="The run model as JSON (docs/run.md).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV, one row per --by entry (docs/report.md).")
@click.option("--html", "as_html", is_flag=True,
              help="A self-contained HTML page with plots (default DIR/report.html).")
@click.option("--chrome", "as_chrome", is_flag=True,
              help="A trace for chrome://tracing and Perfetto (default DIR/trace.json).")
@click.option("--diff", "other_dir", metavar="OTHER_DIR", default=None,
              help="Compare with another run: A = OTHER_DIR, B = DIR, delta = B - A.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write the report to FILE (whole or not at all) instead of the default.")
def command(run_dir, by, sort_key, as_json, as_csv, as_html, as_chrome, other_dir, output):
    """Report what the run in DIR (default ferry.data) did: a table like `strace -c` of the
    system calls, then the hottest sites. DIR may also be a run model JSON file, or a bare
    proc/ directory of process files."""
    chosen = [f for f, on in zip(FORMATS, (as_json, as_csv, as_html, as_chrome)) if on]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one of --{' --'.join(FORMATS)}, not "
                               f"--{' and --'.join(chosen)}")
    fmt = chosen[0] if chosen else None
    if other_dir is not None:
        if fmt in ("html", "chrome"):
            raise click.UsageError(f"--diff gives a table, --json or --csv, not --{fmt}")
        if by in ("process", "thread", "pool", "carrier"):
            raise click.UsageError(f"--diff compares by syscall or by site, not by {by}")

    from ..report import source
    model = source.load(run_dir)
    other = source.load(other_dir) if other_dir is not None else None
    from ..report.output import check_target, write_atomic
    if output is not None:
        check_target(output)
    elif fmt in ("html", "chrome"):
        check_target(_default_output(run_dir, fmt))
    report = _render(model, other, fmt, by, sort_key, run_dir, other_dir)

    if isinstance(report, list):           # the rich text report
        if output is None:
            _print(_text_console(), report)
            return
        buf = io.StringIO()
        _print(_text_console(buf), report)
        report = buf.getvalue()
    elif output is None and fmt in ("json", "csv"):
        click.echo(report, nl=False)
        return
    target = output if output is not None else _default_output(run_dir, fmt)
    write_atomic(target, report)          # whole, or not at all
    if fmt == "chrome" and not model.get("events"):
        click.echo("ferry: note: the run recorded no individual calls (no event trace): "
                   "the trace holds only the process names", err=True)
    how = {"html": "open it in a web browser",
           "chrome": "open it in ui.perfetto.dev or chrome://tracing"}.get(fmt)
    click.echo(f"report written to {target}" + (f"; {how}" if how else ""))
