"""bench/spawn: what enabling a process costs, for process-heavy workloads.

Four workloads, each natively, under `ferry run -p off|count|trace` and under
`strace -f -c -o /dev/null`, interleaved over rounds (medians):

* spawn: a shell loop running /bin/true 300 times;
* build: `make -j2 -B` of a tree of small C files generated here;
* configure: `./configure` of a small autoconf project generated here (the
  configure script is made once with autoconf, then run each round);
* bash: the spawn loop run by bash, which forks for each command where sh
  (dash) vforks (configure runs itself again under bash): `bash_spawn_ratio`,
  its page faults per command (`bash_faults_per_process`) and the exec
  hook's span in the fork child (`bash_exec_hook_us`, the median of
  HOOK_RUNS runs, alternated with the baseline's).

With SPAWN_BASELINE_SHIM=<another libferry.so>, trace mode also runs with
that shim, alternated with the current one in every round, and the RESULT
line gives its ratios as baseline_*: a change to the start path measured
side by side on a loaded machine.

Trace mode also runs with `--no-stage` ("disk": the process records written
into the run directory as the program runs, not kept in memory until it
ended), alternated with the default in every round: disk_* in RESULT.

The spawn loop also reports the CPU the shell and its children used
(getrusage of a reporter's children, µs resolution), native and traced,
alternated in each round: on a loaded machine the wall clock moves with the
other load, CPU time much less.

Every figure of a mode against native (ratios, per-process costs) is the
median over rounds of that round's own comparison: the modes of a round
run back to back, and the VM's speed drifts between rounds.  Native and
strace are timed from spawn to reap; ferry's figure is the
program's own `duration_s` from info.json (also spawn to reap), so ferry's
Python start-up and the image-cache lookup are not counted.  The
per-process costs (`per_process_us`, `preload_floor_us`) are each mode's
time of the loop less its time of the same loop running no command (the
shortest of the rounds': that run lasts 5 ms, or 15-30 in some runs, and
its outliers are all long ones), above the same difference natively: what a
command adds, without what a run costs whatever it runs (the shell's start;
ferry run's fork of its Python, ~3 ms, where the native loop is started
with vfork).  Each timed run goes into a directory emptied before it, so
that `ferry run` has no earlier run to remove beside the program.  What a user's
`time ferry run ...` shows is also given, for the spawn loop under trace:
the whole command against native (`wall_spawn_ratio`), and what `ferry run`
does after the program ended, per process (reading and indexing the
records, moving them out of memory: `after_us_per_process`), less what it
does after a run of one /bin/true.  Images and
plans go to a temporary $FERRY_CACHE, warmed by one untimed run of each
workload (that is how a second run of anything starts).

The breakdown of one process's start comes from the spans the shim records
in each process file (procfile.h, FERRY_SPAN_*): the exec hook (from its
entry to the execve it passes on), exec + loader (from that execve to the
shim's constructor: the kernel's exec, ld.so, libraries' relocations), and
the constructor's steps: process file, calibration, rewritten modules,
load-time patching (plans), catch-all.  Medians over the /bin/true images of
a traced spawn run.  Two counts follow, which no load on the machine moves:
the page faults of one command, natively and under trace (getrusage of a
reporter's children, less the same loop running no command), and the shim's
own system calls per command (every record's tally).  Private_Dirty of
libc's text is read from /proc/PID/smaps of a process that waits on a pipe,
natively and enabled.

The same C loop is also run under trace with the cache's images (the shim,
the rewritten libc) in the page cache as ld.so reads them back once they
left it (after a reboot: in 4 KiB pages), alternated with the state Ferry
keeps them in (large folios, base/folios.py) in every round:
`small_pages_driver_us`, `small_pages_driver_cpu_us` (trace above native).
A fresh cache, as this bench makes, is in the second state; a user's after
a reboot was in the first until `ferry run` read the images back.

The floor under any design that preloads its runtime: the spawn loop run
natively with an empty shared library in LD_PRELOAD (built here), timed in
every round beside the native loop.  What one more library costs each
process (ld.so opening, mapping and relocating it, the kernel's mappings
made and torn down) is in every enabled process's start, before the shim
runs a line: `preload_floor_us`, and `shim_above_floor_us` the rest.  The
empty library is linked as the shim is (two mappings, no RELRO, no libc).

The same cost measured by a C loop (bench/spawn_driver.c, built here):
1000 `posix_spawn`s of /bin/true a round, natively, natively with the empty
library preloaded, and under `ferry run -p trace`, the driver timing itself
(wall and its children's CPU): `driver_us`, `driver_cpu_us` (trace above
native) and `driver_floor_us` (the library above native).  Its rounds agree
within ~5 us where the shell loop's slopes move by 20-50; a `posix_spawn`
child also sets every signal's action (~120 `rt_sigaction`), which the
shim sees, so it is dearer than a shell's command.  The breakdown gives
the vfork child's part from its record: from the vfork to the exec hook
(`child_before_hook`) and the hook to the record's end stamp, and that in
the hook's steps (its record keeps them, enum ferry_hook_step): the path
read (`hook_path`), the cache looked up (`hook_cache`), the program's
environment built (`hook_env`), the record's slot open (`hook_slot`), its
block packed (`hook_packed`) and the record written (`hook_write`).
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ferry import procfile
from ferry.base import folios
from ferry.rewriter import cache

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).parent / "ferry")
SPAWNS = 300
DRIVER_SPAWNS = 1000   # posix_spawns per round of bench/spawn_driver.c
HOOK_RUNS = 5          # bash loops a mode for the exec hook's span in a fork child
SPAWN_LOOP = f'i=0; while [ $i -lt {SPAWNS} ]; do /bin/true; i=$((i+1)); done'
# The same loop running no command: what a run costs whatever it runs (the
# shell's own start; under ferry run, starting the program from a fork of
# ferry run's Python), subtracted in each mode from the loop's time, so that
# the per-process figures are what each command adds.
EMPTY_LOOP = 'i=0; while [ $i -lt 0 ]; do /bin/true; i=$((i+1)); done'
C_FILES = 25
ROUNDS = int(os.environ.get("SPAWN_ROUNDS", "5"))
MODES = ("off", "count", "trace")
BASELINE = os.environ.get("SPAWN_BASELINE_SHIM")
NAN = float("nan")

SPAN_NAMES = tuple(procfile.SPANS[i] for i in range(len(procfile.SPANS)))   # enum ferry_span
HOOK_STEPS = tuple(procfile.HOOK_STEPS[i] for i in range(len(procfile.HOOK_STEPS)))  # enum ferry_hook_step


def median(xs):
    return statistics.median(xs) if xs else NAN


def paired(xs, ys, f=lambda x, y: x - y):
    """The median over rounds of f(x, y), each pair measured in the same
    round: the VM's speed drifts between rounds (the native loop by 10-15 %
    within one bench), and a mode's median against native's median carried
    that drift, where a round's own comparison does not."""
    return median([f(x, y) for x, y in zip(xs, ys)])


