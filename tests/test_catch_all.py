"""The catch-all (Syscall User Dispatch): calls from code no rewrite patched are
counted, their sites recorded, and `ferry run` plans the modules they came from so
that the next run patches them; the program never sees the machinery (SIGSYS, its
mask and its handler stay what the program made them)."""
import re
import shutil
import subprocess

import pytest

from conftest import ALL_PROFILES, FERRY, ROOT, ferry

from ferry.rundata import load_run

PROGRAMS = ROOT / "tests" / "programs" / "build"


def calls(model, name):
    return sum(s["calls"] for s in model["syscalls"] if s["name"] == name)


def test_call_from_code_written_at_run_time_is_counted_and_its_site_recorded(tmp_path, test_programs):
    r = ferry("run", "--no-learn", "-o", tmp_path / "run", "--", PROGRAMS / "jit_syscall", 7, check=True)
    assert "7 of 7 calls returned the parent's pid" in r.stdout
    model = load_run(tmp_path / "run")
    # the program's own getppid() through libc, plus the seven from its code page
    assert calls(model, "getppid") == 8
    caught = model["catch_all"]
    assert caught["enabled"] and caught["caught"] == 7
    [site] = caught["sites"]
    assert (site["path"], site["offset"], site["calls"], site["syscalls"]) == ("", None, 7, {"getppid": 7})
    assert site["address"] % 4096 == 0  # `syscall` is the first instruction of its page
    text = ferry("report", tmp_path / "run", check=True).stdout
    assert "caught by the catch-all" in text and "(anonymous memory)" in text


def test_every_thread_is_caught(tmp_path, test_programs):
    ferry("run", "--no-learn", "-o", tmp_path / "run", "--", PROGRAMS / "jit_syscall", 50, 6, check=True)
    model = load_run(tmp_path / "run")
    assert model["catch_all"]["caught"] == 300
    assert calls(model, "getppid") == 301


def test_library_without_a_plan_is_caught_then_patched_on_the_next_run(tmp_path, test_programs, monkeypatch):
    # FX!32: a first run finds the module by its caught calls, `ferry run` plans
    # it afterwards, and the next run patches it as it loads.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    lib = PROGRAMS / "libsite.so"
    argv = [PROGRAMS / "dlopen_main", lib, 77]
    r = ferry("run", "-o", tmp_path / "first", "--", *argv, check=True)
    assert "77 of 77" in r.stdout
    first = load_run(tmp_path / "first")
    site = next(s for s in first["catch_all"]["sites"] if s["path"] == str(lib))
    assert (site["calls"], site["syscalls"]) == (77, {"getppid": 77})
    symbols = subprocess.run(["nm", str(lib)], capture_output=True, text=True, check=True).stdout
    fn = int(next(line.split()[0] for line in symbols.splitlines() if line.endswith(" site_getppid")), 16)
    assert 0 < site["offset"] - fn < 16  # inside site_getppid, after its `mov`
    assert calls(first, "getppid") == 77

    ferry("run", "-o", tmp_path / "second", "--", *argv, check=True)
    second = load_run(tmp_path / "second")
    assert not [s for s in second["catch_all"]["sites"] if s["path"] == str(lib)]
    patched = next(s for s in second["sites"] if s["module"] == "libsite.so")
    assert (patched["calls"], patched["name"]) == (77, "getppid")


def _library_sites(model):
    return {s["module"]: s["calls"] for s in model["sites"] if s["module"].startswith("libsite")}


