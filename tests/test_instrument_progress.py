"""What `ferry instrument` and `ferry run` show while rewriting: the rewriter's progress
calls (modules, bytes of code decoded, sites found), and with -v and no terminal a line
per module on stderr. (The terminal's bars draw the same calls; see
ferry.commands.instrument.InstrumentProgress.)"""
import json
import re

from conftest import ferry, ferry_env

from ferry.rewriter.instrument import instrument

PYTHON = "/usr/bin/python3"


def in_cache(cache):
    """The environment of a `ferry` command that uses the image cache `cache`."""
    return ferry_env(FERRY_CACHE=cache)


def module_lines(stderr):
    """{module: what its line says} from the -v lines, which must be one per module."""
    found = re.findall(r"^ferry: (\S+): (.*) \(\d+\.\d s\)$", stderr, re.M)
    names = [n for n, _ in found]
    assert len(names) == len(set(names)), stderr
    return dict(found)


def test_verbose_says_a_line_per_module(tmp_path):
    cache = tmp_path / "cache"
    r = ferry("instrument", "-v", "--json", "-o", tmp_path / "out", PYTHON, env=in_cache(cache))
    assert r.returncode == 0, r.stderr
    modules = json.loads(r.stdout)["modules"]
    lines = module_lines(r.stderr)
    assert len(r.stderr.splitlines()) == len(modules) == len(lines)
    for m in modules:
        said = lines[m["name"]]
        if m["role"] == "interpreter":
            assert said == "not rewritten"
        else:
            assert said.startswith(f"{m['sites_total']} syscall site"), (m["name"], said)
            assert said.endswith(", rewritten") == bool(m["rewritten"]), (m["name"], said)
    libc = next(m for m in modules if m["name"].startswith("libc.so"))
    assert libc["sites_total"] > 100
    # again into another directory: the libraries come from the cache
    r = ferry("instrument", "-v", "-o", tmp_path / "out2", PYTHON, env=in_cache(cache))
    assert module_lines(r.stderr)[libc["name"]] == "rewritten before: from the cache"
    # again into the same one: served whole
    r = ferry("instrument", "-v", "-o", tmp_path / "out2", PYTHON, env=in_cache(cache))
    assert r.stderr.splitlines() == [next(line for line in r.stderr.splitlines())]
    assert "python3" in r.stderr and "served from the cache" in r.stderr


def test_without_verbose_and_without_a_terminal_nothing_is_said(tmp_path):
    r = ferry("instrument", "-o", tmp_path / "out", PYTHON, env=in_cache(tmp_path / "cache"))
    assert r.returncode == 0 and r.stderr == ""


def test_run_verbose_says_the_modules_before_the_programs_output(tmp_path):
    r = ferry("run", "-v", "-o", tmp_path / "run", "--", "/bin/sh", "-c", "echo out; echo err >&2",
              env=in_cache(tmp_path / "cache"))
    assert r.returncode == 0 and r.stdout == "out\n"
    lines = r.stderr.splitlines()
    assert lines[-1] == "err"
    said = module_lines("\n".join(lines[:-1]))
    assert said and all(k in said for k in ("sh", "libc.so.6"))
    r = ferry("run", "-o", tmp_path / "run2", "--", "/bin/sh", "-c", "echo err >&2",
              env=in_cache(tmp_path / "cache2"))
    assert r.stderr == "err\n"


def test_the_rewriter_reports_decoding_and_sites(tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    heard = []
    result = instrument(PYTHON, tmp_path / "out", progress=lambda stage, name, total=None:
                        heard.append((stage, name, total)))
    by_name = {m["name"]: m for m in result.manifest["modules"]}
    libc = next(n for n in by_name if n.startswith("libc.so"))
    mine = [(stage, total) for stage, name, total in heard if name == libc]
    stages = [s for s, _ in mine]
    assert stages[0] == "analyze" and stages[1] == "sweep" and "rewrite" in stages
    whole = mine[1][1]
    swept = [t for s, t in mine if s == "swept"]
    assert 1 <= len(swept) <= 51 and swept == sorted(swept) and swept[-1] == whole
    assert ("sites", by_name[libc]["sites_total"]) in mine
    assert stages.index("sites") > stages.index("sweep") and stages[-1] == "advance"
    assert [s for s, _, _ in heard].count("advance") == len(by_name)


def _terminal_output(argv, env):
    """Everything `argv` writes to a terminal (its stdin, stdout and stderr), read as it
    is written (a full terminal would stop the writer), and its status."""
    import os
    import subprocess
    master, slave = os.openpty()
    proc = subprocess.Popen([str(a) for a in argv], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer is gone and the terminal drained
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out, proc.wait(timeout=300)


def test_a_run_served_from_the_cache_draws_nothing_on_the_terminal(tmp_path):
    """On a terminal, the bars show what is being rewritten; a program whose image is in
    the cache drew them too (and erased them), before its own output at every run: a
    terminal's transcript, or a full-screen program's first screen, had them."""
    from conftest import FERRY
    env = {**in_cache(tmp_path / "cache"), "TERM": "xterm", "COLUMNS": "100"}
    first, code = _terminal_output([*FERRY, "run", "-o", tmp_path / "run1", "--", "/bin/true"], env)
    assert code == 0 and b"instrument" in first  # rewritten now: shown
    again, code = _terminal_output([*FERRY, "run", "-o", tmp_path / "run2", "--", "/bin/true"], env)
    assert (again, code) == (b"", 0)
