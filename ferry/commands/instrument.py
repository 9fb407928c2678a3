"""`ferry instrument BINARY [-o DIR]`: rewrite a program and its libraries."""
import json
import time

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..console import console, err_console, percent
from ..rewriter.instrument import AlreadyRewritten, instrument


class InstrumentProgress:
    """What the rewriter is doing, as it does it. On a terminal (`bar`): a line per module
    being analyzed or rewritten with a bar over the bytes of code decoded (the long part
    of a large program), and a bar over the modules. With `lines` (-v without a terminal):
    one line per module when it is done, on stderr. The rewriter's progress protocol is
    `callback(stage, name, total=None)` (ferry.rewriter.instrument)."""

    def __init__(self, title, bar=False, lines=False):
        self.lines, self.title = lines, title
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                                 console=err_console, transient=True, disable=not bar)
        self.modules = self.progress.add_task(title, total=None, detail="")
        self.work = self.progress.add_task("", total=None, detail="", visible=False)
        self.module, self.how, self.started, self.whole = None, None, time.monotonic(), 0
        self.rewriting = False     # a "start": modules are analyzed, not served whole
        self.shown = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.shown:
            self.progress.stop()
        return False

    def _show(self):
        """The bars appear once there is work to watch: a program served from the cache
        drew them (and erased them) on the terminal before its own output at every run."""
        if not self.shown:
            self.shown = True
            self.progress.start()

    def _begin(self, name, doing, how):
        self.module, self.how, self.started, self.whole = name, how, time.monotonic(), 0
        self.progress.reset(self.work, total=None, description=f"{doing} {name}", detail="",
                            visible=True)

    def _line(self, name, text):
        if self.lines:
            click.echo(f"ferry: {name}: {text} ({time.monotonic() - self.started:.1f} s)", err=True)

    def __call__(self, stage, name=None, total=None):
        p = self.progress
        if stage in ("start", "analyze"):
            self._show()
        if stage == "start":
            self.rewriting = True
            p.update(self.modules, total=total, completed=0,
                     detail=f"0/{total} modules")
        elif stage in ("analyze", "cached"):
            if stage == "cached":
                self._begin(name, "from the cache:", "rewritten before: from the cache")
            else:
                self._begin(name, "analyze", "analyzed")
        elif stage == "sweep":
            self.whole = total
            p.update(self.work, description=f"analyze {name}: decoding code", total=total,
                     completed=0, detail=f"0/{_mb(total)}")
        elif stage == "swept":
            p.update(self.work, completed=total, detail=f"{_mb(total)}/{_mb(self.whole)}")
        elif stage == "sites":
            self.how = f"{total} syscall site{'s' * (total != 1)}"
            p.update(self.work, description=f"plan {name}: {self.how}", detail="")
        elif stage == "rewrite":
            p.update(self.work, description=f"rewrite {name}: {self.how}", total=None, detail="")
            self.how += ", rewritten"
        elif stage == "advance":
            task = p.tasks[self.modules]
            p.update(self.modules, advance=1,
                     detail=f"{int(task.completed) + 1}/{task.total} modules")
            if name == self.module:
                self._line(name, self.how)
            else:        # the dynamic loader, or the shim: never rewritten
                self.started = time.monotonic()
                self._line(name, "not rewritten")
            p.update(self.work, visible=False)
            self.module = None
        elif stage == "done":
            if self.shown:  # before the program runs: the terminal is the program's then
                p.stop()
                self.shown = False
            if not self.rewriting:
                self._line(name, "rewritten before: served from the cache")


def _mb(n):
    return f"{n / 1e6:.1f} MB"


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
        elif mod.get("note"):
            out = f"[dim]{mod['note']}[/]"
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
@click.option("-v", "--verbose", is_flag=True,
              help="Without a terminal, a line per module on stderr as it is done.")
def command(binary, out_dir, as_json, quiet, verbose):
    """Rewrite BINARY and every library it loads that makes system calls."""
    bar = not (as_json or quiet) and err_console.is_terminal
    with InstrumentProgress(f"instrument {binary}", bar=bar,
                            lines=verbose and not err_console.is_terminal) as progress:
        try:
            result = instrument(binary, out_dir, progress=progress)
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
