"""Profiles: the shipped ones load; every kind of mistake in a profile gives one
line naming the file, the key and the problem (through the API and through
`ferry profile check`); the shim's environment follows the mode; a profile
written with to_toml() loads back equal."""
import re

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ferry.profiles import MODES, SHIPPED_DIR, Profile, load, loads, shipped
from ferry.base.errors import FerryError
from ferry.base.syscall_table import NAMES, NUMBERS

from conftest import ferry, ferry_env, write_profile as write

# --- shipped profiles -------------------------------------------------------------------

def test_shipped_profiles_are_one_per_mode_plus_net_and_all_validate():
    profiles = {p.name: p for p in shipped()}
    assert sorted(profiles) == ["aggregate", "count", "fibers", "net", "off", "trace"]
    for name, p in profiles.items():
        assert p.mode == ("aggregate" if name in ("net", "fibers") else name)
        assert p.path == SHIPPED_DIR / f"{name}.toml"
        assert p.description
        assert load(name) == p


def test_shipped_profiles_cover_every_syscall_without_events():
    for p in shipped():
        assert (p.trace_syscalls, p.events) == (None, False), p.name


def test_ferry_profile_check_accepts_every_shipped_file():
    files = sorted(SHIPPED_DIR.glob("*.toml"))
    r = ferry("profile", "check", *files)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{f}: ok (mode {load(f).mode})" for f in files]


def test_ferry_profile_list_shows_every_shipped_profile():
    r = ferry("profile", "list", env=ferry_env(COLUMNS=300))
    assert r.returncode == 0, r.stderr
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in r.stdout.splitlines()
            if line.startswith("│")]
    assert rows == [[p.name, p.mode, p.description, str(p.path)] for p in shipped()]


def test_ferry_profile_show_prints_the_text_and_marks_defaults(tmp_path):
    path = write(tmp_path, 'mode = "count"\n[trace]\nevents = true\n', "mine.toml")
    r = ferry("profile", "show", path)
    assert r.returncode == 0, r.stderr
    assert 'mode = "count"\n[trace]\nevents = true\n' in r.stdout
    rows = {line.split()[1]: line for line in r.stdout.splitlines()
            if line.startswith("│") and line.split()[1] != "│"}
    assert "default" in rows["trace.syscalls"]
    assert "default" not in rows["mode"]
    assert "not used in mode count" in rows["trace.events"]
    assert "FERRY_MODE=count FERRY_EVENTS=0" in r.stdout


# --- loading ------------------------------------------------------------------------------

def test_a_bare_name_is_shipped_and_a_name_ending_in_toml_is_a_file(tmp_path, monkeypatch):
    write(tmp_path, 'mode = "off"\n', "trace.toml")
    monkeypatch.chdir(tmp_path)
    assert load("trace").mode == "trace"
    assert load("trace.toml").mode == "off"
    assert load("./trace.toml").mode == "off"
    assert load(tmp_path / "trace.toml").mode == "off"


def test_a_profile_written_by_earlier_runs_still_loads(tmp_path):
    # every run directory's profile.toml so far says [children] follow = true
    p = load(write(tmp_path, 'mode = "count"\n[children]\nfollow = true\n', "old.toml"))
    assert p == Profile(name="old", mode="count")


def test_unset_keys_take_their_defaults_and_the_name_is_the_file_stem(tmp_path):
    p = load(write(tmp_path, 'mode = "trace"\n', "web-server.toml"))
    assert p == Profile(name="web-server", description="", mode="trace", trace_syscalls=None,
                        events=False, event_buffer=65536)


def test_the_profile_class_has_the_same_defaults_as_the_file_format():
    assert Profile(name="x", mode="count") == loads('mode = "count"\n', "x.toml")


def test_every_setting_is_read_from_the_file(tmp_path):
    p = load(write(tmp_path, """
        name = "db"
        description = "the database"
        mode = "trace"
        [trace]
        syscalls = ["write", "lseek", "read", "write", "close"]
        events = true
        event_buffer = 1024
        """))
    assert p == Profile(name="db", description="the database", mode="trace",
                        trace_syscalls=[0, 1, 3, 8],  # read, write, close, lseek
                        events=True, event_buffer=1024)


