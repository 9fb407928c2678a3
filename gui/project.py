"""A project: one program to study, kept in a small TOML file (`NAME.ferryproj`).

    format = 1
    application = "/path/to/program"     # a path, or a command found on PATH
    arguments = ["-v", "input.txt"]
    working_directory = "."              # relative to the project's folder
    profile = "trace"                    # a shipped profile, or a file (relative to the folder)

    [environment]                        # added to the environment of the program
    "LANG" = "C"

Runs are kept next to the file, in `<folder>/runs/<n>` (run directories of
docs/run.md). Errors are FerryError("FILE", "key: problem"), like profiles.
"""
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..profiles.loader import is_path, shipped_paths
from ..profiles.schema import key_name, shown, suggest, toml_value
from ..base.errors import FerryError

SUFFIX = ".ferryproj"
FORMAT_VERSION = 1
RUNS = "runs"


@dataclass
class Project:
    path: Path
    application: str = ""
    arguments: list = field(default_factory=list)
    working_directory: str = "."
    environment: dict = field(default_factory=dict)
    profile: str = "trace"

    def __post_init__(self):
        self.path = Path(self.path).absolute()

    @property
    def name(self):
        return self.path.stem

    @property
    def folder(self):
        return self.path.parent

    @property
    def runs_dir(self):
        return self.folder / RUNS

    def cwd(self):
        """The working directory of the program (absolute)."""
        return (self.folder / os.path.expanduser(self.working_directory or ".")).resolve()

    def argv(self):
        return [self.application] + list(self.arguments)

    def profile_is_file(self):
        return is_path(self.profile)

    def profile_file(self):
        """The file of the profile: the shipped one, or the project's own (absolute)."""
        if self.profile_is_file():
            return (self.folder / os.path.expanduser(self.profile)).resolve()
        return shipped_paths().get(self.profile)

    def profile_argument(self):
        """What `ferry run --profile` is given."""
        return str(self.profile_file()) if self.profile_is_file() else self.profile

    def custom_profile_name(self):
        """The file name of the project's own profile, when it has one of its own."""
        return f"{self.name}-profile.toml"

    def run_dirs(self):
        """The project's run directories, oldest first (runs/1, runs/2, ...)."""
        if not self.runs_dir.is_dir():
            return []
        found = [p for p in self.runs_dir.iterdir() if p.name.isdigit() and p.is_dir()]
        return sorted(found, key=lambda p: int(p.name))

    def next_run_dir(self):
        dirs = self.run_dirs()
        return self.runs_dir / str(int(dirs[-1].name) + 1 if dirs else 1)

    def to_toml(self):
        lines = [f"# Ferry project (ferry gui {self.path.name})",
                 f"format = {FORMAT_VERSION}",
                 f"application = {toml_value(self.application)}",
                 f"arguments = {toml_value(list(self.arguments))}",
                 f"working_directory = {toml_value(self.working_directory)}",
                 f"profile = {toml_value(self.profile)}",
                 "", "[environment]"]
        lines += [f"{key_name(k)} = {toml_value(v)}" for k, v in self.environment.items()]
        return "\n".join(lines) + "\n"

    def save(self, path=None):
        """Write the project file (atomically); `path` saves it under a new name."""
        if path is not None:
            self.path = Path(path).absolute()
        from ..report.output import write_atomic
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            write_atomic(self.path, self.to_toml())
        except FerryError as e:
            raise FerryError(self.path, e.problem.replace("the report", "the project")) from None


KEYS = ("format", "application", "arguments", "working_directory", "profile", "environment")


def _string(doc, key, default):
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key}: wrong type: expected a string, got {shown(value)}")
    if "\n" in value or "\0" in value:
        raise ValueError(f"{key}: must be one line of text")
    return value


def _parse(doc):
    for key in doc:
        if key not in KEYS:
            raise ValueError(f"{key_name(key)}: unknown key{suggest(key, KEYS)}; "
                             f"known: {', '.join(KEYS)}")
    version = doc.get("format", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(f"format: unsupported project format {shown(version)} "
                         f"(this Ferry reads format {FORMAT_VERSION})")
    args = doc.get("arguments", [])
    if not isinstance(args, list):
        raise ValueError(f"arguments: wrong type: expected an array of strings, got {shown(args)}")
    for i, a in enumerate(args):
        if not isinstance(a, str):
            raise ValueError(f"arguments[{i}]: wrong type: expected a string, got {shown(a)}")
    env = doc.get("environment", {})
    if not isinstance(env, dict):
        raise ValueError(f"environment: wrong type: expected a table, got {shown(env)}")
    for k, v in env.items():
        if not isinstance(v, str):
            raise ValueError(f"environment.{key_name(k)}: wrong type: expected a string, "
                             f"got {shown(v)}")
        if not k or "=" in k or "\0" in k:
            raise ValueError(f"environment.{key_name(k)}: not a variable name")
    profile = _string(doc, "profile", "trace") or "trace"
    return dict(application=_string(doc, "application", ""), arguments=list(args),
                working_directory=_string(doc, "working_directory", ".") or ".",
                environment=dict(env), profile=profile)


def load(path):
    """The Project in file `path`; FerryError(path, problem) if it cannot be used."""
    p = Path(path)
    if not p.exists():
        raise FerryError(path, "no such project file")
    if p.is_dir():
        raise FerryError(path, f"is a directory, not a project file (*{SUFFIX})")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise FerryError(path, "not a project file: not UTF-8 text") from None
    except OSError as e:
        raise FerryError(path, f"cannot read it: {e.strerror}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FerryError(path, f"invalid TOML: {e}") from None
    try:
        values = _parse(doc)
    except ValueError as e:
        raise FerryError(path, str(e)) from None
    return Project(p, **values)


def new(path, application=""):
    """A new project at `path` (given the .ferryproj suffix if it has none), saved."""
    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    project = Project(path, application=application)
    project.save()
    return project
