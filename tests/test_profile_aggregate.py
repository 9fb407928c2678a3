"""Profiles in mode aggregate: the [aggregate] section (pools, route, fibers) is read,
every kind of mistake is one line naming the file, the dotted key and the problem
(through the API and `ferry profile check`), a profile written with to_toml() loads
back equal, and `ferry run` hands the program FERRY_AGG exactly as docs/aggregate.md
says (parsed back here into the same numbers)."""
import json
import re

import pytest

from ferry.rundata import load_run
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ferry, ferry_env, write_profile as write
from ferry.profiles import SHIPPED_DIR, load, loads, shipped
from ferry.profiles import aggenv, routing
from ferry.profiles.aggregate import DEFAULT_POOLS, MAX_POOLS, Pool, online_cpus
from ferry.base.errors import FerryError
from ferry.base.syscall_table import NAMES, NUMBERS

ONLINE = online_cpus()
ONLINE_TEXT = f"{ONLINE[0]}-{ONLINE[-1]}" if len(ONLINE) > 1 else str(ONLINE[0])
AGG = 'mode = "aggregate"\n'


def pool(name="a", **keys):
    body = "".join(f"{k} = {v}\n" for k, v in keys.items())
    return f"[aggregate.pools.{name}]\n{body}"


# --- shipped profiles and defaults -------------------------------------------------------

def test_shipped_aggregate_is_one_adaptive_pool_with_default_routing():
    p = load("aggregate")
    assert p.mode == "aggregate" and p.description
    assert p.agg_pools == (Pool("main", wait="adaptive"),)
    assert p.agg_route == {}
    assert (p.agg_workers, p.agg_fiber_stack, p.agg_carriers) == (4, 256 * 1024, 1)
    bare = loads(f'description = "{p.description}"\n' + AGG, "aggregate.toml")
    assert p == bare == load(SHIPPED_DIR / "aggregate.toml")    # every setting the default


def test_shipped_net_has_a_socket_pool_a_file_pool_and_a_wait_pool():
    p = load("net")
    assert [q.name for q in p.agg_pools] == ["net", "files", "waits"]
    c = aggenv.config(p)
    # the server's calls, its page's in disk mode too, on one ring
    for name in routing.GROUPS["sockets"] + ("read", "write", "writev", "close", "openat", "fstat",
                                             "newfstatat", "statx"):
        assert c.route[NUMBERS[name]] == 0, name
    for name in ("pread64", "fsync", "getdents64"):
        assert c.route[NUMBERS[name]] == 1, name
    assert c.route[NUMBERS["getpid"]] == c.route[NUMBERS["clock_gettime"]] == "n"
    # a Windows program's blocking waits (every blocking Winsock call ends in
    # one) each hold a worker: their own pool, with room for many connections
    assert 2 not in c.route.values()
    routes = dict(item.split(":") for item in aggenv.encode(p, windows=True).split("route=")[1].split(","))
    assert routes["NtWaitForSingleObject"] == routes["NtWaitForMultipleObjects"] == "2"
    assert routes["NtDeviceIoControlFile"] == "0"
    assert p.agg_pools[2].concurrency >= 256


def test_ferry_profile_check_accepts_the_shipped_aggregation_profiles():
    files = [SHIPPED_DIR / "aggregate.toml", SHIPPED_DIR / "net.toml"]
    r = ferry("profile", "check", *files)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{f}: ok (mode aggregate)" for f in files]


def test_ferry_profile_show_lists_each_pool_and_the_environment():
    r = ferry("profile", "show", "net", env=ferry_env(COLUMNS=400))
    assert r.returncode == 0, r.stderr
    rows = {line.split()[1]: line for line in r.stdout.splitlines()
            if line.startswith("│") and line.split()[1] != "│"}
    assert "entries = 4096" in rows["aggregate.pools.net"]
    assert 'wait = "some"' in rows["aggregate.pools.files"]
    assert "default" not in rows["aggregate.pools.files"]
    assert f"FERRY_AGG={aggenv.encode(load('net'))}" in r.stdout.replace("\n", "")