@pytest.mark.parametrize("value", [1024, 16777216])
def test_event_buffer_accepts_both_ends_of_its_range(tmp_path, value):
    assert load(write(tmp_path, f'mode = "trace"\n[trace]\nevent_buffer = {value}\n')) \
        .event_buffer == value


# --- errors: one line, naming the file, the key and the problem ----------------------------

BAD_PROFILES = {
    "unknown-key": ('mode = "trace"\n[trace]\nevnts = true\n',
                    'trace.evnts: unknown key (did you mean "events"?); '
                    'known: syscalls, events, event_buffer'),
    "unknown-key-no-match": ('mode = "trace"\nzzz = 1\n',
                             "zzz: unknown key; known: name, description, mode, catch_all, trace, aggregate"),
    "key-in-wrong-section": ('mode = "trace"\nevents = true\n',
                             'events: unknown key here: "events" belongs in [trace]'),
    "unknown-section": ('mode = "trace"\n[traec]\nevents = true\n',
                        'traec: unknown section [traec] (did you mean "trace"?); '
                        "known: trace, aggregate"),
    "wrong-type-bool": ('mode = "trace"\n[trace]\nevents = "yes"\n',
                        'trace.events: wrong type: expected a boolean (true or false), '
                        'got string "yes"'),
    "wrong-type-int-as-bool": ('mode = "trace"\n[trace]\nevents = 1\n',
                               "trace.events: wrong type: expected a boolean (true or false), "
                               "got integer 1"),
    "retired-children-follow": ('mode = "trace"\n[children]\nfollow = false\n',
                                "children.follow: no longer a setting: every child a program "
                                "starts is enabled; remove the key"),
    "wrong-type-float": ('mode = "trace"\n[trace]\nevent_buffer = 1.5\n',
                         "trace.event_buffer: wrong type: expected an integer (1024..16777216), "
                         "got float 1.5"),
    "wrong-type-bool-as-int": ('mode = "trace"\n[trace]\nevent_buffer = true\n',
                               "trace.event_buffer: wrong type: expected an integer "
                               "(1024..16777216), got boolean true"),
    "wrong-type-section": ('mode = "trace"\ntrace = 5\n',
                           "trace: wrong type: expected a table ([trace]), got integer 5"),
    "wrong-type-mode": ("mode = 1\n",
                        'mode: wrong type: expected a string ("off", "count", "trace" or '
                        '"aggregate"), got integer 1'),
    "wrong-type-syscall": ('mode = "trace"\n[trace]\nsyscalls = ["read", 3]\n',
                           "trace.syscalls[1]: wrong type: expected a syscall name (string), "
                           "got integer 3"),
    "one-syscall-not-in-array": ('mode = "trace"\n[trace]\nsyscalls = "read"\n',
                                 'trace.syscalls: wrong value: expected "all" or an array of '
                                 'syscall names, got string "read" (for one syscall write '
                                 '["read"])'),
    "unknown-syscall": ('mode = "trace"\n[trace]\nsyscalls = ["read", "write", "wrtie"]\n',
                        'trace.syscalls[2]: unknown syscall "wrtie" (did you mean "write"?)'),
    "unknown-syscall-case": ('mode = "trace"\n[trace]\nsyscalls = ["READ"]\n',
                             'trace.syscalls[0]: unknown syscall "READ" (did you mean "read"?)'),
    "no-syscalls": ('mode = "trace"\n[trace]\nsyscalls = []\n',
                    'trace.syscalls: empty array: name at least one syscall, or write "all"'),
    "unknown-mode": ('mode = "tarce"\n',
                     'mode: unknown value "tarce": expected "off", "count", "trace" or '
                     '"aggregate" (did you mean "trace"?)'),
    "missing-mode": ('description = "x"\n',
                     'mode: missing: this key is required ("off" (pass-through), "count" '
                     '(counts only), "trace" (counts, errors, times) or "aggregate" (counts; '
                     "fibers' calls batched on io_uring))"),
    "below-range": ('mode = "trace"\n[trace]\nevent_buffer = 1023\n',
                    "trace.event_buffer: out of range: 1023 is not in 1024..16777216"),
    "above-range": ('mode = "trace"\n[trace]\nevent_buffer = 16777217\n',
                    "trace.event_buffer: out of range: 16777217 is not in 1024..16777216"),
    "empty-name": ('name = " "\nmode = "off"\n', "name: must not be empty"),
    "two-line-name": ('name = "a\\nb"\nmode = "off"\n',
                      "name: must be one line without control characters (has U+000A)"),
    "bad-toml": ('mode = "trace"\n[trace\nevents = true\n',
                 "line 2, column 7: invalid TOML: expected ']' at the end of a table "
                 "declaration"),
    "duplicate-key": ('mode = "trace"\nmode = "off"\n',
                      "line 2, column 13: invalid TOML: cannot overwrite a value"),
    "unfinished-toml": ('mode = "trace"\nx = ',
                        "end of file: invalid TOML: invalid value"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_a_bad_profile_names_the_key_and_the_problem(tmp_path, case):
    text, problem = BAD_PROFILES[case]
    path = write(tmp_path, text)
    with pytest.raises(FerryError) as e:
        load(path)
    assert (e.value.path, e.value.problem) == (str(path), problem)
    assert str(e.value) == f"{path}: {problem}"


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_ferry_profile_check_prints_one_line_and_exits_2(tmp_path, case):
    text, problem = BAD_PROFILES[case]
    path = write(tmp_path, text)
    r = ferry("profile", "check", path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"ferry: {path}: {problem}\n")


def _unreadable(tmp_path):
    """(argument, expected problem) for files that cannot be read as a profile."""
    missing = tmp_path / "missing.toml"
    directory = tmp_path / "dir.toml"
    directory.mkdir()
    binary = tmp_path / "latin1.toml"
    binary.write_bytes(b'mode = "trace"\ndescription = "caf\xe9"\n')
    return [(str(missing), "no such file"),
            (str(directory), "not a file (a directory)"),
            (str(binary), "line 2: not UTF-8 text (byte 0xe9)"),
            ("tarce", 'no shipped profile of this name (did you mean "trace"?); '
                      "shipped: aggregate, count, fibers, net, off, trace")]


def test_a_profile_that_cannot_be_read_says_why(tmp_path):
    for arg, problem in _unreadable(tmp_path):
        with pytest.raises(FerryError) as e:
            load(arg)
        assert str(e.value) == f"{arg}: {problem}"
        r = ferry("profile", "check", arg)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"ferry: {arg}: {problem}\n")


def test_a_bare_name_that_is_a_file_here_is_pointed_at(tmp_path):
    write(tmp_path, 'mode = "off"\n', "mine.toml")
    r = ferry("profile", "show", "mine", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.endswith("; for the file here, write ./mine.toml\n"), r.stderr


def test_ferry_profile_check_stops_at_the_first_bad_file(tmp_path):
    good = write(tmp_path, 'mode = "off"\n', "good.toml")
    bad = write(tmp_path, 'mode = "of"\n', "bad.toml")
    r = ferry("profile", "check", good, bad, good)
    assert r.returncode == 2
    assert r.stdout == f"{good}: ok (mode off)\n"
    assert r.stderr.startswith(f"ferry: {bad}: mode: unknown value \"of\"")
    assert len(r.stderr.splitlines()) == 1


# Any value of any key (known or not, in any section): loading gives a Profile or
# one FerryError line naming that very key (or a key in it), never another exception.
_scalars = (st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
            | st.sampled_from(["all", "trace", "off", "count", "read", "x", "", "a\nb"])
            | st.text(max_size=8))
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner | st.sampled_from(sorted(NUMBERS)), max_size=4)
    | st.dictionaries(st.sampled_from(["events", "x"]), inner, max_size=2), max_leaves=6)
