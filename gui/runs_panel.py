"""Previous runs: the project's runs from the run index (ferry.runindex, what `ferry runs`
lists), and any run directory of the project the index does not know; open, compare,
delete, export."""
import os
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QFileDialog, QHBoxLayout, QMessageBox, QPushButton,
                               QVBoxLayout, QWidget)

from .. import runindex, staging
from ..base.errors import FerryError
from ..rundata import is_run_dir, read_info
from . import runstore
from .tables import Column, Table, fmt_int

EXPORTS = {".html": "HTML report", ".json": "run model (JSON)", ".csv": "syscalls (CSV)"}


def _exit(r):
    if r.get("signal"):
        return f"killed by {r['signal']}"
    return "" if r.get("exit_code") is None else str(r["exit_code"])


def _order(r):
    """Oldest first: by start (whole seconds), then index id, then run number."""
    name = Path(r["dir"]).name
    return (r.get("start") or "", r.get("id") or 0, int(name) if name.isdigit() else 0)


COLUMNS = [
    Column("run", lambda r: r["label"], sort=lambda r: _order(r)[2] or _order(r)[1], numeric=True),
    Column("date", lambda r: r.get("start")),
    Column("command", lambda r: shlex.join(r["command"]) if r.get("command") else ""),
    Column("profile", lambda r: r.get("profile")),
    Column("exit", _exit),
    Column("duration", lambda r: r.get("duration_s"),
           lambda v: "" if v is None else f"{v:.3f} s", True),
    Column("calls", lambda r: r.get("calls"), fmt_int, True),
    Column("crossings saved", lambda r: r.get("crossings_saved"),
           lambda v: "n/a" if v is None else fmt_int(v), True,
           "kernel crossings saved by aggregation (runs without aggregation: n/a)"),
    Column("processes", lambda r: r.get("processes"), fmt_int, True),
    Column("directory", lambda r: r["dir"]),
]


