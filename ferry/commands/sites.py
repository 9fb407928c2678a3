"""`ferry sites BINARY`: every syscall site, its window, and whether it is patched."""
import json

import click
from rich.table import Table

from ..console import console, percent
from ..base.errors import FerryError


def sites_report(path):
    """Sites of one module as a JSON-ready dict (schema: docs/manifest.md)."""
    from ..rewriter import elfload, pe_kind
    if pe_kind.is_pe(_head(path)):
        from ..rewriter import pe_sites
        return pe_sites.sites_report(path)
    from ..rewriter.instrument import analyze_module
    from ..rewriter.manifest import site_to_dict
    try:
        return _sites_report(path, elfload, analyze_module, site_to_dict)
    except UnicodeDecodeError:
        raise FerryError(path, "corrupt ELF file: a name in it is not valid text") from None


def _head(path):
    """The first bytes of `path` (b"" if it cannot be read: the ELF path says why)."""
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except OSError:
        return b""


def _sites_report(path, elfload, analyze_module, site_to_dict):
    image = elfload.load(path)
    ctl = elfload.ferry_control_block(image)
    if ctl:
        raise FerryError(path, "already rewritten by Ferry: list the sites of the original file "
                               "(see manifest.json beside it)")
    cmap, sites = analyze_module(image)
    name = image.path.name
    patched = sum(s.patched for s in sites)
    return {
        "format": "elf",
        "file": str(path),
        "sha256": image.sha256,
        "pie": image.is_pie,
        "summary": {"sites": len(sites), "patched": patched, "unpatched": len(sites) - patched},
        "sites": [site_to_dict(s, name, cmap.read) for s in sites],
    }


@click.command("sites")
@click.argument("binary", type=click.Path(dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema: docs/manifest.md).")
def command(binary, as_json):
    """List every syscall site of BINARY with its planned patch window."""
    report = sites_report(binary)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    table = Table(title=f"syscall sites of {binary}", show_lines=False)
    for col in ("id", "address", "section", "function", "syscall", "window", "status"):
        table.add_column(col, overflow="fold")
    for s in report["sites"]:
        window = f"{s['window'][0]}-{s['window'][1]}" if s["window"] else "-"
        status = "patched" if s["status"] == "patched" else f"[red]not patched[/]: {s['reason']}"
        syscall = s["syscall"] or "?"
        table.add_row(s["id"], s["address"], s["section"], s["function"] or "?", syscall, window,
                      status)
    console.print(table)
    sm = report["summary"]
    console.print(f"{sm['sites']} sites, {sm['patched']} patched "
                  f"({percent(sm['patched'], sm['sites'])}), {sm['unpatched']} not patched")
