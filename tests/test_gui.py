"""`ferry gui`: pytest-qt drives the real widgets offscreen (issue 7's acceptance).

Each test makes a project in its own folder, with its own run index (FERRY_DATA) and
list of recent projects (XDG_CONFIG_HOME); the image cache is the session's. The
numbers the window shows are checked against the run directory itself
(ferry.rundata.load_run). The screenshot test runs the window on an Xvfb display in a
process of its own (tests/gui_screenshot.py) and keeps test-artifacts/gui-main-window.png.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt, QTimer  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402

from conftest import ROOT, ferry, make  # noqa: E402
from ferry import runindex  # noqa: E402
from ferry.gui import app as gui_app  # noqa: E402
from ferry.gui import project as projects  # noqa: E402
from ferry.gui import recent  # noqa: E402
from ferry.base.errors import FerryError  # noqa: E402
from ferry.rundata import load_run  # noqa: E402

DEMO = ROOT / "examples" / "build" / "demo"
ARTIFACT = ROOT / "test-artifacts" / "gui-main-window.png"
WAIT_MS = 120_000


@pytest.fixture(scope="session")
def demo():
    """examples/build/demo, built (`make -C examples`) if needed."""
    make(ROOT / "examples")
    return DEMO


@pytest.fixture(autouse=True)
def own_places(tmp_path, monkeypatch):
    """A run index and a config directory (recent projects) of the test's own."""
    monkeypatch.setenv("FERRY_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def window(qtbot):
    w = gui_app.create_window()
    qtbot.addWidget(w)
    yield w
    if w.busy():
        w.cancel()
        qtbot.waitUntil(lambda: not w.busy(), timeout=20_000)


def make_project(qtbot, window, folder, application, arguments=""):
    """A new project, with the application and arguments typed into the form."""
    project = window.new_project(folder / f"{Path(str(application)).name}.ferryproj")
    assert project is not None, window.messages.text()
    window.form.application.clear()
    qtbot.keyClicks(window.form.application, str(application))
    window.form.arguments.clear()
    if arguments:
        qtbot.keyClicks(window.form.arguments, arguments)
    return project


def type_text(qtbot, widget, text):
    """Type `text` into a text editor, Return for each newline."""
    for i, line in enumerate(text.split("\n")):
        if i:
            qtbot.keyClick(widget, Qt.Key_Return)
        if line:
            qtbot.keyClicks(widget, line)


def press(qtbot, window, key, timeout=WAIT_MS):
    """Click an action's toolbar button and wait until it has finished; (ok, text)."""
    with qtbot.waitSignal(window.pipeline_finished, timeout=timeout) as finished:
        qtbot.mouseClick(window.button(key), Qt.LeftButton)
    return tuple(finished.args)


def wait_shown(qtbot, window, run_dir):
    qtbot.waitUntil(lambda: window.run_view.run_dir == str(run_dir), timeout=WAIT_MS)


# --- the loop ------------------------------------------------------------------------------

def test_instrument_run_report_fills_every_view_from_the_run_directory(qtbot, window, demo, tmp_path):
    project = make_project(qtbot, window, tmp_path / "demo", demo)
    ok, text = press(qtbot, window, "all")
    assert ok, window.messages.text()
    run_dir = project.runs_dir / "1"
    wait_shown(qtbot, window, run_dir)
    model = load_run(run_dir)   # the truth, from the run directory
    view = window.run_view

    # the project file says what was run
    saved = projects.load(project.path)
    assert saved.application == str(demo) and saved.profile == "trace"
    # console: the steps and the program's own output, live
    console = window.console.text()
    assert "526/526" in console or "syscall sites patched" in console
    assert "called getppid 1000 times" in console and "child exited with 7" in console
    assert "Traceback" not in console
    assert window.messages.level == "info" and "reported" in window.messages.text()

    # Summary
    f = view.summary.fields
    assert f["exit"].text() == "0"
    assert f["processes"].text() == "2" == str(model["totals"]["processes"])
    assert f["dir"].text() == str(run_dir)
    assert f["profile"].text() == "trace (mode trace)"

    # Syscalls: every syscall of the run with its count; sortable, filterable
    table = view.syscalls
    shown = {r["name"]: r["calls"] for r in table.shown_rows()}
    assert shown == {s["name"]: s["calls"] for s in model["syscalls"]}
    assert shown["getppid"] == 1001
    table.view.sortByColumn(table.column("calls"), Qt.DescendingOrder)
    assert table.shown_rows()[0]["name"] == "getppid"
    assert table.shown_text(0, "calls") == "1 001"
    qtbot.keyClicks(table.filter, "getpp")
    assert [r["name"] for r in table.shown_rows()] == ["getppid"]
    table.filter.clear()
    assert len(table.shown_rows()) == len(model["syscalls"])

    # Sites: module, function, count, time
    sites = view.sites.shown_rows()
    assert len(sites) == len(model["sites"]) > 0
    top = next(s for s in sites if s["name"] == "getppid")
    assert (top["module"], top["calls"]) == ("libc.so.6", 1001)

    # Processes: the program and, under it, its fork child
    items = view.processes.all_items()
    assert len(items) == 2
    parent = view.processes.topLevelItem(0)
    assert parent.childCount() == 1
    assert int(parent.text(0)) == model["processes"][0]["pid"]
    assert parent.child(0).text(2) == "exited 7" and parent.child(0).text(3) == "enabled"

    # Charts: the plots of the report, drawn
    for key in ("calls", "latency", "timeline"):
        pix = view.charts.images[key].pixmap()
        assert pix is not None and not pix.isNull() and pix.width() > 100, key
    assert "mode trace" in view.charts.aggregation.text()

    # Previous runs: this run, from the run index
    runs = window.runs.runs()
    assert len(runs) == 1
    assert Path(runs[0]["dir"]) == run_dir and runs[0]["calls"] == model["totals"]["calls"]
    assert window.runs.table.shown_text(0, "exit") == "0"
    assert window.runs.table.shown_text(0, "profile") == "trace"


def test_project_settings_reach_the_program(qtbot, window, tmp_path):
    work = tmp_path / "somewhere else"
    work.mkdir()
    make_project(qtbot, window, tmp_path / "env", "env")
    window.form.working_directory.setText(str(work))
    window.form.environment.setPlainText("FERRY_GUI_TEST=hello world\n")
    ok, _ = press(qtbot, window, "run")
    assert ok, window.messages.text()
    assert "FERRY_GUI_TEST=hello world" in window.console.text()
    info = json.loads((tmp_path / "env" / "runs" / "1" / "info.json").read_text())
    assert info["cwd"] == str(work) and info["command"] == ["env"]


def test_compare_two_runs_side_by_side(qtbot, window, tmp_path, test_programs):
    make_project(qtbot, window, tmp_path / "loop", test_programs / "getppid_loop", "100")
    assert press(qtbot, window, "run")[0], window.messages.text()
    window.form.arguments.clear()
    qtbot.keyClicks(window.form.arguments, "300")
    assert press(qtbot, window, "run")[0], window.messages.text()

    panel = window.runs
    assert [r["label"] for r in panel.runs()] == ["#2", "#1"]
    panel.table.view.selectAll()
    assert panel.buttons["compare"].isEnabled()
    compare = window.run_view.compare
    with qtbot.waitSignal(compare.compared, timeout=WAIT_MS):
        qtbot.mouseClick(panel.buttons["compare"], Qt.LeftButton)
    assert window.run_view.currentWidget() is compare
    row = next(r for r in compare.table.shown_rows() if r["syscall"] == "getppid")
    assert (row["calls_a"], row["calls_b"], row["calls_delta"]) == (100, 300, 200)
    i = next(i for i, r in enumerate(compare.table.shown_rows()) if r["syscall"] == "getppid")
    assert compare.table.shown_text(i, "Δ calls") == "+200"
    heading = compare.heading.text()
    assert heading.index("#1") < heading.index("#2")          # A is the older run
    assert "→" in compare.total.text()

    # per site: the getppid site of libc, same delta
    compare.by.setCurrentIndex(compare.by.findData("site"))
    site = next(r for r in compare.table.shown_rows() if r["syscall"] == "getppid")
    assert (site["module"], site["calls_delta"]) == ("libc.so.6", 200)

    # the tab's own choosers: B against A the other way round
    compare.run_a.setCurrentIndex(compare.run_a.findData(str(panel.runs()[0]["dir"])))
    compare.run_b.setCurrentIndex(compare.run_b.findData(str(panel.runs()[1]["dir"])))
    compare.by.setCurrentIndex(compare.by.findData("syscall"))
    with qtbot.waitSignal(compare.compared, timeout=WAIT_MS):
        qtbot.mouseClick(compare.button, Qt.LeftButton)
    row = next(r for r in compare.table.shown_rows() if r["syscall"] == "getppid")
    assert row["calls_delta"] == -200


def test_reopened_project_shows_it_all_again(qtbot, window, demo, tmp_path):
    project = make_project(qtbot, window, tmp_path / "again", demo)
    window.form.environment.setPlainText("A_VARIABLE=1\n")
    window.left_tabs.setCurrentWidget(window.profile_editor)
    window.profile_editor.choose("count")
    ok, _ = press(qtbot, window, "all")
    assert ok, window.messages.text()
    run_dir = project.runs_dir / "1"
    wait_shown(qtbot, window, run_dir)
    shown_before = {r["name"]: r["calls"] for r in window.run_view.syscalls.shown_rows()}
    window.close()

    assert recent.load()[0] == str(project.path)
    again = gui_app.create_window(str(project.path))     # what `ferry gui PROJECT` does
    qtbot.addWidget(again)
    assert again.messages.level is None, again.messages.text()
    assert again.form.application.text() == str(demo)
    assert again.form.environment.toPlainText() == "A_VARIABLE=1\n"
    assert again.profile_editor.chosen() == "count"
    assert [Path(r["dir"]) for r in again.runs.runs()] == [run_dir]
    wait_shown(qtbot, again, run_dir)         # the latest run comes back by itself
    assert {r["name"]: r["calls"] for r in again.run_view.syscalls.shown_rows()} == shown_before
    assert again.run_view.summary.fields["profile"].text() == "count (mode count)"
    assert not again.run_view.charts.images["calls"].pixmap().isNull()
    again._fill_recent()
    recent_actions = again.recent_menu.actions()
    assert [a.text() for a in recent_actions] == [str(project.path)]
    again.form.application.setText("changed, not saved")
    recent_actions[0].trigger()                           # Project ▸ Open Recent
    assert again.messages.level is None and again.form.application.text() == str(demo)


# --- errors in the window ------------------------------------------------------------------

def test_a_bad_binary_path_is_reported_in_the_window(qtbot, window, tmp_path):
    missing = tmp_path / "no-such-program"
    project = make_project(qtbot, window, tmp_path / "bad", missing)
    ok, _ = press(qtbot, window, "instrument")
    assert not ok
    assert window.messages.level == "error"
    assert window.messages.text() == f"Instrument failed: {missing}: no such file"

    ok, _ = press(qtbot, window, "all")
    assert not ok and window.messages.text() == f"Instrument failed: {missing}: no such file"
    ok, _ = press(qtbot, window, "run")
    assert not ok and window.messages.text() == f"Run failed: {missing}: no such file"
    assert not (project.runs_dir / "1" / "info.json").exists()
    assert "Traceback" not in window.console.text()
    assert window.actions["run"].isEnabled() and not window.action_cancel.isEnabled()


def test_an_invalid_profile_is_marked_where_the_mistake_is(qtbot, window, demo, tmp_path):
    project = make_project(qtbot, window, tmp_path / "prof", demo)
    editor = window.profile_editor
    window.left_tabs.setCurrentWidget(editor)
    editor.text.selectAll()
    type_text(qtbot, editor.text, 'description = "mine"\nmode = "trace"\n\n[trace]\nevents = "yes"\n')
    assert editor.chosen() == "custom"        # editing a shipped profile makes one's own
    qtbot.waitUntil(lambda: editor.problem is not None, timeout=5000)
    assert editor.problem.startswith("trace.events: wrong type: expected a boolean")
    assert editor.error_line == 5
    assert "line 5: trace.events: wrong type" in editor.error.text()
    marks = editor.text.extraSelections()
    assert [m.cursor.blockNumber() for m in marks] == [4]

    window.left_tabs.setCurrentWidget(window.form)
    qtbot.mouseClick(window.button("run"), Qt.LeftButton)      # refused at once
    assert not window.busy()
    assert window.messages.level == "error"
    assert window.messages.text().startswith("Invalid profile (line 5): trace.events: wrong type")
    assert window.left_tabs.currentWidget() is editor
    assert editor.text.textCursor().blockNumber() == 4
    assert not project.runs_dir.exists()

    # broken TOML: the line of the syntax error
    editor.text.setPlainText('mode = "trace"\n[trace\nevents = true\n')
    assert editor.validate() is None and editor.error_line == 2
    assert "invalid TOML" in editor.problem
    # a mistaken section and an unknown value
    editor.text.setPlainText('mode = "trace"\n\n[traec]\nevents = true\n')
    assert editor.validate() is None and editor.error_line == 3
    editor.text.setPlainText('# mine\nmode = "tarce"\n')
    assert editor.validate() is None and editor.error_line == 2
    assert 'did you mean "trace"' in editor.problem

    # fixed: valid, and a run uses the project's own profile file
    editor.text.setPlainText('description = "mine"\nmode = "count"\n')
    qtbot.waitUntil(lambda: editor.problem is None, timeout=5000)
    assert editor.text.extraSelections() == [] and "valid" in editor.error.text()
    ok, _ = press(qtbot, window, "run")
    assert ok, window.messages.text()
    own = project.folder / "demo-profile.toml"
    assert own.read_text() == 'description = "mine"\nmode = "count"\n'
    assert projects.load(project.path).profile == "demo-profile.toml"
    info = json.loads((project.runs_dir / "1" / "info.json").read_text())
    assert info["profile"]["name"] == "demo-profile" and info["profile"]["mode"] == "count"


def test_a_crashed_run_is_reported_and_still_shown(qtbot, window, tmp_path, test_programs):
    project = make_project(qtbot, window, tmp_path / "crash", test_programs / "crash", "segv")
    ok, _ = press(qtbot, window, "all")
    assert not ok
    assert window.messages.level == "error"
    assert window.messages.text().startswith("The program crashed: killed by SIGSEGV")
    run_dir = project.runs_dir / "1"
    wait_shown(qtbot, window, run_dir)
    assert "crashed: killed by SIGSEGV" in window.run_view.summary.fields["exit"].text()
    root = window.run_view.processes.topLevelItem(0)
    assert root.text(2) == "killed by signal SIGSEGV"
    assert window.runs.table.shown_text(0, "exit") == "killed by SIGSEGV"
    assert "Traceback" not in window.console.text()


def test_an_invalid_project_file_is_reported_in_the_window(window, tmp_path):
    bad = tmp_path / "bad.ferryproj"
    bad.write_text('application = "x"\narguments = "-v"\n')
    assert window.open_project(bad) is None
    assert window.messages.level == "error"
    assert window.messages.text() == (f"Cannot open the project: {bad}: arguments: wrong type: "
                                      'expected an array of strings, got string "-v"')
    assert window.open_project(tmp_path / "missing.ferryproj") is None
    assert window.messages.text().endswith("missing.ferryproj: no such project file")
    assert window.project is None and not window.actions["run"].isEnabled()

    odd = tmp_path / "odd.ferryproj"       # a project whose own profile file is gone
    odd.write_text('application = "true"\nprofile = "gone.toml"\n')
    assert window.open_project(odd) is not None
    assert window.messages.level == "warning"
    assert window.messages.text() == (f"Profile: {tmp_path / 'gone.toml'}: no such file: "
                                      "starting again from the shipped trace profile")
    assert window.profile_editor.chosen() == "custom" and window.profile_editor.validate()


def test_an_unexpected_error_goes_into_the_window_not_the_terminal(window, capsys):
    import weakref
    hook = gui_app._excepthook(weakref.ref(window))
    try:
        raise ValueError("boom")
    except ValueError as e:
        hook(type(e), e, e.__traceback__)
    assert window.messages.level == "error"
    assert window.messages.text() == ("internal error: ValueError: boom "
                                      "(set FERRY_DEBUG=1 for the traceback)")
    assert "Traceback" not in capsys.readouterr().err


# --- work off the UI thread ----------------------------------------------------------------

def test_the_window_stays_responsive_while_a_program_runs(qtbot, window, tmp_path):
    project = make_project(qtbot, window, tmp_path / "sleep", "sleep", "2")
    assert press(qtbot, window, "instrument")[0], window.messages.text()   # rewrite first
    ticks = []
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    seen = {}
    QTimer.singleShot(800, lambda: seen.update(busy=window.busy(),
                                               cancel=window.button("cancel").isEnabled(),
                                               run=window.button("run").isEnabled()))
    timer.start()
    started = time.monotonic()
    ok, _ = press(qtbot, window, "run")
    took = time.monotonic() - started
    timer.stop()
    assert ok, window.messages.text()
    assert seen == {"busy": True, "cancel": True, "run": False}
    info = json.loads((project.runs_dir / "1" / "info.json").read_text())
    assert info["duration_s"] >= 2.0 and took >= 2.0
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= 40, len(ticks)
    assert max(gaps) < 0.5, f"the UI thread was blocked for {max(gaps):.2f} s"


def _pid_recorded(info):
    """True once `ferry run` has started the program (its pid is in info.json)."""
    try:
        return bool(json.loads(info.read_text()).get("pid"))
    except (OSError, ValueError):
        return False


def test_cancel_stops_a_running_program(qtbot, window, tmp_path):
    project = make_project(qtbot, window, tmp_path / "long", "sleep", "60")
    started = time.monotonic()
    with qtbot.waitSignal(window.pipeline_finished, timeout=60_000) as finished:
        qtbot.mouseClick(window.button("run"), Qt.LeftButton)
        info = project.runs_dir / "1" / "info.json"
        qtbot.waitUntil(lambda: _pid_recorded(info), timeout=60_000)
        qtbot.mouseClick(window.button("cancel"), Qt.LeftButton)
    assert time.monotonic() - started < 30
    assert tuple(finished.args) == (False, "cancelled")
    assert window.messages.level == "warning" and window.messages.text().startswith("Cancelled")
    recorded = json.loads(info.read_text())
    assert recorded["state"] == "finished" and recorded["exit"]["signal"] == "SIGTERM"
    assert window.actions["all"].isEnabled() and not window.action_cancel.isEnabled()


# --- previous runs -------------------------------------------------------------------------

def test_previous_runs_export_and_delete(qtbot, window, tmp_path, monkeypatch):
    project = make_project(qtbot, window, tmp_path / "true", "true")
    assert press(qtbot, window, "run")[0], window.messages.text()
    assert press(qtbot, window, "run")[0], window.messages.text()
    panel = window.runs
    first, second = project.runs_dir / "1", project.runs_dir / "2"
    assert [Path(r["dir"]) for r in panel.runs()] == [second, first]

    model = load_run(first)
    for suffix in (".html", ".json", ".csv"):
        out = panel.export(str(first), tmp_path / f"export{suffix}")
        assert out is not None, window.messages.text()
    assert "<html" in (tmp_path / "export.html").read_text()
    assert json.loads((tmp_path / "export.json").read_text())["totals"] == model["totals"]
    assert (tmp_path / "export.csv").read_text().startswith("syscall,nr,calls,errors")
    assert panel.export(str(first), tmp_path / "export.txt") is None
    assert "cannot export to this kind of file" in window.messages.text()

    panel.select_dirs([first])
    assert panel.buttons["delete"].isEnabled() and not panel.buttons["compare"].isEnabled()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.Yes)
    qtbot.mouseClick(panel.buttons["delete"], Qt.LeftButton)
    assert not first.exists() and second.exists()
    assert [Path(r["dir"]) for r in runindex.runs()] == [second]
    assert [Path(r["dir"]) for r in panel.runs()] == [second]

    panel.select_dirs([second])
    with qtbot.waitSignal(window.run_view.loaded, timeout=WAIT_MS):
        qtbot.mouseClick(panel.buttons["open"], Qt.LeftButton)
    assert window.run_view.run_dir == str(second)


