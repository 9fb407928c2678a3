"""`make demo`: instrument the bundled example, run it, show what was intercepted.

The example (examples/demo.c) is built like any closed-source program.  Ferry
rewrites it and its libc into a directory, the rewritten program runs from
there by itself, and the shim's counts are shown next to what the program was
written to do (1000 getppid calls, one fork, one thread).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from rewriter.syscall_table import name_of  # noqa: E402

console = Console(highlight=False)
FERRY = [str(Path(sys.executable).parent / "ferry")]


def main():
    program = HERE / "build" / "demo"
    out = HERE / "build" / "demo.ferry"
    console.rule(f"ferry instrument {program.relative_to(ROOT)}")
    subprocess.run(FERRY + ["instrument", str(program), "-o", str(out)], check=True)

    console.rule("run the original and the rewritten program")
    original = subprocess.run([str(program)], capture_output=True, text=True)
    with tempfile.TemporaryDirectory() as stats_dir:
        env = dict(os.environ, FERRY_STATS=os.path.join(stats_dir, "stats.%p.json"))
        rewritten = subprocess.run([str(out / "demo")], capture_output=True, text=True, env=env)
        stats = [json.loads(p.read_text()) for p in sorted(Path(stats_dir).glob("stats.*.json"))]
    console.print(rewritten.stdout, end="")
    same = (original.stdout, original.returncode) == (rewritten.stdout, rewritten.returncode)
    console.print(f"output and exit status identical to the original: "
                  f"{'[green]yes[/]' if same else '[red]NO[/]'}")

    console.rule("what the shim intercepted")
    first = min(s["pid"] for s in stats)
    stats.sort(key=lambda s: (s["pid"] != first, s["pid"]))
    table = Table()
    table.add_column("syscall")
    for s in stats:
        table.add_column("parent" if s is stats[0] else f"child {s['pid']}", justify="right")
    nrs = sorted({int(nr) for s in stats for nr in s["calls"]},
                 key=lambda nr: -max(s["calls"].get(str(nr), 0) for s in stats))
    for nr in nrs:
        table.add_row(name_of(nr), *[str(s["calls"].get(str(nr), "")) for s in stats])
    table.add_row("[bold]total[/]", *[f"[bold]{sum(s['calls'].values())}[/]" for s in stats])
    console.print(table)
    getppid = stats[0]["calls"].get("110", 0)
    console.print(f"getppid intercepted in the parent: {getppid} (the program makes 1000)")
    console.print("Calls the dynamic loader makes before the shim starts are not intercepted.")
    return 0 if same and getppid == 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