def make_tree(top):
    """25 C files and a Makefile: a build that is mostly process starts."""
    src = top / "build"
    src.mkdir()
    objs = []
    for i in range(C_FILES):
        (src / f"f{i}.c").write_text(
            f"#include <stdio.h>\n#include <string.h>\n"
            f"int f{i}(const char *s) {{ return (int)strlen(s) * {i + 1}; }}\n")
        objs.append(f"f{i}.o")
    (src / "main.c").write_text(
        "#include <stdio.h>\n" + "".join(f"int f{i}(const char *);\n" for i in range(C_FILES)) +
        "int main(void) { int t = 0;\n" + "".join(f" t += f{i}(\"x\");\n" for i in range(C_FILES)) +
        " printf(\"%d\\n\", t); return 0; }\n")
    (src / "Makefile").write_text(
        "CFLAGS = -O0\nOBJS = main.o " + " ".join(objs) + "\n"
        "prog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n"
        "%.o: %.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\n")
    return ["make", "-s", "-j2", "-B", "-C", str(src)]


def make_configure(top):
    """A small autoconf project; None when autoconf is missing."""
    if not shutil.which("autoconf"):
        return None
    d = top / "conf"
    d.mkdir()
    (d / "configure.ac").write_text(
        "AC_INIT([spawnbench], [1.0])\n"
        "AC_PROG_CC\n"
        "AC_CHECK_HEADERS([stdlib.h string.h unistd.h fcntl.h sys/time.h])\n"
        "AC_CHECK_FUNCS([memset strchr strdup gettimeofday])\n"
        "AC_CHECK_SIZEOF([long])\n"
        "AC_CONFIG_FILES([Makefile])\n"
        "AC_OUTPUT\n")
    (d / "Makefile.in").write_text("all:\n\t@echo @CC@\n")
    subprocess.run(["autoconf"], cwd=d, check=True, capture_output=True)
    return ["sh", "-c", f"cd {d} && ./configure -q >/dev/null"]


