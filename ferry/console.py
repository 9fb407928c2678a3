"""Shared rich console (stdout) and small formatting helpers."""
from rich.console import Console

# soft_wrap: a message is one line however long (a path in it, a pipe's
# 80 columns), for the terminal to fold and for scripts to match; tables
# still fit the width
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def percent(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"