def test_every_aggregate_setting_is_read(tmp_path):
    cpu = ONLINE[-1]
    p = load(write(tmp_path, AGG + f"""
        [aggregate]
        workers = 8
        fiber_stack = "1MiB"
        carriers = {len(ONLINE)}
        [aggregate.pools.net]
        entries = 1024
        concurrency = 3
        cpus = [{cpu}, {cpu}]
        sqpoll = {ONLINE[0]}
        priority = -5
        wait = "some"
        wait_limit = 16
        wait_timeout = "1.5ms"
        [aggregate.pools.disk]
        wait = "all"
        [aggregate.route]
        sockets = "net"
        files = "disk"
        getdents64 = "disk"
        flock = "worker"
        clone = "native"
        """))
    assert (p.agg_workers, p.agg_fiber_stack, p.agg_carriers) == (8, 1 << 20, len(ONLINE))
    assert p.agg_pools == (
        Pool("net", entries=1024, concurrency=3, cpus=(cpu,), sqpoll=ONLINE[0], priority=-5,
             wait="some", wait_limit=16, wait_timeout_ns=1_500_000),
        Pool("disk", wait="all"))
    assert p.agg_route == {"sockets": "net", "files": "disk", "getdents64": "disk",
                           "flock": "worker", "clone": "native"}


@pytest.mark.parametrize("text, ns", [('"100us"', 100_000), ('"2ms"', 2_000_000),
                                      ('"1s"', 10**9), ('"250ns"', 250), ('"0.5us"', 500),
                                      ('"60s"', 60 * 10**9), ('"3µs"', 3000)])
def test_wait_timeout_units(tmp_path, text, ns):
    p = load(write(tmp_path, AGG + pool(wait='"some"', wait_limit=1, wait_timeout=text)))
    assert p.agg_pools[0].wait_timeout_ns == ns


@pytest.mark.parametrize("text, size", [("16384", 16384), ('"256KiB"', 262144), ('"64K"', 65536),
                                        ('"1M"', 1 << 20), ('"64MiB"', 64 << 20)])
def test_fiber_stack_sizes(tmp_path, text, size):
    assert load(write(tmp_path, AGG + f"[aggregate]\nfiber_stack = {text}\n")).agg_fiber_stack == size


def test_eight_pools_are_allowed_and_a_route_to_a_call_io_uring_lacks_is_fine(tmp_path):
    text = AGG + "".join(pool(f"p{i}") for i in range(MAX_POOLS))
    text += '[aggregate.route]\ngetdents64 = "p7"\nwait4 = "p0"\nmmap = "p3"\nclone3 = "native"\n'
    p = load(write(tmp_path, text))
    assert len(p.agg_pools) == MAX_POOLS
    assert aggenv.config(p).route == {NUMBERS["mmap"]: 3, NUMBERS["wait4"]: 0,
                                      NUMBERS["getdents64"]: 7, NUMBERS["clone3"]: "n"}


# --- errors ------------------------------------------------------------------------------

def _online_note():
    return f"(online: {ONLINE_TEXT})"


