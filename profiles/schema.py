"""The profile format, declared in one table: `SECTIONS`.

Each section (the top level is the section "") maps its keys to a `Key`: the
`Profile` field it fills, its default, a reader that checks a TOML value and
turns it into the field's value, and a writer for the way back (`to_toml`).
Adding a setting is adding a `Key`; adding a section (`[aggregate]`, ...) is
adding a `Section`. Readers raise `Invalid(key, problem)`; the loader turns that
into one line naming the file, the dotted key and the problem.
"""
from dataclasses import dataclass, field
from typing import Any, Callable

from . import aggregate as agg
from .values import (Invalid, boolean, choice, dotted, integer, key_name, one_line, quote,  # noqa: F401
                     same, shown, suggest, syscall_names, syscall_set, text, toml_table,
                     toml_type, toml_value, wrong_type)

FORMAT_VERSION = 1
MODES = ("off", "count", "trace", "aggregate")

REQUIRED = object()  # a Key's default when the key must be given


@dataclass(frozen=True)
class Key:
    field: str                              # the Profile attribute it fills
    default: Any                            # REQUIRED, a value, or a callable(path)
    read: Callable[[Any, str], Any]         # (TOML value, dotted key) -> field value
    write: Callable[[Any], Any]             # field value -> TOML value
    doc: str


@dataclass(frozen=True)
class Section:
    keys: dict                              # key name -> Key
    doc: str
    modes: tuple = MODES                    # modes in which its settings are used
    check: Callable[[dict, str], None] = None   # (Profile field values, section) -> raise Invalid


# --- the format -----------------------------------------------------------------------

EVENT_BUFFER_MIN, EVENT_BUFFER_MAX = 1024, 16 * 1024 * 1024

SECTIONS = {
    "": Section(doc="top level", keys={
        "name": Key("name", lambda path: path.stem, one_line, same,
                    "the profile's name; defaults to the file's stem"),
        "description": Key("description", "", text, same, "one sentence for `ferry profile list`"),
        "mode": Key("mode", REQUIRED, choice(*MODES), same,
                    '"off" (pass-through), "count" (counts only), "trace" (counts, '
                    'errors, times) or "aggregate" (counts; fibers\' calls batched on io_uring)'),
        "catch_all": Key("catch_all", True, boolean, same,
                         "also catch calls from code no rewrite patched (Syscall User Dispatch: "
                         "about 40 ns on every call, a signal per caught call); not in mode off"),
    }),
    "trace": Section(doc="what mode trace records", modes=("trace",), keys={
        "syscalls": Key("trace_syscalls", None, syscall_set, syscall_names,
                        '"all", or the syscalls to time (the others are only counted)'),
        "events": Key("events", False, boolean, same,
                      "record the per-call event trace (timeline export)"),
        "event_buffer": Key("event_buffer", 65536, integer(EVENT_BUFFER_MIN, EVENT_BUFFER_MAX),
                            same, "events kept per thread (ring buffer)"),
    }),
    "aggregate": Section(doc="aggregation: pools, routing, fibers", modes=("aggregate",),
                         check=agg.check, keys={
        "workers": Key("agg_workers", 4, integer(1, 1024), same,
                       "worker threads for calls routed to \"worker\""),
        "fiber_stack": Key("agg_fiber_stack", 256 * 1024, agg.size, agg.write_size,
                           'bytes per fiber stack ("256KiB"), plus a guard page'),
        "threads": Key("agg_threads", "native", choice("native", "fibers"), same,
                       '"fibers": the program\'s own threads run as fibers on the carriers '
                       '(transparent hybrid threading); "native": only the API makes fibers'),
        "quiet": Key("agg_quiet", "ring", choice("ring", "direct"), same,
                     '"direct": a fiber alone on its carrier (no other ready) makes the calls '
                     "that cannot block at once, as system calls; \"ring\": every call as routed"),
        "carriers": Key("agg_carriers", 1, agg.carriers, same,
                        "carrier threads for transparent fiber mode (at most the online CPUs)"),
        "pools": Key("agg_pools", agg.DEFAULT_POOLS, agg.pools, agg.write_pools,
                     "[aggregate.pools.NAME] tables: one io_uring instance each, at most 8"),
        "route": Key("agg_route", lambda path: {}, agg.route, same,
                     "syscall or group = pool name, \"native\" or \"worker\""),
    }),
}

# Keys profiles no longer have, with the one value that keeps their meaning:
# such a file (every run directory's profile.toml written so far) still loads.
RETIRED = {"children": {"follow": (True, "every child a program starts is enabled; remove the key")}}


@dataclass
class Parsed:
    values: dict = field(default_factory=dict)   # Profile field -> value
    given: set = field(default_factory=set)      # dotted keys present in the file


def _where_else(key, section):
    """Sections other than `section` that declare `key`."""
    return [s for s, sec in SECTIONS.items() if s != section and key in sec.keys]


def _unknown(section, key, known, value=None):
    name = dotted(section, key)
    if not section and isinstance(value, dict):
        sections = [s for s in SECTIONS if s]
        return Invalid(name, f"unknown section [{name}]{suggest(key, sections)}; "
                             f"known: {', '.join(sections)}")
    elsewhere = _where_else(key, section)
    if elsewhere:
        home = elsewhere[0]
        where = f"[{home}]" if home else "the top level (before any [section])"
        return Invalid(name, f'unknown key here: "{key}" belongs in {where}')
    return Invalid(name, f"unknown key{suggest(key, known)}; known: {', '.join(known)}")


def validate(doc, path):
    """Check a parsed TOML document against SECTIONS; returns Parsed or raises Invalid."""
    parsed = Parsed()
    top = SECTIONS[""]
    for key, value in doc.items():
        if key in RETIRED and isinstance(value, dict):
            _check_retired(key, value)
        elif key in SECTIONS and key:
            if not isinstance(value, dict):
                raise wrong_type(key_name(key), f"a table ([{key}])", value)
            _validate_section(key, value, parsed)
        elif key in top.keys:
            _read_key("", key, value, parsed)
        else:
            raise _unknown("", key, list(top.keys) + [s for s in SECTIONS if s], value)
    for section, sec in SECTIONS.items():
        for key, spec in sec.keys.items():
            if spec.field in parsed.values:
                continue
            if spec.default is REQUIRED:
                raise Invalid(dotted(section, key), f"missing: this key is required ({spec.doc})")
            parsed.values[spec.field] = spec.default(path) if callable(spec.default) \
                else spec.default
    for section, sec in SECTIONS.items():
        if sec.check:
            sec.check(parsed.values, section)
    return parsed


def _check_retired(section, table):
    for key, value in table.items():
        if key not in RETIRED[section]:
            raise _unknown(section, key, list(RETIRED[section]))
        kept, why = RETIRED[section][key]
        if value is not kept:
            raise Invalid(dotted(section, key), f"no longer a setting: {why}")


def _validate_section(section, table, parsed):
    keys = SECTIONS[section].keys
    for key, value in table.items():
        if key not in keys:
            raise _unknown(section, key, list(keys))
        _read_key(section, key, value, parsed)


def _read_key(section, key, value, parsed):
    spec = SECTIONS[section].keys[key]
    name = dotted(section, key)
    parsed.values[spec.field] = spec.read(value, name)
    parsed.given.add(name)
