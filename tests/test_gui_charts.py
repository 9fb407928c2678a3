"""The GUI's Charts tab shows a run's aggregation as `ferry report --html` does: the
summary, the batch sizes and the fibers and switches per carrier, for a real run
under the fibers profile; a run that aggregated nothing says so and shows no
aggregation charts."""
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from conftest import ROOT, ferry  # noqa: E402
from ferry.gui.run_view import RunView  # noqa: E402
from ferry.report import aggregation  # noqa: E402
from ferry.rundata import load_run  # noqa: E402

pytestmark = pytest.mark.gui
# threads that do I/O: a program's only thread, and threads that only take
# locks, leave nothing on the rings
THREADS = ROOT / "tests" / "programs" / "py_fibers.py"


def shown(qtbot, run_dir):
    view = RunView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.loaded, timeout=120_000):
        view.load(run_dir)
    return view


def drawn(charts, key):
    pix = charts.images[key].pixmap()
    return not charts.images[key].isHidden() and pix is not None and not pix.isNull() \
        and pix.width() > 100


def test_an_aggregated_run_shows_its_batches_and_carriers(qtbot, tmp_path):
    run_dir = tmp_path / "run"
    ferry("run", "-p", "fibers", "-o", run_dir, "--", "/usr/bin/python3", THREADS, "io", check=True)
    agg = load_run(run_dir)["aggregation"]
    assert agg and agg["aggregated"] > 0 and aggregation.carriers(agg)
    view = shown(qtbot, run_dir)
    charts = view.charts
    assert drawn(charts, "batches") and drawn(charts, "carriers")
    assert not charts.titles["batches"].isHidden()
    assert aggregation.summary(agg) in charts.aggregation.text()


def test_a_run_without_aggregation_says_so(qtbot, tmp_path):
    run_dir = tmp_path / "run"
    ferry("run", "-o", run_dir, "--", "/bin/true", check=True)
    view = shown(qtbot, run_dir)
    charts = view.charts
    assert drawn(charts, "calls")
    assert charts.images["batches"].isHidden() and charts.images["carriers"].isHidden()
    assert "did not aggregate calls (profile mode trace)" in charts.aggregation.text()
