"""The [aggregate] section of a profile: the keys' readers and writers, the pools, the
route table, and the checks that span keys (a route naming a pool that is not there).

The settings mirror `struct ferry_group_config` in shim/include/ferry.h; `aggenv`
turns them into FERRY_AGG. Checks that depend on the machine (CPU numbers, the
number of carriers) use the CPUs online now: a profile is checked where it runs.
"""
import re
from dataclasses import dataclass
from pathlib import Path

from ..base.syscall_table import NUMBERS
from . import routing
from .values import Invalid, choice, integer, key_name, quote, shown, suggest, wrong_type

MAX_POOLS = 8                  # FERRY_MAX_POOLS
MASK_BITS = 64                 # a pool's CPUs are a u64 mask
RING_MAX = 32768               # IORING_MAX_ENTRIES
WAITS = ("none", "any", "some", "all", "adaptive")
WAIT_CODES = {w: i for i, w in enumerate(WAITS)}   # enum ferry_wait
STACK_MIN, STACK_MAX = 16 * 1024, 64 * 1024 * 1024
TIMEOUT_MAX_NS = 60 * 10**9
_POOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Pool:
    """One io_uring instance of the group; the defaults are the engine's."""
    name: str
    entries: int = 256
    concurrency: int = 0              # io-wq worker limit; 0: the kernel's default
    cpus: tuple = ()                  # CPU numbers for io-wq workers; (): any CPU
    sqpoll: int | None = None         # CPU of a pinned SQPOLL thread; None: no SQPOLL
    priority: int = 0
    wait: str = "adaptive"
    wait_limit: int = 0               # wait = "some": completions to wait for
    wait_timeout_ns: int = 0          # wait = "some": the longest wait

    @property
    def cpu_mask(self):
        return sum(1 << c for c in self.cpus)


DEFAULT_POOLS = (Pool("main"),)


# --- the machine ------------------------------------------------------------------------