def make_empty_library(top):
    """An empty shared library linked as libferry.so is (shim/Makefile: no
    libc, no RELRO, no separate read-only segments: two mappings): what
    preloading the shim costs a process before it runs a line.  Linked by
    `cc -shared`'s defaults it was four mappings and RELRO, ~20 us a process
    more, which no preloaded runtime need pay."""
    src = top / "empty.c"
    src.write_text("int ferry_bench_empty;\n")
    lib = top / "libempty.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-nostdlib", "-Wl,-z,now", "-Wl,-z,norelro",
                    "-Wl,-z,noseparate-code", "-o", str(lib), str(src)], check=True)
    return lib


def make_driver(top):
    """bench/spawn_driver.c, built here: posix_spawn of a program N times."""
    exe = top / "spawn_driver"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(ROOT / "bench" / "spawn_driver.c")], check=True)
    return exe


def driven(argv, env):
    """(wall µs, CPU µs) per spawn, as spawn_driver measured them."""
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    found = re.findall(r"^([\d.]+) ([\d.]+)$", r.stdout, re.M)
    if r.returncode != 0 or not found:
        raise SystemExit(f"spawn bench: {argv[:4]} failed: {r.stderr[-500:]}")
    return float(found[-1][0]), float(found[-1][1])


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"spawn bench: {cmd[:3]} failed with {r.returncode}")
    return dt


# The spawn loop as the child of a process that reports what the loop and
# every process it started used (getrusage of its children): CPU time and
# page faults.  Under `ferry run` that reporter is enabled too, but what it
# uses itself is not its children's.  (The shell's own `times` counts CPU in
# steps of 10 ms, 33 us of a process of the loop.)
REPORTER = ("import resource, subprocess, sys; "
            "subprocess.run([sys.argv[2], '-c', sys.argv[1]], check=True); "
            "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print('cpu', r.ru_utime + r.ru_stime); print('minflt', r.ru_minflt)")


def _report(mode, out, env, loop, shell="sh"):
    """{'cpu': seconds, 'minflt': faults} of `loop` run by `shell` and its
    processes, natively (mode None) or under ferry run -p mode."""
    cmd = [sys.executable, "-c", REPORTER, loop, shell]
    if mode:
        cmd, env = _under(mode, out, env, cmd)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    found = dict(re.findall(r"^(cpu|minflt) ([\d.]+)$", r.stdout, re.M))
    if r.returncode != 0 or len(found) != 2:
        raise SystemExit(f"spawn bench: {cmd[:3]} failed: {r.stderr[-500:]}")
    return {"cpu": float(found["cpu"]), "minflt": int(found["minflt"])}


def spawn_cpu(mode, out, env):
    """CPU seconds of the spawn loop natively (mode None) or under ferry run
    -p mode: the wall clock of a loaded machine says more about the other
    load than about us; the CPU the processes used does not."""
    return _report(mode, out, env, SPAWN_LOOP)["cpu"]