def _same(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def export(run_dir, path):
    """Write run `run_dir` to `path` as its suffix says: .html, .json or .csv."""
    from ..report.export import to_csv, to_json
    from ..report.html import to_html
    from ..report.output import write_atomic
    suffix = Path(path).suffix.lower()
    if suffix not in EXPORTS:
        raise FerryError(path, f"cannot export to this kind of file: choose "
                               f"{', '.join(EXPORTS)}")
    model = runstore.model(run_dir)
    text = {".html": lambda: to_html(model), ".json": lambda: to_json(model),
            ".csv": lambda: to_csv(model, "syscall")}[suffix]()
    write_atomic(path, text)
    return Path(path)


class RunsPanel(QWidget):
    """Signals: open_requested(dir), compare_requested(dir A, dir B), message(level, text),
    refreshed()."""
    open_requested = Signal(str)
    compare_requested = Signal(str, str)
    message = Signal(str, str)
    refreshed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("runs_panel")
        self.project = None
        self.table = Table(COLUMNS, "runs", "Filter runs (date, command, profile, ...)")
        self.table.view.doubleClicked.connect(lambda _i: self.open_selected())
        self.table.view.selectionModel().selectionChanged.connect(self._selection_changed)
        self.show_all = QCheckBox("all indexed runs")
        self.show_all.setObjectName("runs_show_all")
        self.show_all.setToolTip("Show every run of the run index (`ferry runs`), not only this project's")
        self.show_all.toggled.connect(self.refresh)
        self.buttons = {}
        row = QHBoxLayout()
        for key, title, slot in (("open", "Open", self.open_selected),
                                 ("compare", "Compare", self.compare_selected),
                                 ("delete", "Delete", self.delete_selected),
                                 ("export", "Export…", self.export_selected)):
            b = QPushButton(title)
            b.setObjectName(f"runs_{key}")
            b.clicked.connect(slot)
            row.addWidget(b)
            self.buttons[key] = b
        row.addStretch(1)
        row.addWidget(self.show_all)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.table, 1)
        self._selection_changed()

    # --- content ---------------------------------------------------------------------

    def set_project(self, project):
        self.project = project
        self.refresh()

    def _rows(self):
        if self.project is None and not self.show_all.isChecked():
            return []
        indexed = [r for r in runindex.runs() if r["present"]]
        if self.show_all.isChecked():
            rows = indexed
        else:
            mine = self.project.runs_dir
            rows = [r for r in indexed if _same(Path(r["dir"]).parent, mine)]
        seen = set()
        out = []
        for r in rows:                       # newest first; one row per directory
            key = os.path.realpath(r["dir"])
            if key in seen:
                continue
            seen.add(key)
            out.append(r)
        if self.project is not None and not self.show_all.isChecked():
            for d in self.project.run_dirs():   # runs recorded but not indexed
                if os.path.realpath(d) in seen or not is_run_dir(d):
                    continue
                try:
                    info = read_info(d)
                except FerryError:
                    continue
                exit_ = info.get("exit") or {}
                out.append({"id": None, "dir": str(d), "command": info.get("command"),
                            "start": info.get("start"), "duration_s": info.get("duration_s"),
                            "exit_code": exit_.get("code"), "signal": exit_.get("signal"),
                            "profile": (info.get("profile") or {}).get("name"),
                            "calls": None, "processes": None})
        for r in out:
            d = Path(r["dir"])
            mine = self.project is not None and _same(d.parent, self.project.runs_dir)
            r["label"] = f"#{d.name}" if mine else str(r.get("id") or d.name)
        out.sort(key=_order, reverse=True)
        return out

    def refresh(self):
        try:
            rows = self._rows()
        except Exception as e:  # noqa: BLE001 - a broken index must not take the window down
            rows = []
            self.message.emit("error", f"Cannot read the run index: {type(e).__name__}: {e}")
        self.table.set_rows(rows)
        self._selection_changed()
        self.refreshed.emit()

    def runs(self):
        """The runs listed (dicts with dir, label, start, ...), newest first."""
        return list(self.table.model.rows)

    def labels(self):
        """[(label for a run chooser, dir)], newest first."""
        return [(f"{r['label']}  {r.get('start') or ''}  exit {_exit(r) or '?'}", r["dir"])
                for r in self.runs()]

    def select_dirs(self, dirs):
        """Select the rows of these run directories."""
        want = {os.path.realpath(d) for d in dirs}
        view = self.table.view
        view.clearSelection()
        sel = view.selectionModel()
        for i in range(self.table.proxy.rowCount()):
            row = self.table.proxy.index(i, 0).data(Qt.UserRole + 1)
            if os.path.realpath(row["dir"]) in want:
                sel.select(self.table.proxy.index(i, 0),
                           sel.SelectionFlag.Select | sel.SelectionFlag.Rows)

    def _selection_changed(self, *_):
        n = len(self.table.selected_rows()) if self.table.view.selectionModel() else 0
        self.buttons["open"].setEnabled(n == 1)
        self.buttons["export"].setEnabled(n == 1)
        self.buttons["compare"].setEnabled(n == 2)
        self.buttons["delete"].setEnabled(n >= 1)

    # --- actions ---------------------------------------------------------------------

    def open_selected(self):
        rows = self.table.selected_rows()
        if len(rows) == 1:
            self.open_requested.emit(rows[0]["dir"])

    def compare_selected(self):
        rows = self.table.selected_rows()
        if len(rows) != 2:
            self.message.emit("warning", "Compare: select two runs")
            return
        older, newer = sorted(rows, key=_order)
        self.compare_requested.emit(older["dir"], newer["dir"])

    def delete_selected(self, confirm=True):
        rows = self.table.selected_rows()
        if not rows:
            return
        if confirm:
            names = ", ".join(r["label"] for r in rows)
            answer = QMessageBox.question(self, "Delete runs",
                                          f"Delete {len(rows)} run(s) ({names}) and their directories?")
            if answer != QMessageBox.Yes:
                return
        self.delete(rows)

    def delete(self, rows):
        """Remove the runs' directories and their entries in the run index."""
        for r in rows:
            d = Path(r["dir"])
            try:
                if is_run_dir(d):
                    staging.discard(d)
                if r.get("id") is not None:
                    runindex.remove(r["id"])
            except OSError as e:
                self.message.emit("error", f"Cannot delete {d}: {e.strerror or e}")
                break
            runstore.forget(d)
        else:
            self.message.emit("info", f"Deleted {len(rows)} run(s)")
        self.refresh()

    def export_selected(self):
        rows = self.table.selected_rows()
        if len(rows) != 1:
            return
        r = rows[0]
        start = self.project.folder if self.project else Path.cwd()
        default = str(start / f"run-{Path(r['dir']).name}.html")
        filters = ";;".join(f"{what} (*{suffix})" for suffix, what in EXPORTS.items())
        path, chosen = QFileDialog.getSaveFileName(self, "Export run", default, filters)
        if not path:
            return
        if not Path(path).suffix:
            path += next((s for s, w in EXPORTS.items() if chosen.startswith(w)), ".html")
        self.export(r["dir"], path)

    def export(self, run_dir, path):
        try:
            out = export(run_dir, path)
        except FerryError as e:
            self.message.emit("error", f"Export failed: {e}")
            return None
        self.message.emit("info", f"Exported {run_dir} to {out}")
        return out
