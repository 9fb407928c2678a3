"""The profile format, declared in one table: `SECTIONS`.

Each section (the top level is the section "") maps its keys to a `Key`: the
`Profile` field it fills, its default, a reader that checks a TOML value and
turns it into the field's value, and a writer for the way back (`to_toml`).
Adding a setting is adding a `Key`; adding a section (`[aggregate]`, ...) is
adding a `Section`. Readers raise `Invalid(key, problem)`; the loader turns that
into one line naming the file, the dotted key and the problem.
"""
import datetime
import difflib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable

from ..rewriter.syscall_table import NAMES, NUMBERS

FORMAT_VERSION = 1
MODES = ("off", "count", "trace")

REQUIRED = object()  # a Key's default when the key must be given


class Invalid(Exception):
    """A value that does not fit the format: `key` (dotted) and what is wrong."""

    def __init__(self, key, problem):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


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


# --- describing values in messages ---------------------------------------------------

def toml_type(value):
    """The TOML name of a parsed value's type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, datetime.datetime):
        return "datetime"
    if isinstance(value, datetime.date):
        return "date"
    if isinstance(value, datetime.time):
        return "time"
    return type(value).__name__


def quote(text):
    """`text` as a TOML basic string (also how messages show strings)."""
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def shown(value, limit=40):
    """A value as a message shows it after its type: `string "yes"`, `integer 5`."""
    kind = toml_type(value)
    if isinstance(value, str):
        text = quote(value if len(value) <= limit else value[:limit] + "...")
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, (datetime.date, datetime.time)):
        text = value.isoformat()
    else:
        return kind
    return f"{kind} {text}"


def wrong_type(key, expected, value):
    return Invalid(key, f"wrong type: expected {expected}, got {shown(value)}")


def suggest(word, candidates, fold=False):
    """' (did you mean "x"?)' for the closest candidate, or ''."""
    pool = {c.lower() if fold else c: c for c in candidates}
    match = difflib.get_close_matches(word.lower() if fold else word, list(pool), n=1,
                                      cutoff=0.6)
    return f' (did you mean "{pool[match[0]]}"?)' if match else ""


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_name(part):
    """One part of a dotted key, quoted the TOML way when it is not a bare key."""
    return part if _BARE_KEY.fullmatch(part) else quote(part)


def dotted(section, key):
    return f"{key_name(section)}.{key_name(key)}" if section else key_name(key)


# --- readers --------------------------------------------------------------------------

def boolean(value, key):
    if not isinstance(value, bool):
        raise wrong_type(key, "a boolean (true or false)", value)
    return value


def integer(lo, hi):
    def read(value, key):
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(key, f"an integer ({lo}..{hi})", value)
        if not lo <= value <= hi:
            raise Invalid(key, f"out of range: {value} is not in {lo}..{hi}")
        return value
    return read


def one_line(value, key):
    """A non-empty string of one line with no control characters."""
    if not isinstance(value, str):
        raise wrong_type(key, "a string", value)
    if not value.strip():
        raise Invalid(key, "must not be empty")
    bad = [ch for ch in value if unicodedata.category(ch) in ("Cc", "Zl", "Zp")]
    if bad:
        raise Invalid(key, f"must be one line without control characters "
                           f"(has U+{ord(bad[0]):04X})")
    return value


def text(value, key):
    if not isinstance(value, str):
        raise wrong_type(key, "a string", value)
    return value


def choice(*options):
    listed = ", ".join(f'"{o}"' for o in options[:-1]) + f' or "{options[-1]}"'

    def read(value, key):
        if not isinstance(value, str):
            raise wrong_type(key, f"a string ({listed})", value)
        if value not in options:
            raise Invalid(key, f"unknown value {quote(value)}: expected {listed}"
                               f"{suggest(value, options, fold=True)}")
        return value
    return read


def syscall_set(value, key):
    """"all" -> None; an array of syscall names -> sorted unique numbers."""
    if isinstance(value, str):
        if value == "all":
            return None
        hint = f' (for one syscall write [{quote(value)}])' if value in NUMBERS else ""
        raise Invalid(key, f'wrong value: expected "all" or an array of syscall names, '
                           f'got {shown(value)}{hint}')
    if not isinstance(value, list):
        raise wrong_type(key, '"all" or an array of syscall names', value)
    if not value:
        raise Invalid(key, 'empty array: name at least one syscall, or write "all"')
    numbers = set()
    for i, name in enumerate(value):
        item = f"{key}[{i}]"
        if not isinstance(name, str):
            raise wrong_type(item, "a syscall name (string)", name)
        if name not in NUMBERS:
            raise Invalid(item, f"unknown syscall {quote(name)}{suggest(name, NUMBERS, fold=True)}")
        numbers.add(NUMBERS[name])
    return sorted(numbers)


def syscall_names(numbers):
    return "all" if numbers is None else [NAMES[n] for n in numbers]


def same(value):
    return value


# --- the format -----------------------------------------------------------------------

EVENT_BUFFER_MIN, EVENT_BUFFER_MAX = 1024, 16 * 1024 * 1024

SECTIONS = {
    "": Section(doc="top level", keys={
        "name": Key("name", lambda path: path.stem, one_line, same,
                    "the profile's name; defaults to the file's stem"),
        "description": Key("description", "", text, same, "one sentence for `ferry profile list`"),
        "mode": Key("mode", REQUIRED, choice(*MODES), same,
                    '"off" (pass-through), "count" (counts only) or "trace" (counts, '
                    'errors, times)'),
    }),
    "trace": Section(doc="what mode trace records", modes=("trace",), keys={
        "syscalls": Key("trace_syscalls", None, syscall_set, syscall_names,
                        '"all", or the syscalls to time (the others are only counted)'),
        "events": Key("events", False, boolean, same,
                      "record the per-call event trace (timeline export)"),
        "event_buffer": Key("event_buffer", 65536, integer(EVENT_BUFFER_MIN, EVENT_BUFFER_MAX),
                            same, "events kept per thread (ring buffer)"),
    }),
    "children": Section(doc="child processes", keys={
        "follow": Key("follow_children", True, boolean, same,
                      "enable the children a program starts, too"),
    }),
}


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
        if key in SECTIONS and key:
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
    return parsed


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


def toml_value(value):
    """A Python value (str, bool, int, list of those) as TOML text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
