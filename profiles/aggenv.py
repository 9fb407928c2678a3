"""FERRY_AGG: a profile's [aggregate] settings as the shim reads them (docs/aggregate.md,
"FERRY_AGG"). `encode(profile)` writes the string; `decode(text)` reads one back into
the same `Config` that `config(profile)` gives, so the two can be compared.
`encode(profile, windows=True)` is a Windows program's (ferry.dll's): routes name
Nt calls (`NtReadFile:0`), which ferry.dll numbers from the ntdll it finds loaded.
"""
from dataclasses import dataclass, field

from . import routing
from .aggregate import WAIT_CODES

ROUTE_NATIVE, ROUTE_WORKER = "n", "w"


@dataclass(frozen=True)
class PoolConfig:
    entries: int
    concurrency: int
    cpus: int               # mask, bit n = CPU n
    sqpoll_cpu: int         # -1: no SQPOLL
    priority: int
    wait: str
    limit: int
    timeout_ns: int


@dataclass
class Config:
    workers: int
    stack: int
    carriers: int
    threads: str = "native"                        # "fibers": the program's threads run as fibers
    quiet: str = "ring"                            # "direct": the quiet path (ferry.h)
    pools: list = field(default_factory=list)      # PoolConfig, index = pool number
    route: dict = field(default_factory=dict)      # nr (Nt name) -> pool index, "n" or "w"


def config(profile, windows=False):
    """The engine's view of a profile: groups expanded, pools numbered; the route by
    syscall number, or for a Windows program (ferry.dll) by Nt name."""
    pools = [PoolConfig(p.entries, p.concurrency, p.cpu_mask,
                        -1 if p.sqpoll is None else p.sqpoll, p.priority, p.wait,
                        p.wait_limit, p.wait_timeout_ns) for p in profile.agg_pools]
    index = {p.name: i for i, p in enumerate(profile.agg_pools)}
    return Config(profile.agg_workers, profile.agg_fiber_stack, profile.agg_carriers,
                  profile.agg_threads, profile.agg_quiet, pools,
                  (routing.expand_windows if windows else routing.expand)(profile.agg_route, index))


def encode(profile, windows=False):
    c = config(profile, windows)
    items = [f"workers={c.workers}", f"stack={c.stack}", f"carriers={c.carriers}"]
    if c.threads == "fibers":
        items.append("threads=fibers")
    if c.quiet == "direct":
        items.append("quiet=direct")
    items += [f"pool={p.entries},{p.concurrency},{p.cpus:x},{p.sqpoll_cpu},{p.priority},"
              f"{p.wait},{p.limit},{p.timeout_ns}" for p in c.pools]
    if c.route:
        items.append("route=" + ",".join(f"{nr}:{t}" for nr, t in c.route.items()))
    return ";".join(items)


def _int(text, what, lo=None):
    try:
        n = int(text, 10)
    except ValueError:
        raise ValueError(f"{what}: not a number: {text!r}") from None
    if lo is not None and n < lo:
        raise ValueError(f"{what}: {n} is below {lo}")
    return n


def _pool(text):
    parts = text.split(",")
    if len(parts) != 8:
        raise ValueError(f"pool={text}: expected 8 fields, got {len(parts)}")
    entries, conc, cpus, sq, prio, wait, limit, timeout = parts
    if wait not in WAIT_CODES:
        raise ValueError(f"pool={text}: unknown wait {wait!r}")
    try:
        mask = int(cpus, 16)
    except ValueError:
        raise ValueError(f"pool={text}: cpus not hex: {cpus!r}") from None
    return PoolConfig(_int(entries, "entries", 0), _int(conc, "concurrency", 0), mask,
                      _int(sq, "sqpoll", -1), _int(prio, "priority"), wait,
                      _int(limit, "limit", 0), _int(timeout, "timeout", 0))


def _route(text, npools, route):
    for pair in text.split(","):
        nr, sep, target = pair.partition(":")
        if not sep:
            raise ValueError(f"route: {pair!r} is not nr:target")
        n = nr if routing.is_nt_name(nr) else _int(nr, "route syscall", 0)
        if target in (ROUTE_NATIVE, ROUTE_WORKER):
            route[n] = target
        else:
            i = _int(target, "route target", 0)
            if i >= npools:
                raise ValueError(f"route {n}: pool {i} does not exist ({npools} pools)")
            route[n] = i


def decode(text):
    """A FERRY_AGG string -> Config; ValueError naming the problem if malformed. Like the
    shim, items may come in any order, except that a route names pools already given."""
    c = Config(0, 0, 0)
    for item in text.split(";"):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not key=value")
        if key in ("workers", "stack", "carriers"):
            setattr(c, key, _int(value, key, 0))
        elif key == "threads":
            if value not in ("fibers", "native"):
                raise ValueError(f"threads: {value!r} is neither fibers nor native")
            c.threads = value
        elif key == "quiet":
            if value not in ("direct", "ring"):
                raise ValueError(f"quiet: {value!r} is neither direct nor ring")
            c.quiet = value
        elif key == "pool":
            c.pools.append(_pool(value))
        elif key == "route":
            _route(value, len(c.pools), c.route)
        else:
            raise ValueError(f"unknown item {key!r}")
    return c