def spawn_faults(mode, out, env, loop=SPAWN_LOOP, shell="sh"):
    """Page faults of the spawn loop and its processes, natively (mode None)
    or under ferry run -p mode.  A count, not a time: it moves with each page
    a start touches or spares, by the same amount on an idle or a loaded
    machine, where the µs figures need many rounds to show a cut of 5 us."""
    return _report(mode, out, env, loop, shell)["minflt"]


def shim_calls(run_dir):
    """The shim's own system calls in a run (every record's tally), and the
    records they are in."""
    records = procfile.read_dir(run_dir / "proc")
    return sum(sum(r.internal.values()) for r in records), len(records)


def _mode(mode, env):
    """(profile, environment, options) of a mode of the bench."""
    if mode == "baseline":
        return "trace", dict(env, FERRY_SHIM=BASELINE), []
    if mode == "disk":
        return "trace", env, ["--no-stage"]
    return mode, env, []


def _under(mode, out, env, cmd):
    """(argv, environment) of `cmd` run by `ferry run` in a mode of the bench, into `out`."""
    profile, env, opts = _mode(mode, env)
    return [FERRY, "run", "-p", profile, *opts, "-o", str(out), "--", *cmd], env


def ferry_run(cmd, mode, out, env, walls=None):
    """The program's own duration under `ferry run -p mode`; `walls` (a list)
    gets (the whole command's, the program's)."""
    if out.exists():
        # `ferry run` keeps the run it replaces as DIR.old and removes the one
        # before, in a thread beside the program: a run of the spawn loop
        # (600 records) takes ~10 ms to remove, work (and a hold of Python's
        # lock, around the reap) beside the run measured.  What is measured
        # is the program, so the run dir is gone before, not during.
        for old in (out, out.with_name(out.name + ".old")):
            shutil.rmtree(old, ignore_errors=True)
    argv, env = _under(mode, out, env, cmd)
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"spawn bench: ferry run -p {mode} {cmd[:3]} failed: {r.stderr[-500:]}")
    duration = json.loads((out / "info.json").read_text())["duration_s"]
    if walls is not None:
        walls.append((wall, duration))
    return duration


def read_procs(path):
    """The fields the breakdown needs of each record (procfile.h) of a file."""
    with open(path, "rb") as f:
        for base in procfile.record_offsets(f):
            f.seek(base)
            b = f.read(procfile.HEADER_SIZE)
            if len(b) < procfile.HEADER_SIZE or not b.startswith(procfile.MAGIC):
                continue
            h = procfile.HEADER.unpack(b)
            yield {"pid": h["pid"], "start": h["start_mono_ns"], "end_tsc": h["end_tsc"],
                   "start_tsc": h["start_tsc"],
                   "cal": (h["cal_tsc"], h["cal_ns"]), "spans": dict(zip(SPAN_NAMES, h["start_spans"])),
                   "steps": h["start_spans"][:len(HOOK_STEPS)]}


def breakdown(run_dir):
    """Median µs of each part of an image's start, over images that the exec
    hook of a previous image of the same pid started."""
    procs, images = {}, {}
    records = [p for f in (run_dir / "proc").glob("*.ferry") for p in read_procs(f)]
    for p in sorted(records, key=lambda p: p["start"]):  # a pid's images, numbered as they started
        seq = images.get(p["pid"], 0)
        images[p["pid"]] = seq + 1
        procs[(p["pid"], seq)] = p
    cal = next((p["cal"] for p in procs.values() if p["cal"][0]), None)
    if not cal:
        return {}
    us = lambda ticks: ticks * cal[1] / cal[0] / 1000.0  # noqa: E731
    parts = {k: [] for k in ("exec_hook", "exec_loader", "process_file", "calibration",
                             "modules", "patching", "catchall", "rest_of_ctor", "shim_start",
                             "child_before_hook")}
    for (pid, seq), p in procs.items():
        prev = procs.get((pid, seq - 1))
        s = p["spans"]
        if not prev or not s["ctor"] or not s["ready"] or not prev["spans"]["exec_hook"]:
            continue
        parts["exec_hook"].append(us(prev["end_tsc"] - prev["spans"]["exec_hook"]))
        if prev["start_tsc"] and prev["start_tsc"] <= prev["spans"]["exec_hook"]:
            parts["child_before_hook"].append(us(prev["spans"]["exec_hook"] - prev["start_tsc"]))
        # the hook's own steps, from the vfork child's record: each from the one before
        marks = [prev["spans"]["exec_hook"], *prev["steps"], prev["end_tsc"]]
        if all(marks) and marks == sorted(marks):
            for name, a, b in zip((*HOOK_STEPS, "write"), marks, marks[1:]):
                parts.setdefault(f"hook_{name}", []).append(us(b - a))
        parts["exec_loader"].append(us(s["ctor"] - prev["end_tsc"]))
        parts["process_file"].append(us(s["file"] - s["ctor"]))
        parts["calibration"].append(us(s["calibrated"] - s["file"]))
        parts["modules"].append(us(s["modules"] - s["calibrated"]))
        parts["patching"].append(us(s["plans"] - s["modules"]))
        parts["catchall"].append(us(s["catchall"] - s["plans"]))
        parts["rest_of_ctor"].append(us(s["ready"] - s["catchall"]))
        parts["shim_start"].append(us(s["ready"] - s["ctor"]))
    return {k: median(v) for k, v in parts.items() if v}


