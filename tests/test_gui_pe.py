"""`ferry gui` with a project whose application is a Windows program: the
whole loop (Instrument -> Run -> Report) works, and every view shows the run
as the run directory holds it (pytest-qt, offscreen; wine as in winenv)."""
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from test_gui import make_project, own_places, press, wait_shown, window  # noqa: E402,F401
from test_pe_run import ferry_dll_built  # noqa: E402,F401 (fixture)

from ferry.gui import project as projects  # noqa: E402
from ferry.rundata import load_run  # noqa: E402


@pytest.fixture
def wine_session(wine, monkeypatch):
    """The GUI's commands run in the session's wine prefix, headless."""
    for k in ("WINEPREFIX", "WINEDEBUG", "WINEDLLOVERRIDES"):
        monkeypatch.setenv(k, wine.env[k])
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    return wine


def test_exe_project_instrument_run_report(qtbot, window, wine_session, win_programs,  # noqa: F811
                                           ferry_dll_built, tmp_path):
    exe = win_programs["spawn_tree"]
    out = tmp_path / "tree"
    project = make_project(qtbot, window, tmp_path / "proj", exe, f"2 5 {out}")
    ok, text = press(qtbot, window, "all")
    assert ok, (text, window.messages.text(), window.console.text())
    run_dir = project.runs_dir / "1"
    wait_shown(qtbot, window, run_dir)
    model = load_run(run_dir)
    view = window.run_view
    console = window.console.text()
    assert "depth 2 wrote 5" in console and "Traceback" not in console
    assert projects.load(project.path).application == str(exe)

    # Summary: the program's exit code (its depth) and its four processes
    f = view.summary.fields
    assert f["exit"].text() == "2"
    assert f["processes"].text() == "4" == str(model["totals"]["processes"])

    # Syscalls: Nt* names with the counts of the run directory
    shown = {r["name"]: r["calls"] for r in view.syscalls.shown_rows()}
    assert shown == {s["name"]: s["calls"] for s in model["syscalls"]}
    assert shown["NtWriteFile"] >= 3 * 5

    # Sites: ntdll's stubs, one per Nt function, with the run's counts
    sites = view.sites.shown_rows()
    assert len(sites) == len(model["sites"]) > 0
    assert sum(r["calls"] for r in sites) == model["totals"]["calls"]
    write = next(r for r in sites if r["name"] == "NtWriteFile")
    assert write["module"] == "ntdll.dll" and write["calls"] == shown["NtWriteFile"]

    # Processes: the program, cmd.exe under it, and two more generations; all enabled
    items = view.processes.all_items()
    assert len(items) == 4
    root = view.processes.topLevelItem(0)
    assert root.childCount() == 1 and root.child(0).childCount() == 1
    assert root.child(0).child(0).childCount() == 1
    assert all(item.text(3) == "enabled" for item in items), [i.text(3) for i in items]

    # Charts drawn; the run in the list of previous runs
    for key in ("calls", "latency", "timeline"):
        pix = view.charts.images[key].pixmap()
        assert pix is not None and not pix.isNull(), key
    runs = window.runs.runs()
    assert len(runs) == 1 and runs[0]["calls"] == model["totals"]["calls"]