_places = st.sampled_from(
    [("", k) for k in ("name", "description", "mode", "trace", "children", "events", "x")]
    + [("trace", k) for k in ("syscalls", "events", "event_buffer", "evnts", "follow")]
    + [("children", k) for k in ("follow", "flolow", "events")])


def _toml_value(v):
    from ferry.profiles.schema import quote
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, repr(v))
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return str(v)


@settings(max_examples=500, deadline=None)
@given(_places, _values)
def test_any_value_of_any_key_gives_a_profile_or_one_error_naming_that_key(place, value):
    section, key = place
    doc = {"mode": "trace", "trace": {}, "children": {}}
    (doc[section] if section else doc)[key] = value
    text = "\n".join(f"{k} = {_toml_value(v)}" for k, v in doc.items()) + "\n"
    try:
        p = loads(text, "any.toml")
    except FerryError as e:
        assert e.path == "any.toml"
        assert "\n" not in e.problem
        where = re.match(r"([^:\[]*)", e.problem)[1]
        named = f"{section}.{key}" if section else key
        assert where == named or where.startswith(named + "."), e.problem
    else:
        assert p.mode in MODES


# --- what the shim is told ---------------------------------------------------------------

WITH_TRACE_SETTINGS = '[trace]\nsyscalls = ["write", "read"]\nevents = true\nevent_buffer = 4096\n'


