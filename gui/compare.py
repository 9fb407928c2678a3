"""The Compare tab: two runs side by side with deltas (ferry.report.diff: B - A, per syscall
or per site, biggest change in time first)."""
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ..report.diff import diff
from . import runstore
from .jobs import ThreadJob
from .tables import Column, Table, fmt_int, fmt_ns, fmt_signed


def _pct(p):
    return "new" if p is None else (f"{p:+.1f} %" if p else "0.0 %")


def _only(v):
    return {"A": "only in A", "B": "only in B"}.get(v, "")


def columns(by):
    first = [Column("syscall", lambda r: r["syscall"])] if by == "syscall" else [
        Column("site", lambda r: r["site"]), Column("module", lambda r: r.get("module")),
        Column("function", lambda r: r.get("function")), Column("syscall", lambda r: r.get("syscall"))]
    return first + [
        Column("calls A", lambda r: r["calls_a"], fmt_int, True),
        Column("calls B", lambda r: r["calls_b"], fmt_int, True),
        Column("Δ calls", lambda r: r["calls_delta"], fmt_signed, True),
        Column("errors A", lambda r: r["errors_a"], fmt_int, True),
        Column("errors B", lambda r: r["errors_b"], fmt_int, True),
        Column("time A", lambda r: r["time_ns_a"], fmt_ns, True),
        Column("time B", lambda r: r["time_ns_b"], fmt_ns, True),
        Column("Δ time", lambda r: r["time_ns_delta"],
               lambda v: ("+" if v > 0 else "-" if v < 0 else "") + fmt_ns(abs(v)), True),
        Column("Δ time %", lambda r: r["time_delta_pct"], _pct, True),
        Column("", lambda r: r["only_in"], _only),
    ]


class CompareTab(QWidget):
    """Pick runs A and B (or call compare(a, b)); signals compared(a, b) and failed(text)."""
    compared = Signal(str, str)
    failed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("compare")
        self.run_a, self.run_b = QComboBox(), QComboBox()
        self.run_a.setObjectName("compare_a")
        self.run_b.setObjectName("compare_b")
        for c in (self.run_a, self.run_b):
            c.setSizeAdjustPolicy(QComboBox.AdjustToContents)
        self.by = QComboBox()
        self.by.setObjectName("compare_by")
        self.by.addItem("per syscall", "syscall")
        self.by.addItem("per site", "site")
        self.button = QPushButton("Compare")
        self.button.setObjectName("compare_button")
        self.button.clicked.connect(self._clicked)
        self.by.currentIndexChanged.connect(self._redraw)
        top = QHBoxLayout()
        for w in (QLabel("A:"), self.run_a, QLabel("B:"), self.run_b, self.by, self.button):
            top.addWidget(w)
        top.addStretch(1)
        self.heading = QLabel("Choose two runs (or select two in Previous runs and press Compare).")
        self.heading.setObjectName("compare_heading")
        self.heading.setWordWrap(True)
        self.heading.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.table = Table(columns("syscall"), "compare_table", "Filter syscalls or sites")
        self.total = QLabel("")
        self.total.setObjectName("compare_total")
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.heading)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.total)
        self.models = None     # (dir A, dir B, model A, model B) once compared
        self._job = None
        self._token = 0

    def set_runs(self, runs):
        """runs: [(label, run dir)], newest first."""
        keep = (self.run_a.currentData(), self.run_b.currentData())
        for combo, want, default in ((self.run_a, keep[0], 1), (self.run_b, keep[1], 0)):
            combo.blockSignals(True)
            combo.clear()
            for label, d in runs:
                combo.addItem(label, str(d))
            i = combo.findData(want) if want else -1
            combo.setCurrentIndex(i if i >= 0 else min(default, combo.count() - 1))
            combo.blockSignals(False)

    def _clicked(self):
        a, b = self.run_a.currentData(), self.run_b.currentData()
        if not a or not b:
            self.failed.emit("Compare: choose two runs")
            return
        self.compare(a, b)

    def _select(self, combo, d):
        i = combo.findData(str(d))
        if i < 0:
            combo.addItem(str(d), str(d))
            i = combo.count() - 1
        combo.setCurrentIndex(i)

    def compare(self, dir_a, dir_b):
        self._select(self.run_a, dir_a)
        self._select(self.run_b, dir_b)
        self._token += 1
        token = self._token
        self.heading.setText(f"loading {dir_a} and {dir_b} ...")
        job = ThreadJob(lambda: (token, str(dir_a), str(dir_b), runstore.model(dir_a),
                                 runstore.model(dir_b)))
        job.signals.done.connect(self._loaded)
        job.signals.failed.connect(self._failed)
        self._job = job.start()

    def _failed(self, text):
        self.heading.setText(f"Cannot compare: {text}")
        self.failed.emit(f"Compare: {text}")

    def _loaded(self, result):
        token, a, b, model_a, model_b = result
        if token != self._token:
            return
        self.models = (a, b, model_a, model_b)
        self._redraw()
        self.compared.emit(a, b)

    def _label(self, combo, d):
        i = combo.findData(d)
        return combo.itemText(i) if i >= 0 else d

    def _redraw(self):
        if not self.models:
            return
        a, b, model_a, model_b = self.models
        by = self.by.currentData()
        self.diff = diff(model_a, model_b, by, label_a=self._label(self.run_a, a),
                         label_b=self._label(self.run_b, b))
        d = self.diff
        lines = []
        for side in ("a", "b"):
            s = d[side]
            lines.append(f"<b>{side.upper()}</b>: {s['run']}" + (f" — {s['command']}" if s["command"] else ""))
        self.heading.setText("<br>".join(lines) + "<br>Δ = B − A, biggest change in time first")
        self.table.set_rows(d["rows"], columns=columns(by))
        self.table.view.sortByColumn(-1, Qt.AscendingOrder)   # keep diff's order
        t = d["total"]
        self.total.setText(f"Total: calls {fmt_int(t['calls_a'])} → {fmt_int(t['calls_b'])} "
                           f"({fmt_signed(t['calls_delta'])}), errors {t['errors_a']} → {t['errors_b']}, "
                           f"time {fmt_ns(t['time_ns_a'])} → {fmt_ns(t['time_ns_b'])} "
                           f"({_pct(t['time_delta_pct'])})")
