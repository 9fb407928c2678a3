"""`python -m ferry.gui.instrument_job COMMAND`: the GUI's Instrument step, in a process of
its own so that it can be cancelled. It does what `ferry run` does before starting a
program (`ferry.runner.prepare`: find the program as the shell would, rewrite it and its
libraries through the image cache) and reports as JSON lines on stdout:

    {"progress": "start", "name": null, "total": 3}     then "advance", "analyze", ...
    {"result": {"original": ..., "executable": ..., "enabled": true, "reason": null,
                "modules": [{"name", "role", "sites_total", "sites_patched", "rewritten"}]}}

A problem is one line "ferry: X: problem" on stderr and exit status 2, as from `ferry`.
"""
import json
import sys


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv):
    from ..base.errors import FerryError
    from ..runner import prepare
    if len(argv) != 1:
        print("usage: python -m ferry.gui.instrument_job COMMAND", file=sys.stderr)
        return 2

    def progress(stage, name=None, total=None):
        _emit({"progress": stage, "name": name, "total": total})

    try:
        p = prepare([argv[0]], progress=progress)
    except FerryError as e:
        print(f"ferry: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line, as the CLI does
        print(f"ferry: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    modules = [{k: m.get(k) for k in ("name", "role", "sites_total", "sites_patched", "rewritten")}
               for m in (p.manifest or {}).get("modules", [])]
    _emit({"result": {"original": p.original, "executable": p.executable, "enabled": p.enabled,
                      "reason": p.reason, "modules": modules}})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