@pytest.mark.parametrize("text, env", [
    ('mode = "trace"\n', {"FERRY_MODE": "trace", "FERRY_EVENTS": "0", "FERRY_CATCH_ALL": "1"}),
    ('mode = "trace"\n' + WITH_TRACE_SETTINGS,
     {"FERRY_MODE": "trace", "FERRY_TRACE_SYSCALLS": f"{NUMBERS['read']},{NUMBERS['write']}",
      "FERRY_EVENTS": "4096", "FERRY_CATCH_ALL": "1"}),
    ('mode = "trace"\n[trace]\nevent_buffer = 4096\n',
     {"FERRY_MODE": "trace", "FERRY_EVENTS": "0", "FERRY_CATCH_ALL": "1"}),
    ('mode = "count"\n' + WITH_TRACE_SETTINGS,
     {"FERRY_MODE": "count", "FERRY_EVENTS": "0", "FERRY_CATCH_ALL": "1"}),
    ('mode = "off"\n' + WITH_TRACE_SETTINGS, {"FERRY_MODE": "off", "FERRY_EVENTS": "0"}),
    ('mode = "trace"\ncatch_all = false\n', {"FERRY_MODE": "trace", "FERRY_EVENTS": "0"}),
], ids=["trace-all", "trace-some-with-events", "trace-no-events", "count", "off", "no-catch-all"])
def test_shim_env_says_the_mode_and_trace_settings_only_in_mode_trace(tmp_path, text, env):
    assert load(write(tmp_path, text)).shim_env() == env


def test_shim_env_of_the_shipped_profiles():
    envs = {p.name: p.shim_env() for p in shipped()}
    assert {name: env for name, env in envs.items() if name in ("count", "off", "trace")} == {
        name: {"FERRY_MODE": name, "FERRY_EVENTS": "0", **({"FERRY_CATCH_ALL": "1"} if name != "off" else {})}
        for name in ("count", "off", "trace")}
    for name in ("aggregate", "net"):   # FERRY_AGG itself: test_profile_aggregate.py
        assert {"FERRY_MODE", "FERRY_EVENTS", "FERRY_AGG"} <= envs[name].keys()
        assert (envs[name]["FERRY_MODE"], envs[name]["FERRY_EVENTS"]) == ("aggregate", "0")


# --- to_toml round trip ------------------------------------------------------------------

# Characters a TOML writer must escape, or that look like TOML syntax, are drawn often.
_tricky = st.sampled_from('"\\\x7f\x00\x08\t\n\r\x1f #=[]{}\'\u00e9\u2028\U0001F600')
_one_line = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"))
                    | _tricky.filter(lambda c: c.isprintable()), min_size=1).filter(str.strip)
_profiles = st.builds(
    Profile,
    name=_one_line,
    description=st.text(st.characters(exclude_categories=("Cs",)) | _tricky),
    mode=st.sampled_from(MODES),
    trace_syscalls=st.none() | st.lists(st.sampled_from(sorted(NAMES)), min_size=1,
                                        unique=True).map(sorted),
    events=st.booleans(),
    event_buffer=st.integers(1024, 16 * 1024 * 1024),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_profiles)
@example(Profile(name='a "b" \\ [c] # d \U0001F600', mode="trace", trace_syscalls=[0, 450],
                 description="".join(map(chr, range(0x80))) + "\u2028\U0010FFFF",
                 events=True, event_buffer=16 * 1024 * 1024))
def test_to_toml_loads_back_equal(p):
    assert loads(p.to_toml(), "saved.toml") == p


def test_to_toml_saved_in_a_file_loads_back_equal_under_another_file_name(tmp_path):
    for p in shipped():
        saved = write(tmp_path, p.to_toml(), "profile.toml")
        again = load(saved)
        assert again == p and again.name == p.name and again.path == saved