def _parse_cpu_list(text):
    cpus = set()
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def online_cpus():
    """The CPU numbers online on this machine."""
    try:
        return sorted(_parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    except (OSError, ValueError):
        import os
        return list(range(os.cpu_count() or 1))


def _cpu_ranges(cpus):
    runs, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            runs.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(runs)


def cpu(value, key):
    """A CPU number that exists on this machine and fits a pool's mask."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(key, "a CPU number (integer)", value)
    online = online_cpus()
    if value not in online:
        raise Invalid(key, f"CPU {value} does not exist on this machine "
                           f"(online: {_cpu_ranges(online)})")
    if value >= MASK_BITS:
        raise Invalid(key, f"CPU {value}: a pool's CPUs must be 0..{MASK_BITS - 1}")
    return value


# --- sizes and durations -----------------------------------------------------------------

_SIZE = re.compile(r"(\d+)\s*(KiB|K|MiB|M)?")
_SIZE_UNITS = {None: 1, "K": 1024, "KiB": 1024, "M": 1024**2, "MiB": 1024**2}


def size(value, key):
    """Fiber stack bytes: an integer, or a string such as "256KiB" or "1MiB"."""
    if isinstance(value, str):
        m = _SIZE.fullmatch(value.strip())
        if not m:
            raise Invalid(key, f'wrong value: expected bytes such as 262144, "256KiB" or '
                               f'"1MiB", got {shown(value)}')
        value = int(m[1]) * _SIZE_UNITS[m[2]]
    elif isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(key, 'bytes (an integer, or a string such as "256KiB")', value)
    if not STACK_MIN <= value <= STACK_MAX:
        raise Invalid(key, f"out of range: {value} bytes is not in 16KiB..64MiB")
    if value % 4096:
        raise Invalid(key, f"{value} bytes is not a whole number of 4096-byte pages")
    return value


def write_size(n):
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return n


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)")
_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9}


def duration(value, key):
    """A duration string ("100us", "2ms", "1.5ms", "0s") -> nanoseconds."""
    if not isinstance(value, str):
        raise wrong_type(key, 'a duration such as "100us" or "2ms"', value)
    m = _DURATION.fullmatch(value.strip())
    if not m:
        raise Invalid(key, f'wrong value: expected a duration such as "100us" or "2ms" '
                           f'(units ns, us, ms, s), got {shown(value)}')
    whole, _, frac = m[1].partition(".")
    unit = _NS[m[2]]
    ns = int(whole) * unit + (int(frac) * unit // 10**len(frac) if frac else 0)
    if frac and int(frac) * unit % 10**len(frac):
        raise Invalid(key, f"{value} is not a whole number of nanoseconds")
    if ns > TIMEOUT_MAX_NS:
        raise Invalid(key, f"out of range: {value} is longer than 60s")
    return ns


def write_duration(ns):
    for unit in ("s", "ms", "us"):
        if ns and ns % _NS[unit] == 0:
            return f"{ns // _NS[unit]}{unit}"
    return f"{ns}ns" if ns else "0s"


# --- pools ---------------------------------------------------------------------------------

def _power_of_two(value, key):
    value = integer(1, RING_MAX)(value, key)
    if value & (value - 1):
        raise Invalid(key, f"{value} is not a power of two (the ring size: 64, 128, 256, ...)")
    return value


def _cpu_list(value, key):
    if not isinstance(value, list):
        raise wrong_type(key, "an array of CPU numbers ([] for any CPU)", value)
    return tuple(sorted({cpu(c, f"{key}[{i}]") for i, c in enumerate(value)}))


def _sqpoll(value, key):
    if value is False:
        return None
    if value is True:
        raise Invalid(key, "wrong value: expected false or the CPU number of the SQPOLL "
                           "thread, got boolean true")
    if not isinstance(value, int):
        raise wrong_type(key, "false or a CPU number", value)
    return cpu(value, key)


POOL_KEYS = {   # key -> (Pool field, reader, writer)
    "entries": ("entries", _power_of_two, int),
    "concurrency": ("concurrency", integer(0, 4096), int),
    "cpus": ("cpus", _cpu_list, list),
    "sqpoll": ("sqpoll", _sqpoll, lambda v: False if v is None else v),
    "priority": ("priority", integer(-20, 19), int),
    "wait": ("wait", choice(*WAITS), str),
    "wait_limit": ("wait_limit", integer(0, RING_MAX), int),
    "wait_timeout": ("wait_timeout_ns", duration, write_duration),
}


def _pool(name, table, key):
    if not isinstance(table, dict):
        raise wrong_type(key, f"a table ([{key}])", table)
    values = {}
    for k, v in table.items():
        if k not in POOL_KEYS:
            raise Invalid(f"{key}.{key_name(k)}", f"unknown key{suggest(k, POOL_KEYS)}; "
                                                  f"known: {', '.join(POOL_KEYS)}")
        field, read, _ = POOL_KEYS[k]
        values[field] = read(v, f"{key}.{k}")
    pool = Pool(name, **values)
    if pool.wait == "some":
        if not pool.wait_limit:
            raise Invalid(f"{key}.wait_limit", 'missing: wait = "some" needs wait_limit '
                                               "(completions to wait for, 1 or more)")
        if not pool.wait_timeout_ns:
            raise Invalid(f"{key}.wait_timeout", 'missing: wait = "some" needs wait_timeout '
                                                 '(the longest wait, such as "100us")')
    if pool.wait_limit > pool.entries:
        raise Invalid(f"{key}.wait_limit", f"{pool.wait_limit} is more than the ring holds "
                                           f"(entries = {pool.entries})")
    return pool


def pools(value, key):
    """[aggregate.pools.NAME] tables -> a tuple of Pool, in the order written."""
    if not isinstance(value, dict):
        raise wrong_type(key, "a table of pools ([aggregate.pools.NAME])", value)
    if not value:
        raise Invalid(key, "no pools: define at least one [aggregate.pools.NAME]")
    if len(value) > MAX_POOLS:
        raise Invalid(key, f"{len(value)} pools: at most {MAX_POOLS} (the engine's limit)")
    out = []
    for name, table in value.items():
        where = f"{key}.{key_name(name)}"
        if name in (routing.NATIVE, routing.WORKER):
            raise Invalid(where, f"{quote(name)} is a route target, not a pool name")
        if not _POOL_NAME.fullmatch(name):
            raise Invalid(where, "a pool name is a letter, then letters, digits, _ or -")
        out.append(_pool(name, table, where))
    return tuple(out)


def write_pools(value):
    return {p.name: {k: write(getattr(p, field)) for k, (field, _, write) in POOL_KEYS.items()}
            for p in value}


# --- route -----------------------------------------------------------------------------------

def route(value, key):
    """[aggregate.route]: syscall name or group -> pool name, "native" or "worker"."""
    if not isinstance(value, dict):
        raise wrong_type(key, "a table ([aggregate.route]: syscall or group = target)", value)
    for k, target in value.items():
        where = f"{key}.{key_name(k)}"
        if k not in NUMBERS and k not in routing.ROUTE_KEYS and not routing.is_nt_name(k):
            raise Invalid(where, f"unknown syscall or group{suggest(k, [*routing.ROUTE_KEYS, *NUMBERS])}"
                                 f"; groups: {', '.join(routing.ROUTE_KEYS)}")
        if not isinstance(target, str):
            raise wrong_type(where, 'a pool name, "native" or "worker"', target)
        if routing.must_stay_native(k) and target != routing.NATIVE:
            raise Invalid(where, f"{k} must stay native (it acts on the calling thread or "
                                 f'never returns): route it to "native" or leave it out')
    return dict(value)


def check(values, section):
    """Checks across keys: every route target is "native", "worker" or a pool."""
    names = [p.name for p in values["agg_pools"]]
    for k, target in values["agg_route"].items():
        if target in (routing.NATIVE, routing.WORKER) or target in names:
            continue
        raise Invalid(f"{section}.route.{key_name(k)}",
                      f"unknown pool {quote(target)}{suggest(target, names)}; pools: "
                      f'{", ".join(names)} (or "native", "worker")')


def carriers(value, key):
    n = len(online_cpus())
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(key, f"an integer (1..{n})", value)
    if not 1 <= value <= n:
        raise Invalid(key, f"out of range: {value} is not in 1..{n} (at most one carrier "
                           f"per online CPU)")
    return value
