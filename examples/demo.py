"""`make demo`: the instrument -> run -> report loop on the bundled example.

The example (examples/demo.c) is built like any closed-source program. Ferry
rewrites it and its libc, runs it with the shim in trace mode, and reports
what it intercepted; the numbers are checked against what the program was
written to do (1000 getppid calls, one thread, one fork).
"""
import subprocess
import sys
from pathlib import Path

from rich.console import Console

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from ferry.rundata import load_run  # noqa: E402

console = Console(highlight=False)
FERRY = str(Path(sys.executable).parent / "ferry")


def step(title, *args, **kw):
    console.rule(f"[bold]{title}")
    return subprocess.run([FERRY, *map(str, args)], **kw)


def main():
    program = HERE / "build" / "demo"
    run_dir = HERE / "build" / "demo.data"
    step(f"ferry instrument {program.relative_to(ROOT)}", "instrument", program, check=True)
    original = subprocess.run([str(program)], capture_output=True, text=True)
    run = step(f"ferry run -o {run_dir.relative_to(ROOT)} -- {program.relative_to(ROOT)}",
               "run", "-o", run_dir, "--", program, capture_output=True, text=True)
    console.print(run.stdout, end="")
    same = (original.stdout, original.returncode) == (run.stdout, run.returncode)
    console.print(f"output and exit status identical to the original program: "
                  f"{'[green]yes[/]' if same else '[red]NO[/]'}")
    step(f"ferry report {run_dir.relative_to(ROOT)}", "report", run_dir, check=True)
    step("ferry report --html", "report", "--html", run_dir, check=True)
    model = load_run(run_dir)
    parent = model["processes"][0]
    getppid = next(s["calls"] for s in model["syscalls"] if s["name"] == "getppid")
    console.rule("[bold]checked")
    console.print(f"processes recorded: {len(model['processes'])} (the program and its fork child)")
    console.print(f"getppid calls intercepted: {getppid} (the program makes 1000, its child 1)")
    console.print(f"threads of the parent: {parent['threads']} (main and one worker)")
    ok = same and getppid == 1001 and len(model["processes"]) == 2 and parent["threads"] == 2
    console.print("[green]demo ok[/]" if ok else "[red]demo: something differs[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
