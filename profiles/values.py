"""Reading and writing the values of a profile: the readers that check a TOML value
and convert it (raising `Invalid(dotted key, problem)`), the helpers that describe a
value in a message, and the TOML writer. schema.py declares which key uses which."""
import datetime
import difflib
import re
import unicodedata

from ..base.syscall_table import NAMES, NUMBERS


class Invalid(Exception):
    """A value that does not fit the format: `key` (dotted) and what is wrong."""

    def __init__(self, key, problem):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


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


# --- writing ------------------------------------------------------------------------------

def toml_value(value):
    """A Python value (str, bool, int, list or dict of those) as TOML text (a dict as an
    inline table)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key_name(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def toml_table(header, table):
    """Lines of a TOML table: its plain keys under [header] (no header line for the top
    level), then each table-valued key as its own [header.key]; a table holding only
    tables gets no header line of its own."""
    plain = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    nested = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    lines = []
    if header and (plain or not nested):
        lines += ["", f"[{header}]"]
    lines += [f"{key_name(k)} = {toml_value(v)}" for k, v in plain]
    for k, v in nested:
        lines += toml_table(f"{header}.{key_name(k)}" if header else key_name(k), v)
    return lines