def libc_private_dirty(env, ferry_mode=None, out=None):
    """kB of Private_Dirty in libc's executable mappings of `cat` waiting on
    its input: natively, or started by a shell under `ferry run -p
    ferry_mode` (so it is a child that the exec hook enabled; --no-learn
    keeps it a program that was never rewritten, enabled at load time)."""
    cmd = ["/bin/cat"]
    if ferry_mode:
        cmd = [FERRY, "run", "--no-learn", "-p", ferry_mode, "-o", str(out), "--",
               "sh", "-c", "/bin/cat; :"]
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            for pid in _descendants(p.pid) if ferry_mode else [p.pid]:
                if _comm(pid) == "cat":
                    total = _libc_text_dirty(pid)
                    if total is not None:
                        return total
        return None
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def _descendants(pid):
    try:
        kids = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in _descendants(k)]


def _comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _libc_text_dirty(pid):
    """kB of Private_Dirty in the executable mappings of libc: its own file,
    or the plan's patched copy mapped over it (named by libc's identity)."""
    st = os.stat("/lib/x86_64-linux-gnu/libc.so.6")
    copy = f"/plans/{st.st_dev}-{st.st_ino}-"
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return None
    total, in_libc, seen = 0, False, False
    for line in text.splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:
            in_libc = ("libc.so" in line or copy in line) and "x" in head[1]
            seen = seen or in_libc
        elif in_libc and line.startswith("Private_Dirty:"):
            total += int(line.split()[1])
    return total if seen else None