def test_an_identical_copy_of_a_planned_library_is_planned_too(tmp_path, test_programs, monkeypatch):
    # A plan is found by the file's identity, and a copy (the same wheel in
    # another virtualenv) has another one: its module was in the cache, so
    # neither `ferry instrument` nor learning after a run planned the copy,
    # and its calls were caught on every run.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    first, copy, learned = (tmp_path / f"{n}.so" for n in ("libsite", "libsite_copy", "libsite_learned"))
    for lib in (first, copy, learned):
        shutil.copy(PROGRAMS / "libsite.so", lib)
    ferry("instrument", first, check=True, text=False)
    ferry("instrument", copy, check=True, text=False)
    # `ferry cache prune` tells the copy's plan from a stale one
    assert "removed 0 entries" in ferry("cache", "prune", check=True).stdout
    ferry("run", "--no-learn", "-o", tmp_path / "copy", "--", PROGRAMS / "dlopen_main", copy, 40,
          check=True)
    assert _library_sites(load_run(tmp_path / "copy")) == {"libsite_copy.so": 40}

    ferry("run", "-o", tmp_path / "first-run", "--", PROGRAMS / "dlopen_main", learned, 40, check=True)
    ferry("run", "-o", tmp_path / "second-run", "--", PROGRAMS / "dlopen_main", learned, 40, check=True)
    second = load_run(tmp_path / "second-run")
    assert _library_sites(second) == {"libsite_learned.so": 40}
    assert not [s for s in second["catch_all"]["sites"] if s["path"] == str(learned)]


def test_every_library_of_a_process_with_many_is_patched_once_planned(tmp_path, test_programs, monkeypatch):
    # The shim's table of modules to plan held 64: in a process with more
    # (a Python with many extension modules), those loaded after the 64th
    # were never patched, and their calls were caught on every run.  Each
    # run learns the libraries whose calls the catch-all's table of sites
    # had room for; once every one is planned, every call is patched.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    libs = [tmp_path / f"libsite{i:02d}.so" for i in range(72)]
    for lib in libs:
        shutil.copy(PROGRAMS / "libsite.so", lib)
    caught = None
    for run in range(8):
        r = ferry("run", "-o", tmp_path / f"run{run}", "--", PROGRAMS / "dlopen_many", 3, *libs, check=True)
        assert "216 of 216" in r.stdout
        model = load_run(tmp_path / f"run{run}")
        assert calls(model, "getppid") == 216
        caught = {s["path"] for s in model["catch_all"]["sites"] if "libsite" in s["path"]}
        if not caught and not model["catch_all"]["overflow"]:
            break
    assert not caught, f"{len(caught)} libraries still caught after {run + 1} runs"
    assert _library_sites(model) == {lib.name: 3 for lib in libs}


def test_a_library_loaded_where_an_unloaded_one_was_is_planned_too(tmp_path, test_programs, monkeypatch):
    # Modules are told apart by where they are loaded; after a dlclose the
    # next library often lands at the same address, and must not pass for
    # the one that was there (looked for once already, so never planned).
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "libsite_a.so", tmp_path / "libsite_b.so"
    for lib in (first, second):
        shutil.copy(PROGRAMS / "libsite.so", lib)
        ferry("instrument", lib, check=True, text=False)
    r = ferry("run", "--no-learn", "-o", tmp_path / "run", "--", PROGRAMS / "dlopen_many", 20, "-c", first,
              second, check=True)
    assert "40 of 40" in r.stdout
    assert "1 loaded where the one before was" in r.stdout  # else this shows nothing
    model = load_run(tmp_path / "run")
    assert _library_sites(model) == {"libsite_a.so": 20, "libsite_b.so": 20}
    assert not [s for s in model["catch_all"]["sites"] if "libsite" in s["path"]]


def test_libraries_loaded_by_threads_at_once_are_patched_as_they_appear(tmp_path, test_programs,
                                                                       monkeypatch):
    # ld.so's hook is written at the first call the catch-all catches; here
    # four threads' dlopens race to make that call, and each one's library
    # must be patched before its first call all the same.
    monkeypatch.setenv("FERRY_CACHE", str(tmp_path / "cache"))
    libs = [tmp_path / f"libsite{i}.so" for i in range(4)]
    for lib in libs:
        shutil.copy(PROGRAMS / "libsite.so", lib)
        ferry("instrument", lib, check=True, text=False)
    for profile in ("trace", "fibers"):
        r = ferry("run", "--no-learn", "-p", profile, "-o", tmp_path / profile, "--",
                  PROGRAMS / "dlopen_threads", 30, *libs, check=True)
        assert "120 of 120" in r.stdout
        model = load_run(tmp_path / profile)
        assert calls(model, "getppid") == 120, profile
        assert not [s for s in model["catch_all"]["sites"] if "libsite" in s["path"]], profile
        if profile == "trace":
            assert _library_sites(model) == {lib.name: 30 for lib in libs}


