"""`ferry cache`: list, size, verify, prune and clear a real image cache.

Each test fills its own cache by running a copy of a real program under
ferry, then changes the world the way a user's machine changes (the program
is rebuilt, Ferry is upgraded) and checks that the cache says so, and that
prune and clear leave a cache ferry still runs from."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ferry


@pytest.fixture
def filled(tmp_path):
    """(env, program): a private cache holding the image of a copy of `true`."""
    env = dict(os.environ, FERRY_CACHE=str(tmp_path / "cache"))
    program = tmp_path / "mytrue"
    shutil.copy2("/usr/bin/true", program)
    ferry("run", "-o", tmp_path / "run", "--", program, env=env, check=True)
    return env, program


def cache(env, *args, check=True):
    return ferry("cache", *args, env=env, check=check)


def listed(env):
    return json.loads(cache(env, "list", "--json").stdout)


def test_list_names_every_part_of_a_run(filled):
    env, program = filled
    entries = listed(env)
    kinds = {(e["kind"], e["what"]) for e in entries}
    assert ("program", str(program)) in kinds and ("exec", str(program)) in kinds
    libc = os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6")
    assert ("module", libc) in kinds and ("plan", libc) in kinds
    assert all(not e["problems"] for e in entries), entries
    assert cache(env, "verify").returncode == 0
    assert str(program) in cache(env, "list").stdout


def test_text_patched_at_load_is_part_of_the_cache(filled, tmp_path):
    # a program started by a shell without rewriting it: libc is patched at
    # load time, from a copy of its text and trampolines the shim keeps
    env, _ = filled
    fresh = tmp_path / "fresh"
    shutil.copy2("/usr/bin/true", fresh)
    ferry("run", "--no-learn", "-o", tmp_path / "run2", "--", "sh", "-c", f"{fresh}; :", env=env, check=True)
    plans = [e for e in listed(env) if e["kind"] == "plan"]
    assert any(e["path"].endswith(".tramp-ctl") for e in plans), plans
    assert all(not e["problems"] for e in plans), plans
    assert cache(env, "verify").returncode == 0
    # what an older shim kept, the trampolines alone, is no use to this one
    kept = next(e["path"] for e in plans if e["path"].endswith(".tramp-ctl"))
    older = kept[:-len("-ctl")]
    shutil.copy2(kept, older)
    assert [e["problems"] for e in listed(env) if e["path"] == older] != [[]]
    os.unlink(older)
    plan = next(e["path"] for e in plans if "@" not in os.path.basename(e["path"]))
    os.utime(plan)  # a plan made again: what was made from the old one is stale
    stale = [e for e in listed(env) if e["kind"] == "plan" and e["problems"]]
    assert len(stale) == len(plans) - 1 and all("@" in e["path"] for e in stale), stale


def test_size_counts_the_entries_listed(filled):
    env, _ = filled
    usage = json.loads(cache(env, "size", "--json").stdout)
    entries = listed(env)
    for section, kind in (("programs", "program"), ("modules", "module"), ("plans", "plan"),
                          ("exec", "exec"), ("shims", "shim")):
        assert usage[section]["entries"] == sum(e["kind"] == kind for e in entries)
    du = subprocess.run(["du", "-s", "-B1", env["FERRY_CACHE"]], capture_output=True, text=True,
                        check=True)
    # du also counts the directories themselves; the files are most of it
    assert 0 < sum(u["bytes"] for u in usage.values()) <= int(du.stdout.split()[0])
    assert "total" in cache(env, "size").stdout


def test_every_program_links_the_caches_one_copy_of_the_shim(filled, tmp_path):
    # the processes of every program then map one file: the page cache
    # holds its pages once, and they share them
    env, _ = filled
    other = tmp_path / "myecho"
    shutil.copy2("/usr/bin/echo", other)
    ferry("run", "-o", tmp_path / "run2", "--", other, "hi", env=env, check=True)
    entries = listed(env)
    (shim,) = [e for e in entries if e["kind"] == "shim"]
    assert not shim["problems"] and shim["what"] == "libferry.so", shim
    programs = [Path(e["path"]) for e in entries if e["kind"] == "program"]
    linked = [p for d in programs for p in [d / "libferry.so", *d.glob("glibc-hwcaps/*/libferry.so")]]
    assert len(programs) == 2 and len(linked) >= 2, linked
    assert {p.stat().st_ino for p in linked} == {(Path(shim["path"]) / "libferry.so").stat().st_ino}


def test_a_copy_of_the_shim_cut_short_is_not_linked_again(filled, tmp_path):
    env, _ = filled
    (shim,) = [e for e in listed(env) if e["kind"] == "shim"]
    copy = Path(shim["path"]) / "libferry.so"
    whole = copy.stat().st_size
    os.truncate(copy, 4096)
    other = tmp_path / "myecho"
    shutil.copy2("/usr/bin/echo", other)
    r = ferry("run", "-o", tmp_path / "run2", "--", other, "hi", env=env, check=True)
    assert r.stdout.strip() == "hi"
    made = [Path(e["path"]) for e in listed(env) if e["kind"] == "program" and e["what"] == str(other)]
    assert made and (made[0] / "libferry.so").stat().st_size == whole


def test_a_shim_of_another_build_is_pruned(filled):
    env, _ = filled
    old = Path(env["FERRY_CACHE"], "shims", "0" * 64)
    old.mkdir(parents=True)
    (old / "libferry.so").write_bytes(b"\x7fELF")
    (entry,) = [e for e in listed(env) if e["path"] == str(old)]
    assert entry["kind"] == "shim" and any("another build" in p for p in entry["problems"])
    cache(env, "prune")
    assert not old.exists()
    assert [e for e in listed(env) if e["kind"] == "shim"]    # the current one stays


def test_a_changed_program_is_found_and_pruned(filled):
    env, program = filled
    with open(program, "ab") as f:
        f.write(b"\0")  # rebuilt: another hash and another identity
    r = cache(env, "verify", check=False)
    assert r.returncode == 1 and str(program) in r.stdout
    stale = {(e["kind"], e["what"]) for e in listed(env) if e["problems"]}
    assert stale == {("program", str(program)), ("exec", str(program))}
    before = listed(env)
    dry = cache(env, "prune", "--dry-run")
    assert "would remove 2 entries" in dry.stdout and listed(env) == before
    assert "removed 2 entries" in cache(env, "prune").stdout
    assert cache(env, "verify").returncode == 0
    assert len(listed(env)) == len(before) - 2
    ferry("run", "-o", program.parent / "again", "--", program, env=env, check=True)


def test_entries_of_another_rewriter_are_pruned(filled):
    env, _ = filled
    old = os.path.join(env["FERRY_CACHE"], "modules", "0" * 64 + "-v0-000000000000")
    os.makedirs(old)
    with open(os.path.join(old, "module.json"), "w") as f:
        json.dump({"original": "/usr/bin/true", "sha256": "0" * 64, "layout": "v0-000000000000"}, f)
    (entry,) = [e for e in listed(env) if e["path"] == old]
    assert any("another version of the rewriter" in p for p in entry["problems"])
    cache(env, "prune")
    assert not os.path.exists(old)


def test_clear_empties_the_cache_and_runs_still_work(filled):
    env, program = filled
    assert cache(env, "clear", check=False).returncode != 0  # asks first; no terminal: no
    assert listed(env)
    assert "removed" in cache(env, "clear", "--yes").stdout
    assert listed(env) == [] and "is empty" in cache(env, "list").stdout
    ferry("run", "-o", program.parent / "again", "--", program, env=env, check=True)
    assert listed(env)


def test_a_message_naming_a_long_path_is_one_line_when_piped(tmp_path):
    # scripts read it and a terminal folds it: rich's 80 columns for a pipe
    # cut it after the path
    root = tmp_path / ("deep-" * 20) / "cache"
    env = dict(os.environ, FERRY_CACHE=str(root))
    out = cache(env, "list").stdout
    assert out == f"the image cache {root} is empty\n"
