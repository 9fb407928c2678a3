"""Load, validate and write profiles; the format itself is declared in schema.py."""
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import FerryError
from .aggregate import DEFAULT_POOLS
from .schema import (FORMAT_VERSION, SECTIONS, Invalid, dotted, suggest, toml_table, toml_value,
                     validate)

SHIPPED_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True, kw_only=True)
class Profile:
    """What the shim does for one application. `path` (the file it came from, if
    any) does not take part in comparisons."""
    name: str
    description: str = ""
    mode: str
    trace_syscalls: list | None = None      # None: time all; else sorted syscall numbers
    events: bool = False
    event_buffer: int = 65536
    catch_all: bool = True
    agg_workers: int = 4
    agg_fiber_stack: int = 256 * 1024
    agg_carriers: int = 1
    agg_threads: str = "native"
    agg_quiet: str = "ring"
    agg_pools: tuple = DEFAULT_POOLS         # aggregate.Pool, numbered in this order
    agg_route: dict = field(default_factory=dict)   # syscall or group -> pool, "native", "worker"
    path: Path | None = field(default=None, compare=False)

    def shim_env(self):
        """The environment variables that tell the shim what to do.

        The [trace] settings only apply in mode trace: in the other modes the
        shim is told to record no events and gets no syscall selection. The
        [aggregate] settings (FERRY_AGG, docs/aggregate.md) only in mode aggregate."""
        env = {"FERRY_MODE": self.mode}
        tracing = self.mode == "trace"
        if tracing and self.trace_syscalls is not None:
            env["FERRY_TRACE_SYSCALLS"] = ",".join(str(n) for n in self.trace_syscalls)
        env["FERRY_EVENTS"] = str(self.event_buffer) if tracing and self.events else "0"
        if self.catch_all and self.mode != "off":
            env["FERRY_CATCH_ALL"] = "1"
        if self.mode == "aggregate":
            from .aggenv import encode
            env["FERRY_AGG"] = encode(self)
        return env

    def settings(self):
        """[(dotted key, TOML value text, used in this mode)] for every setting."""
        rows = []
        for section, sec in SECTIONS.items():
            for key, spec in sec.keys.items():
                value, used = spec.write(getattr(self, spec.field)), self.mode in sec.modes
                if isinstance(value, dict) and value and all(isinstance(v, dict)
                                                             for v in value.values()):
                    # a table of tables (the pools): a row each, not one huge line
                    rows += [(f"{dotted(section, key)}.{dotted('', k)}", toml_value(v), used)
                             for k, v in value.items()]
                else:
                    rows.append((dotted(section, key), toml_value(value), used))
        return rows

    def to_toml(self):
        """The profile as a complete TOML file (every key written); load() reads it back
        as an equal Profile."""
        lines = [f"# Ferry profile (format version {FORMAT_VERSION}; see profiles/README.md)"]
        for section, sec in SECTIONS.items():
            table = {key: spec.write(getattr(self, spec.field)) for key, spec in sec.keys.items()}
            lines += toml_table(section, table)
        return "\n".join(lines) + "\n"


def shipped_paths():
    """{name: path} of the profiles shipped in profiles/*.toml."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.toml"))}


def shipped():
    """Every shipped profile, loaded, sorted by name."""
    return [load_file(p) for p in shipped_paths().values()]


def is_path(name_or_path):
    """A Path, or a string with a / or ending in .toml, names a file; else a shipped profile."""
    if isinstance(name_or_path, Path):
        return True
    return "/" in name_or_path or name_or_path.endswith(".toml")


def resolve(name_or_path):
    """The file a profile name or path stands for (not checked for existence if a path)."""
    if is_path(name_or_path):
        return Path(name_or_path)
    paths = shipped_paths()
    if name_or_path in paths:
        return paths[name_or_path]
    problem = f"no shipped profile of this name{suggest(name_or_path, paths)}; " \
              f"shipped: {', '.join(paths) or 'none'}"
    for here in (name_or_path, f"{name_or_path}.toml"):
        if Path(here).exists():
            problem += f"; for the file here, write ./{here}"
            break
    raise FerryError(name_or_path, problem)


def load(name_or_path):
    """The Profile of a shipped name (`trace`) or of a file (`./my.toml`, `x/y.toml`).

    Raises FerryError(file, "key: problem") when the file is missing, unreadable,
    not TOML, or does not fit the format."""
    if is_path(name_or_path):
        return load_file(name_or_path)
    return load_file(resolve(name_or_path))


def read_text(path):
    """The text of a profile file, or FerryError naming what stops it being read."""
    p = Path(path)
    try:
        if not p.exists():
            raise FerryError(path, "no such file")
        if not p.is_file():
            raise FerryError(path, "not a file" + (" (a directory)" if p.is_dir() else ""))
        data = p.read_bytes()
    except PermissionError:
        raise FerryError(path, "cannot read it: permission denied") from None
    except OSError as e:
        raise FerryError(path, f"cannot read it: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise FerryError(path, f"line {line}: not UTF-8 text (byte 0x{data[e.start]:02x})") \
            from None


def load_file(path):
    return loads(read_text(path), path)


_TOML_WHERE = re.compile(r"^(?P<msg>.*?)\s*\((?:at line (?P<line>\d+), column (?P<col>\d+)"
                         r"|at (?P<end>end of document))\)$", re.S)


def loads(text, path):
    """The Profile in TOML `text`; `path` names it in errors and gives its default name."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_WHERE.match(str(e))
        if not m:
            raise FerryError(path, f"invalid TOML: {e}") from None
        where = f"line {m['line']}, column {m['col']}" if m["line"] else "end of file"
        msg = m["msg"][:1].lower() + m["msg"][1:]
        raise FerryError(path, f"{where}: invalid TOML: {msg}") from None
    try:
        parsed = validate(doc, Path(path))
    except Invalid as e:
        raise FerryError(path, str(e)) from None
    return Profile(**parsed.values, path=Path(path))


def given_keys(text):
    """The dotted keys a valid profile's TOML text sets itself (the others are defaults)."""
    return validate(tomllib.loads(text), Path("profile.toml")).given