BAD = {
    "route-unknown-pool": (pool("net") + '[aggregate.route]\nsockets = "nte"\n',
                           'aggregate.route.sockets: unknown pool "nte" (did you mean "net"?); '
                           'pools: net (or "native", "worker")'),
    "route-unknown-pool-default-pools": ('[aggregate.route]\nfiles = "disk"\n',
                                         'aggregate.route.files: unknown pool "disk"; pools: main '
                                         '(or "native", "worker")'),
    "nine-pools": ("".join(pool(f"p{i}") for i in range(9)),
                   "aggregate.pools: 9 pools: at most 8 (the engine's limit)"),
    "no-pools": ("[aggregate]\npools = {}\n",
                 "aggregate.pools: no pools: define at least one [aggregate.pools.NAME]"),
    "pools-not-a-table": ("[aggregate]\npools = 3\n",
                          "aggregate.pools: wrong type: expected a table of pools "
                          "([aggregate.pools.NAME]), got integer 3"),
    "pool-not-a-table": ("[aggregate.pools]\nnet = 1\n",
                         "aggregate.pools.net: wrong type: expected a table "
                         "([aggregate.pools.net]), got integer 1"),
    "pool-named-native": (pool("native"),
                          'aggregate.pools.native: "native" is a route target, not a pool name'),
    "pool-name-not-a-word": ('[aggregate.pools."my pool"]\n',
                             'aggregate.pools."my pool": a pool name is a letter, then letters, '
                             "digits, _ or -"),
    "pool-unknown-key": (pool(entires=64),
                         'aggregate.pools.a.entires: unknown key (did you mean "entries"?); '
                         "known: entries, concurrency, cpus, sqpoll, priority, wait, wait_limit, "
                         "wait_timeout"),
    "cpu-does-not-exist": (pool(cpus="[0, 4095]"),
                           f"aggregate.pools.a.cpus[1]: CPU 4095 does not exist on this machine "
                           f"{_online_note()}"),
    "cpu-not-a-number": (pool(cpus='["0"]'),
                         'aggregate.pools.a.cpus[0]: wrong type: expected a CPU number (integer), '
                         'got string "0"'),
    "cpus-not-a-list": (pool(cpus=1),
                        "aggregate.pools.a.cpus: wrong type: expected an array of CPU numbers "
                        "([] for any CPU), got integer 1"),
    "sqpoll-cpu-does-not-exist": (pool(sqpoll=4095),
                                  "aggregate.pools.a.sqpoll: CPU 4095 does not exist on this "
                                  f"machine {_online_note()}"),
    "sqpoll-true": (pool(sqpoll="true"),
                    "aggregate.pools.a.sqpoll: wrong value: expected false or the CPU number of "
                    "the SQPOLL thread, got boolean true"),
    "entries-not-power-of-two": (pool(entries=100),
                                 "aggregate.pools.a.entries: 100 is not a power of two (the ring "
                                 "size: 64, 128, 256, ...)"),
    "entries-too-many": (pool(entries=65536),
                         "aggregate.pools.a.entries: out of range: 65536 is not in 1..32768"),
    "entries-zero": (pool(entries=0), "aggregate.pools.a.entries: out of range: 0 is not in 1..32768"),
    "priority-range": (pool(priority=20), "aggregate.pools.a.priority: out of range: 20 is not in "
                                          "-20..19"),
    "concurrency-negative": (pool(concurrency=-1),
                             "aggregate.pools.a.concurrency: out of range: -1 is not in 0..4096"),
    "unknown-wait": (pool(wait='"sometimes"'),
                     'aggregate.pools.a.wait: unknown value "sometimes": expected "none", "any", '
                     '"some", "all" or "adaptive" (did you mean "some"?)'),
    "some-without-limit": (pool(wait='"some"', wait_timeout='"100us"'),
                           'aggregate.pools.a.wait_limit: missing: wait = "some" needs wait_limit '
                           "(completions to wait for, 1 or more)"),
    "some-with-zero-limit": (pool(wait='"some"', wait_limit=0, wait_timeout='"100us"'),
                             'aggregate.pools.a.wait_limit: missing: wait = "some" needs '
                             "wait_limit (completions to wait for, 1 or more)"),
    "some-without-timeout": (pool(wait='"some"', wait_limit=4),
                             'aggregate.pools.a.wait_timeout: missing: wait = "some" needs '
                             'wait_timeout (the longest wait, such as "100us")'),
    "limit-above-entries": (pool(entries=64, wait='"some"', wait_limit=65, wait_timeout='"1ms"'),
                            "aggregate.pools.a.wait_limit: 65 is more than the ring holds "
                            "(entries = 64)"),
    "timeout-not-a-string": (pool(wait_timeout=100),
                             'aggregate.pools.a.wait_timeout: wrong type: expected a duration '
                             'such as "100us" or "2ms", got integer 100'),
    "timeout-unknown-unit": (pool(wait_timeout='"100 parsecs"'),
                             'aggregate.pools.a.wait_timeout: wrong value: expected a duration '
                             'such as "100us" or "2ms" (units ns, us, ms, s), got string '
                             '"100 parsecs"'),
    "timeout-sub-nanosecond": (pool(wait_timeout='"1.5ns"'),
                               "aggregate.pools.a.wait_timeout: 1.5ns is not a whole number of "
                               "nanoseconds"),
    "timeout-too-long": (pool(wait_timeout='"61s"'),
                         "aggregate.pools.a.wait_timeout: out of range: 61s is longer than 60s"),
    "must-stay-native-clone": ('[aggregate.route]\nclone = "main"\n',
                               "aggregate.route.clone: clone must stay native (it acts on the "
                               'calling thread or never returns): route it to "native" or leave '
                               "it out"),
    "must-stay-native-execve": ('[aggregate.route]\nexecve = "worker"\n',
                                "aggregate.route.execve: execve must stay native (it acts on the "
                                'calling thread or never returns): route it to "native" or leave '
                                "it out"),
    "must-stay-native-rt_sigreturn": ('[aggregate.route]\nrt_sigreturn = "main"\n',
                                      "aggregate.route.rt_sigreturn: rt_sigreturn must stay native "
                                      "(it acts on the calling thread or never returns): route it "
                                      'to "native" or leave it out'),
    "route-unknown-group": ('[aggregate.route]\nsokets = "main"\n',
                            'aggregate.route.sokets: unknown syscall or group (did you mean '
                            '"sockets"?); groups: ' + ", ".join(routing.ROUTE_KEYS)),
    "route-target-not-a-string": ("[aggregate.route]\nread = 0\n",
                                  'aggregate.route.read: wrong type: expected a pool name, '
                                  '"native" or "worker", got integer 0'),
    "route-not-a-table": ('[aggregate]\nroute = "main"\n',
                          "aggregate.route: wrong type: expected a table ([aggregate.route]: "
                          'syscall or group = target), got string "main"'),
    "workers-zero": ("[aggregate]\nworkers = 0\n",
                     "aggregate.workers: out of range: 0 is not in 1..1024"),
    "workers-string": ('[aggregate]\nworkers = "4"\n',
                       'aggregate.workers: wrong type: expected an integer (1..1024), got string '
                       '"4"'),
    "too-many-carriers": (f"[aggregate]\ncarriers = {len(ONLINE) + 1}\n",
                          f"aggregate.carriers: out of range: {len(ONLINE) + 1} is not in "
                          f"1..{len(ONLINE)} (at most one carrier per online CPU)"),
    "stack-not-pages": ("[aggregate]\nfiber_stack = 20000\n",
                        "aggregate.fiber_stack: 20000 bytes is not a whole number of 4096-byte "
                        "pages"),
    "stack-too-small": ('[aggregate]\nfiber_stack = "4KiB"\n',
                        "aggregate.fiber_stack: out of range: 4096 bytes is not in 16KiB..64MiB"),
    "stack-bad-unit": ('[aggregate]\nfiber_stack = "256KB"\n',
                       'aggregate.fiber_stack: wrong value: expected bytes such as 262144, '
                       '"256KiB" or "1MiB", got string "256KB"'),
    "unknown-aggregate-key": ("[aggregate]\nworker = 4\n",
                              'aggregate.worker: unknown key (did you mean "workers"?); known: '
                              "workers, fiber_stack, threads, quiet, carriers, pools, route"),
    "aggregate-key-at-top": ("workers = 4\n",
                             'workers: unknown key here: "workers" belongs in [aggregate]'),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_aggregate_setting_names_the_key_and_the_problem(tmp_path, case):
    text, problem = BAD[case]
    path = write(tmp_path, AGG + text)
    with pytest.raises(FerryError) as e:
        load(path)
    assert (e.value.path, e.value.problem) == (str(path), problem)


@pytest.mark.parametrize("case", sorted(BAD))
def test_ferry_profile_check_rejects_it_in_one_line_exit_2(tmp_path, case):
    text, problem = BAD[case]
    path = write(tmp_path, AGG + text)
    r = ferry("profile", "check", path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"ferry: {path}: {problem}\n")


@pytest.mark.skipif(len(online_cpus()) < 2, reason="needs two online CPUs to ask for two carriers")
def test_threads_as_fibers_on_two_carriers_is_accepted_and_passed_to_the_shim(tmp_path):
    path = write(tmp_path, AGG + '[aggregate]\nthreads = "fibers"\ncarriers = 2\n')
    r = ferry("profile", "check", path)
    assert (r.returncode, r.stderr) == (0, "")
    config = aggenv.decode(load(path).shim_env()["FERRY_AGG"])
    assert (config.threads, config.carriers) == ("fibers", 2)


def test_fibers_profile_asks_the_shim_for_threads_as_fibers():
    env = load("fibers").shim_env()
    assert env["FERRY_MODE"] == "aggregate"
    assert aggenv.decode(env["FERRY_AGG"]).threads == "fibers"


def test_the_aggregate_section_is_checked_in_every_mode(tmp_path):
    # as [trace] is: switching the mode is a one-line change, and a typo shows at once
    with pytest.raises(FerryError, match="entries: 100 is not a power of two"):
        load(write(tmp_path, 'mode = "count"\n' + pool(entries=100)))


def test_a_cpu_beyond_the_mask_is_rejected_on_a_machine_that_has_it(tmp_path, monkeypatch):
    from ferry.profiles import aggregate
    monkeypatch.setattr(aggregate, "online_cpus", lambda: list(range(128)))
    with pytest.raises(FerryError) as e:
        load(write(tmp_path, AGG + pool(cpus="[64]")))
    assert e.value.problem == "aggregate.pools.a.cpus[0]: CPU 64: a pool's CPUs must be 0..63"


# --- groups and must-native calls -------------------------------------------------------------

def test_groups_name_real_syscalls_are_disjoint_and_never_hold_a_must_native_call():
    seen = {}
    for group, names in routing.GROUPS.items():
        assert group not in NUMBERS, f"group {group} shadows a syscall"
        for name in names:
            assert name in NUMBERS, name
            assert name not in routing.MUST_NATIVE, name
            assert name not in seen, f"{name} in {group} and {seen.get(name)}"
            seen[name] = group
    assert routing.MUST_NATIVE <= set(NUMBERS)


def test_a_name_overrides_its_group_and_a_group_overrides_default():
    route = routing.expand({"default": "worker", "files": "p1", "read": "native"}, {"p1": 1})
    assert route[NUMBERS["read"]] == "n"
    assert route[NUMBERS["write"]] == 1
    assert route[NUMBERS["socket"]] == "w"
    for name in routing.MUST_NATIVE:
        assert NUMBERS[name] not in route, name     # default never covers them
    assert set(route) == {nr for nr, n in NAMES.items() if n not in routing.MUST_NATIVE}


# --- FERRY_AGG ------------------------------------------------------------------------------

def test_ferry_agg_of_the_default_profile():
    env = loads(AGG, "a.toml").shim_env()
    assert (env["FERRY_MODE"], env["FERRY_EVENTS"]) == ("aggregate", "0")
    assert env["FERRY_AGG"] == "workers=4;stack=262144;carriers=1;pool=256,0,0,-1,0,adaptive,0,0"


def test_ferry_agg_is_exactly_the_documented_format(tmp_path):
    cpu = ONLINE[-1]
    p = load(write(tmp_path, AGG + f"""
        [aggregate]
        workers = 4
        [aggregate.pools.a]
        concurrency = 4
        [aggregate.pools.b]
        entries = 64
        concurrency = 2
        cpus = [{cpu}]
        sqpoll = {cpu}
        priority = 5
        wait = "some"
        wait_limit = 16
        wait_timeout = "100us"
        [aggregate.route]
        read = "a"
        write = "a"
        openat = "b"
        flock = "worker"
        getpid = "native"
        """))
    assert p.shim_env()["FERRY_AGG"] == (
        "workers=4;stack=262144;carriers=1;pool=256,4,0,-1,0,adaptive,0,0;"
        f"pool=64,2,{1 << cpu:x},{cpu},5,some,16,100000;route=0:0,1:0,39:n,73:w,257:1")


def test_ferry_agg_is_only_given_in_mode_aggregate(tmp_path):
    for mode in ("off", "count", "trace"):
        env = load(write(tmp_path, f'mode = "{mode}"\n' + pool(wait='"all"'))).shim_env()
        assert "FERRY_AGG" not in env and env["FERRY_MODE"] == mode


@pytest.mark.parametrize("bad", ["", "workers", "workers=x", "pool=1,2,3", "pool=256,0,0,-1,0,sleep,0,0",
                                 "route=1:0", "pool=256,0,0,-1,0,any,0,0;route=1:1",
                                 "pool=256,0,zz,-1,0,any,0,0", "colour=red", "route=1"])
def test_the_test_parser_rejects_a_malformed_ferry_agg(bad):
    with pytest.raises(ValueError):
        aggenv.decode(bad)


# Profiles of every shape: up to 8 pools with any settings, route tables over syscalls and
# groups whose targets are pools, native or worker (must-native calls only to native).
_cpus = st.lists(st.sampled_from(ONLINE), max_size=3, unique=True).map(lambda c: tuple(sorted(c)))


@st.composite
def _pool(draw, name):
    wait = draw(st.sampled_from(("none", "any", "some", "all", "adaptive")))
    entries = 1 << draw(st.integers(0, 15))
    some = wait == "some"
    return Pool(name, entries=entries, concurrency=draw(st.integers(0, 4096)),
                cpus=draw(_cpus), sqpoll=draw(st.none() | st.sampled_from(ONLINE)),
                priority=draw(st.integers(-20, 19)), wait=wait,
                wait_limit=draw(st.integers(1 if some else 0, entries)),
                wait_timeout_ns=draw(st.integers(1 if some else 0, 60 * 10**9)))


@st.composite
def _aggregate_profiles(draw):
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,6}", fullmatch=True), min_size=1,
                          max_size=MAX_POOLS, unique=True)
                 .filter(lambda ns: not {"native", "worker"} & set(ns)))
    pools = tuple(draw(_pool(n)) for n in names)
    keys = draw(st.lists(st.sampled_from(sorted(NUMBERS) + list(routing.ROUTE_KEYS)),
                         max_size=12, unique=True))
    route = {}
    for k in keys:
        route[k] = "native" if k in routing.MUST_NATIVE else \
            draw(st.sampled_from(names + ["native", "worker"]))
    from ferry.profiles import Profile
    return Profile(name=draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True)), mode="aggregate",
                   agg_workers=draw(st.integers(1, 1024)),
                   agg_fiber_stack=4096 * draw(st.integers(4, 16384)),
                   agg_carriers=draw(st.integers(1, len(ONLINE))), agg_pools=pools,
                   agg_route=route)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_aggregate_profiles())