# --- the project file ----------------------------------------------------------------------

def test_project_file_round_trip_and_errors(tmp_path):
    p = projects.Project(tmp_path / "x.ferryproj", application="/bin/echo",
                         arguments=["a b", 'say "hi"', "ünïcode", ""], working_directory="sub",
                         environment={"LANG": "C", "WITH SPACE": "x=y"}, profile="count")
    p.save()
    q = projects.load(p.path)
    assert (q.application, q.arguments, q.working_directory, q.environment, q.profile) == \
        (p.application, p.arguments, p.working_directory, p.environment, p.profile)
    assert q.cwd() == (tmp_path / "sub").resolve()
    assert q.next_run_dir() == tmp_path / "runs" / "1"
    (tmp_path / "runs" / "7").mkdir(parents=True)
    assert q.next_run_dir() == tmp_path / "runs" / "8"
    (tmp_path / "y.ferryproj").write_text('aplication = "/bin/ls"\n')
    with pytest.raises(FerryError, match='aplication: unknown key \\(did you mean "application"\\?\\)'):
        projects.load(tmp_path / "y.ferryproj")
    (tmp_path / "z.ferryproj").write_text("[environment]\nN = 1\n")
    with pytest.raises(FerryError, match="environment.N: wrong type: expected a string, got integer 1"):
        projects.load(tmp_path / "z.ferryproj")
    assert projects.new(tmp_path / "named").path == tmp_path / "named.ferryproj"