def test_program_sees_its_own_sigsys_and_mask(tmp_path, test_programs):
    # The catch-all keeps SIGSYS unblocked and handled by the shim; the program
    # blocks everything, installs its own SIGSYS handler and reads both back.
    native = subprocess.run([str(PROGRAMS / "sigsys_view")], capture_output=True, text=True, timeout=60)
    r = ferry("run", "--no-learn", "-o", tmp_path / "run", "--", PROGRAMS / "sigsys_view", check=True)
    assert r.stdout == native.stdout
    assert "jit getppid with all blocked: 1" in r.stdout
    assert "reached the program's handler: 1" in r.stdout
    assert load_run(tmp_path / "run")["catch_all"]["caught"] == 1


def test_profile_can_turn_the_catch_all_off(tmp_path, test_programs):
    profile = tmp_path / "nocatch.toml"
    profile.write_text('mode = "trace"\ncatch_all = false\n')
    ferry("run", "--no-learn", "--profile", profile, "-o", tmp_path / "run", "--",
          PROGRAMS / "jit_syscall", 7, check=True)
    model = load_run(tmp_path / "run")
    assert not model["catch_all"]["enabled"]
    assert calls(model, "getppid") == 1


def test_signal_masks_passed_on_the_stack_are_read_without_a_system_call(tmp_path, test_programs):
    """With the catch-all on, the shim reads the mask of every rt_sigaction
    and rt_sigprocmask (to keep SIGSYS out of it).  A posix_spawn child sets
    all 64 actions from its stack; reading each through the kernel
    (process_vm_readv then, process_vm_writev with its sides swapped now:
    ferry_read_pieces) cost ~3.5 us a signal, ~200 us a spawn.  forkexec
    spawns three times."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    log = tmp_path / "strace.log"
    native = subprocess.run([str(PROGRAMS / "forkexec")], capture_output=True, text=True, timeout=60)
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=process_vm_writev", "-o", str(log), *FERRY,
                        "run", "--no-learn", "-o", str(tmp_path / "run"), "--", str(PROGRAMS / "forkexec")],
                       capture_output=True, text=True, timeout=300)
    assert r.stdout == native.stdout
    reads = [line for line in log.read_text().splitlines() if re.search(r"process_vm_writev\(", line)]
    # the exec hooks' reads of the environment remain: a few per exec
    assert len(reads) < 128, len(reads)


@pytest.mark.parametrize("profile", ["trace", "count", "aggregate", "fibers"])
def test_a_caught_sigaltstack_answers_and_changes_as_the_kernel_does(tmp_path, test_programs, profile):
    """tests/programs/altstack_caught.c: sigaltstack from a code page made at run time,
    in a process the shim takes for one with Go code (SIGSYS on the alternate stack).
    Before, a change from the handler's frame was refused (EPERM: Go crashed ending a
    thread), and, once answered from the frame, was dropped by rt_sigreturn."""
    program = str(PROGRAMS / "altstack_caught")
    native = subprocess.run([program], capture_output=True, timeout=60)
    assert native.returncode == 0 and b"handler sets B: refused" in native.stdout
    under = subprocess.run([*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                            program], capture_output=True, timeout=60)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_a_call_caught_in_a_handler_on_a_small_alternate_stack_fits_as_natively(tmp_path, test_programs,
                                                                                  profile):
    """tests/programs/altstack_jit.c: a handler on an 8 KiB alternate stack writes
    from code made at run time.  The caught call's C path ran inside SIGSYS's handler,
    below its frame on that stack, and overran it (SIGSEGV under every profile that
    catches calls); it now runs once the handler is gone, from the stack the call was
    made on, as a patched site's."""
    program = str(test_programs / "altstack_jit")
    native = subprocess.run([program], capture_output=True, timeout=60)
    assert (native.stdout, native.returncode) == (b"10 10\n", 0), native
    under = subprocess.run([*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--",
                            program], capture_output=True, timeout=60)
    assert (under.stdout, under.returncode) == (native.stdout, 0), under.stderr.decode(errors="replace")