def main():
    work = Path(tempfile.mkdtemp(prefix="ferry-spawn-"))
    env = dict(os.environ, FERRY_CACHE=str(work / "cache"), FERRY_DATA=str(work / "data"))
    try:
        loads = {"spawn": ["sh", "-c", SPAWN_LOOP], "build": make_tree(work)}
        # the same loop run by bash, which forks for each command where sh
        # (dash) vforks: autoconf's configure runs itself again under bash
        if shutil.which("bash"):
            loads["bash"] = ["bash", "-c", SPAWN_LOOP]
        conf = make_configure(work)
        if conf:
            loads["configure"] = conf
        else:
            print("autoconf not found: the configure workload is skipped")
        modes = MODES + ("disk",) + (("baseline",) if BASELINE else ())
        for name, cmd in loads.items():  # warm the image cache, untimed
            for mode in modes:
                ferry_run(cmd, mode, work / "warm", env)
        ferry_run(["/bin/true"], "trace", work / "warm", env)  # as `ferry run`'s own program
        driver = [str(make_driver(work)), str(DRIVER_SPAWNS), "/bin/true"]
        ferry_run(driver, "trace", work / "warm", env)
        preload_env = dict(env, LD_PRELOAD=str(make_empty_library(work)))
        drives = {m: [] for m in ("native", "preload", "trace", "small")}
        os.environ["FERRY_CACHE"] = env["FERRY_CACHE"]      # cache.linked_images() of this cache
        images = list(cache.linked_images())
        times = {(n, m): [] for n in loads for m in ("native", "strace") + modes}
        times[("spawn", "preload")] = []
        empty = ["sh", "-c", EMPTY_LOOP]
        for mode in ("native", "preload") + modes:
            times[("empty", mode)] = []
        cpu_modes = ("trace", "disk") + (("baseline",) if BASELINE else ())
        cpu = {m: [] for m in ("native",) + cpu_modes}
        walls = {"spawn": [], "one": []}
        for r in range(ROUNDS):
            # Each round takes the modes in another order (a rotation): in
            # one fixed order, the mode that ran last in a round (the
            # baseline) came out ~40 us a process faster than the same shim
            # in another place, in run after run; CPU time said they were
            # equal.
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            cpu_order = cpu_modes[r % len(cpu_modes):] + cpu_modes[:r % len(cpu_modes)]
            cpu["native"].append(spawn_cpu(None, None, env))
            for m in list(drives)[r % 4:] + list(drives)[:r % 4]:
                argv, denv = ((driver, env) if m == "native" else (driver, preload_env) if m == "preload"
                              else _under("trace", work / f"run-driver-{m}", env, driver))
                if m == "small":
                    for p in images:
                        folios.read_back(p, huge=False)
                drives[m].append(driven(argv, denv))
                if m == "small":
                    for p in images:
                        folios.settle(p)
            for mode in cpu_order:
                cpu[mode].append(spawn_cpu(mode, work / f"cpu-{mode}", env))
            for name, cmd in loads.items():
                times[(name, "native")].append(timed(cmd, env))
                if name == "spawn":
                    times[(name, "preload")].append(timed(cmd, preload_env))
                    times[("empty", "native")].append(timed(empty, env))
                    times[("empty", "preload")].append(timed(empty, preload_env))
                for mode in order:
                    wall = walls["spawn"] if (name, mode) == ("spawn", "trace") else None
                    times[(name, mode)].append(ferry_run(cmd, mode, work / f"run-{mode}", env, wall))
                    if name == "spawn":
                        times[("empty", mode)].append(ferry_run(empty, mode, work / f"run-{mode}", env))
                times[(name, "strace")].append(
                    timed(["strace", "-f", "-c", "-o", "/dev/null", *cmd], env))
            ferry_run(["/bin/true"], "trace", work / "run-one", env, walls["one"])
        med = {k: median(v) for k, v in times.items()}
        print(f"{'workload':10} {'native':>8} {'off':>8} {'count':>8} {'trace':>8} {'strace':>8}"
              f"   (seconds, median of {ROUNDS})")
        for name in loads:
            row = [med[(name, m)] for m in ("native",) + MODES + ("strace",)]
            print(f"{name:10} " + " ".join(f"{x:8.3f}" for x in row) +
                  f"   trace {row[3] / row[0]:.2f}x  strace {row[4] / row[0]:.2f}x")
        # one traced spawn run for the breakdown
        ferry_run(loads["spawn"], "trace", work / "spans", env)
        parts = breakdown(work / "spans")
        print("start of one /bin/true under trace (median µs): " +
              ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
        # bash's commands: the exec hook runs in a fork child, on bash's
        # stack.  The median of HOOK_RUNS runs a mode, the modes alternated:
        # one run each moved by 5 us on a loaded machine.
        hook = {m: NAN for m in ("trace",) + (("baseline",) if BASELINE else ())}
        spans = {m: [] for m in hook}
        for r in range(HOOK_RUNS if "bash" in loads else 0):
            for mode in (list(hook) if r % 2 == 0 else list(hook)[::-1]):
                ferry_run(loads["bash"], mode, work / f"bash-spans-{mode}-{r}", env)
                spans[mode].append(breakdown(work / f"bash-spans-{mode}-{r}").get("exec_hook", NAN))
        hook.update({m: median(v) for m, v in spans.items() if v})
        print(f"the exec hook of a command bash forked (median µs, {HOOK_RUNS} runs a mode): " +
              ", ".join(f"{m} {v:.1f}" for m, v in hook.items()))
        # counts per command, above what the same loop of no command costs
        empty = "i=0; while [ $i -lt 0 ]; do /bin/true; i=$((i+1)); done"
        faults = {m: (spawn_faults(m, work / "faults", env) -
                      spawn_faults(m, work / "faults", env, empty)) / SPAWNS for m in (None, "trace")}
        bash_faults = {m: (spawn_faults(m, work / "faults", env, shell="bash") -
                           spawn_faults(m, work / "faults", env, empty, "bash")) / SPAWNS
                       if "bash" in loads else NAN for m in (None, "trace")}
        calls, records = shim_calls(work / "spans")
        calls_per = calls / SPAWNS
        print(f"page faults per command: native {faults[None]:.1f}, trace {faults['trace']:.1f}; "
              f"the shim's own calls per command under trace: {calls_per:.1f} "
              f"({records} records: each command is a vfork child's and an image's); "
              f"the loop run by bash (a fork for each command): native {bash_faults[None]:.1f}, "
              f"trace {bash_faults['trace']:.1f}")
        native_dirty = libc_private_dirty(env)
        ferry_dirty = libc_private_dirty(env, "trace", work / "smaps")
        print(f"Private_Dirty of libc text: native {native_dirty} kB, ferry run -p trace "
              f"{ferry_dirty} kB")
        # A run of no command lasts 5 ms, or 15-30 in some runs (with or
        # without an earlier run to remove; `ferry run`'s own work beside the
        # program, not pinned down): its outliers are all long ones, and one
        # in a round moved that round's figure by 30-80 us a command.  What a
        # run costs whatever it runs is its shortest.
        def per_command(m):
            fixed = min(times[("empty", m)])
            return [(s - fixed) / SPAWNS for s in times[("spawn", m)]]
        per_mode = {m: paired(per_command(m), per_command("native")) * 1e6 for m in modes}
        print("per-process cost above native (µs; each mode's loop less the same loop running "
              "no command): " + ", ".join(f"{m} {v:.0f}" for m, v in per_mode.items()))
        print("a run of no command (the shell alone), ms: " +
              ", ".join(f"{m} {med[('empty', m)] * 1e3:.1f}" for m in ("native",) + modes))
        floor = paired(per_command("preload"), per_command("native")) * 1e6
        print(f"of which any preloaded library costs (an empty one, natively): {floor:.0f} µs; "
              f"the shim above that, trace: {per_mode['trace'] - floor:.0f} µs")
        cpu_us = {m: paired(cpu[m], cpu["native"]) / (SPAWNS + 1) * 1e6 for m in cpu_modes}
        print("CPU per process above native, spawn loop (µs, getrusage of the loop's processes): " +
              ", ".join(f"{m} {v:.0f}" for m, v in cpu_us.items()))
        drive = {m: (median([w for w, _ in v]), median([c for _, c in v])) for m, v in drives.items()}
        driver_us = paired([w for w, _ in drives["trace"]], [w for w, _ in drives["native"]])
        driver_cpu_us = paired([c for _, c in drives["trace"]], [c for _, c in drives["native"]])
        driver_floor_us = paired([w for w, _ in drives["preload"]], [w for w, _ in drives["native"]])
        print(f"posix_spawn of /bin/true by a C loop ({DRIVER_SPAWNS} a round, µs a spawn, wall/CPU): "
              f"native {drive['native'][0]:.0f}/{drive['native'][1]:.0f}, "
              f"the empty library preloaded {drive['preload'][0]:.0f}/{drive['preload'][1]:.0f}, "
              f"trace {drive['trace'][0]:.0f}/{drive['trace'][1]:.0f}: trace above native "
              f"{driver_us:.0f}/{driver_cpu_us:.0f}, the library's floor {driver_floor_us:.0f}")
        small_us = paired([w for w, _ in drives["small"]], [w for w, _ in drives["native"]])
        small_cpu_us = paired([c for _, c in drives["small"]], [c for _, c in drives["native"]])
        print(f"the same under trace with the shim and the rewritten libc in 4 KiB pages of the page "
              f"cache (read back as after a reboot): {drive['small'][0]:.0f}/{drive['small'][1]:.0f}, "
              f"above native {small_us:.0f}/{small_cpu_us:.0f}")
        dparts = breakdown(work / "run-driver-trace")
        print("start of one /bin/true a C loop's posix_spawn started (median µs): " +
              ", ".join(f"{k} {v:.1f}" for k, v in dparts.items()))
        whole = median([w for w, _ in walls["spawn"]])
        wall_ratio = paired([w for w, _ in walls["spawn"]], times[("spawn", "native")], lambda x, y: x / y)
        after = {k: median([w - d for w, d in v]) for k, v in walls.items()}
        after_us = (after["spawn"] - after["one"]) / (SPAWNS + 1) * 1e6
        print(f"`ferry run -p trace` of the spawn loop, whole: {whole:.3f} s "
              f"({wall_ratio:.2f}x native); after the program: {after['spawn']:.3f} s, "
              f"{after['one']:.3f} s for one /bin/true, {after_us:.0f} µs per process")
        def ratio(n, m):
            return paired(times[(n, m)], times[(n, "native")], lambda x, y: x / y) if n in loads else NAN
        baseline = "" if not BASELINE else (
            f" baseline_spawn_ratio={ratio('spawn', 'baseline'):.2f}"
            f" baseline_build_ratio={ratio('build', 'baseline'):.2f}"
            f" baseline_configure_ratio={ratio('configure', 'baseline'):.2f}"
            f" baseline_bash_spawn_ratio={ratio('bash', 'baseline'):.2f}"
            f" baseline_per_process_us={per_mode['baseline']:.0f}"
            f" baseline_bash_exec_hook_us={hook['baseline']:.1f}"
            f" baseline_cpu_per_process_us={cpu_us['baseline']:.0f}")
        print(f"RESULT spawn_ratio={ratio('spawn', 'trace'):.2f} "
              f"build_ratio={ratio('build', 'trace'):.2f} "
              f"configure_ratio={ratio('configure', 'trace'):.2f} "
              f"per_process_us={per_mode['trace']:.0f} "
              f"preload_floor_us={floor:.0f} shim_above_floor_us={per_mode['trace'] - floor:.0f} "
              f"cpu_per_process_us={cpu_us['trace']:.0f} "
              f"strace_spawn_ratio={ratio('spawn', 'strace'):.2f} "
              f"strace_build_ratio={ratio('build', 'strace'):.2f} "
              f"strace_configure_ratio={ratio('configure', 'strace'):.2f} "
              f"libc_dirty_kb={ferry_dirty} native_libc_dirty_kb={native_dirty} "
              f"disk_spawn_ratio={ratio('spawn', 'disk'):.2f} "
              f"disk_build_ratio={ratio('build', 'disk'):.2f} "
              f"disk_per_process_us={per_mode['disk']:.0f} "
              f"disk_cpu_per_process_us={cpu_us['disk']:.0f} "
              f"faults_per_process={faults['trace']:.1f} native_faults_per_process={faults[None]:.1f} "
              f"bash_spawn_ratio={ratio('bash', 'trace'):.2f} "
              f"bash_faults_per_process={bash_faults['trace']:.1f} "
              f"native_bash_faults_per_process={bash_faults[None]:.1f} "
              f"bash_exec_hook_us={hook['trace']:.1f} "
              f"shim_calls_per_process={calls_per:.1f} "
              f"wall_spawn_ratio={wall_ratio:.2f} after_us_per_process={after_us:.0f} "
              f"driver_us={driver_us:.0f} driver_cpu_us={driver_cpu_us:.0f} "
              f"driver_floor_us={driver_floor_us:.0f} small_pages_driver_us={small_us:.0f} "
              f"small_pages_driver_cpu_us={small_cpu_us:.0f}{baseline}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