def test_to_toml_loads_back_equal_and_ferry_agg_parses_back_to_the_profile(p):
    assert loads(p.to_toml(), "saved.toml") == p
    env = p.shim_env()["FERRY_AGG"]
    assert aggenv.decode(env) == aggenv.config(p)
    c = aggenv.decode(env)
    assert [q.entries for q in c.pools] == [q.entries for q in p.agg_pools]  # numbered in order
    assert all(nr in NAMES for nr in c.route)


def test_shipped_profiles_round_trip_and_their_ferry_agg_parses_back():
    for p in shipped():
        assert loads(p.to_toml(), "saved.toml") == p
        if p.mode == "aggregate":
            assert aggenv.decode(p.shim_env()["FERRY_AGG"]) == aggenv.config(p)


def test_default_pools_are_the_engines_defaults():
    assert DEFAULT_POOLS == (Pool("main", entries=256, concurrency=0, cpus=(), sqpoll=None,
                                  priority=0, wait="adaptive", wait_limit=0, wait_timeout_ns=0),)


# --- ferry run ------------------------------------------------------------------------------

def _run(tmp_path, profile, *argv, env=None):
    out = tmp_path / "run"
    r = ferry("run", "--profile", profile, "-o", out, "--", *argv, env=env, cwd=tmp_path)
    return r, out


