"""Shared rich console (stdout) and small formatting helpers."""
from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def percent(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