# --- the command line ----------------------------------------------------------------------

def test_ferry_gui_without_a_display_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = ferry("gui", tmp_path / "p.ferryproj", env=env, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("ferry: gui: no display") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def _start_xvfb():
    """Xvfb on a display it picks itself (-displayfd); (process, display number)."""
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1600x1000x24",
                             "-nolisten", "tcp"], pass_fds=(write,), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(write)
    number = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not number.endswith(b"\n"):
        chunk = os.read(read, 16)
        if not chunk:
            break
        number += chunk
    os.close(read)
    if not number.strip():
        proc.kill()
        raise AssertionError("Xvfb did not start")
    return proc, int(number)


@pytest.mark.skipif(shutil.which("Xvfb") is None,
                    reason="Xvfb is not installed (Debian package xvfb; tools/sysdeps.sh installs it)")
def test_screenshot_of_the_main_window_under_xvfb(demo, tmp_path):
    xvfb, display = _start_xvfb()
    try:
        env = dict(os.environ, DISPLAY=f":{display}", QT_QPA_PLATFORM="xcb")
        ARTIFACT.parent.mkdir(exist_ok=True)
        ARTIFACT.unlink(missing_ok=True)
        r = subprocess.run([sys.executable, str(ROOT / "tests" / "gui_screenshot.py"),
                            str(tmp_path / "shot" / "demo.ferryproj"), str(demo), str(ARTIFACT)],
                           env=env, capture_output=True, text=True, timeout=180)
    finally:
        xvfb.terminate()
        xvfb.wait(10)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["platform"] == "xcb" and report["ok"], report
    image = QImage(str(ARTIFACT))
    assert not image.isNull() and image.width() >= 1200 and image.height() >= 800
    colors = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    assert len(colors) > 50      # a window with text, tables and charts, not a blank frame