@pytest.mark.parametrize("profile", ["aggregate", "net"])
def test_ferry_run_with_an_aggregate_profile_runs_the_program(tmp_path, profile):
    r, out = _run(tmp_path, profile, "/bin/true")
    assert r.returncode == 0, r.stderr
    assert "FERRY_AGG" not in r.stderr          # the shim took it (or does not know the mode yet)
    info = json.loads((out / "info.json").read_text())
    assert info["profile"]["mode"] == "aggregate" and info["exit"] == {"code": 0, "signal": None}
    assert load(out / "profile.toml") == load(profile)
    model = json.loads(ferry("report", "--json", out).stdout)
    # The engine names the mode "aggregate"; a shim without it counts (docs/aggregate.md).
    assert [p["mode"] for p in model["processes"]] in (["aggregate"], ["count"])
    assert model["totals"]["calls"] >= 1


def test_the_shim_gets_ferry_agg_from_the_profile_and_no_stale_one(tmp_path, test_programs):
    # The profile's settings reach the shim (the group the program makes from
    # them has the profile's pools), never the program's environment, and a
    # stale FERRY_AGG in ferry's own environment reaches neither.
    stale = ferry_env(FERRY_AGG="workers=1;pool=2,0,0,-1,0,any,0,0")
    r, out = _run(tmp_path, "net", test_programs / "agg_results", "fiber", "pipes", tmp_path, env=stale)
    assert r.returncode == 0, r.stderr
    want = aggenv.config(load("net")).pools
    pools = load_run(out)["aggregation"]["pools"]
    assert [(p["entries"], p["wait"]) for p in pools] == [(p.entries, p.wait) for p in want]
    for profile in ("net", "count"):
        r, _ = _run(tmp_path, profile, "/usr/bin/env", env=stale)
        assert r.returncode == 0, r.stderr
        assert not re.search(r"^FERRY_(AGG|MODE)=", r.stdout, re.M)
