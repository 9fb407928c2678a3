"""One run, in tabs: Summary, Syscalls, Sites, Processes, Charts, Compare. The run model
comes from ferry.report.source/ferry.rundata (docs/run.md), the rows from
ferry.report.rows, the charts from ferry.report.plots: the same numbers as `ferry report`."""
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QFormLayout, QHBoxLayout, QLabel, QPushButton, QTabWidget,
                               QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from ..report import rows as R
from ..report.table import process_notes
from . import charts, runstore
from .compare import CompareTab
from .jobs import ThreadJob
from .tables import Column, Table, fmt_int, fmt_ns, fmt_pct

SYSCALL_COLUMNS = [
    Column("syscall", lambda r: r["name"]),
    Column("nr", lambda r: r.get("nr"), None, True),
    Column("calls", lambda r: r["calls"], fmt_int, True),
    Column("errors", lambda r: r["errors"], fmt_int, True),
    Column("% time", lambda r: r["pct_time"], fmt_pct, True),
    Column("time", lambda r: r["time_ns"], fmt_ns, True),
    Column("avg", lambda r: r["avg_ns"], fmt_ns, True),
    Column("min", lambda r: r.get("min_ns"), fmt_ns, True),
    Column("max", lambda r: r.get("max_ns"), fmt_ns, True),
    Column("errnos", lambda r: ", ".join(f"{k} {v}" for k, v in
                                         sorted((r.get("errnos") or {}).items(), key=lambda kv: -kv[1]))),
]
SITE_COLUMNS = [
    Column("module", lambda r: r.get("module")),
    Column("function", lambda r: r.get("function")),
    Column("syscall", lambda r: r.get("name")),
    Column("address", lambda r: r.get("address")),
    Column("calls", lambda r: r["calls"], fmt_int, True),
    Column("errors", lambda r: r["errors"], fmt_int, True),
    Column("time", lambda r: r["time_ns"], fmt_ns, True),
    Column("avg", lambda r: r["avg_ns"], fmt_ns, True),
    Column("% time", lambda r: r["pct_time"], fmt_pct, True),
    Column("site", lambda r: r["id"]),
]
PROCESS_COLUMNS = ("pid", "program", "ended", "shim", "threads", "calls", "errors", "time",
                   "duration", "command line")
SUMMARY_FIELDS = (("command", "Command"), ("cwd", "Working directory"), ("start", "Started"),
                  ("duration", "Duration"), ("exit", "Exit"), ("profile", "Profile"),
                  ("program", "Program"), ("totals", "System calls"), ("processes", "Processes"),
                  ("shim_calls", "Shim's own calls"), ("host", "Host"), ("notes", "Notes"),
                  ("dir", "Run directory"))


class SummaryTab(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("summary")
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignRight)
        self.fields = {}
        for key, title in SUMMARY_FIELDS:
            label = QLabel("")
            label.setObjectName(f"summary_{key}")
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            form.addRow(f"{title}:", label)
            self.fields[key] = label
        self.html_button = QPushButton("Open HTML report")
        self.html_button.setObjectName("open_html_report")
        self.folder_button = QPushButton("Open run folder")
        self.folder_button.setObjectName("open_run_folder")
        for b in (self.html_button, self.folder_button):
            b.setEnabled(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.html_button)
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        self.title = QLabel("<i>No run shown. Press Run, or open one from Previous runs.</i>")
        self.title.setObjectName("summary_title")
        layout.addWidget(self.title)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addStretch(1)

    def show_model(self, run_dir, model):
        info = model.get("info") or {}
        tot = model["totals"]
        prof = info.get("profile") or {}
        prog = info.get("program") or {}
        exit_ = info.get("exit")
        ended = R.exit_text(exit_) if exit_ else info.get("state") or "?"
        if exit_ and exit_.get("signal"):
            ended = f"<span style='color:#c0392b'><b>crashed: killed by {exit_['signal']}</b></span>"
        notes = process_notes(model) + [(model.get("preinit") or {}).get("note") or ""]
        shim = model.get("shim_calls") or {}
        values = {
            "command": shlex.join(info.get("command") or []),
            "cwd": info.get("cwd") or "",
            "start": f"{info.get('start') or '?'}  (ended {info.get('end') or '?'})",
            "duration": "" if info.get("duration_s") is None else f"{info['duration_s']:.3f} s",
            "exit": ended,
            "profile": f"{prof.get('name', '?')} (mode {prof.get('mode', '?')})",
            "program": (f"{prog.get('original', '?')}: "
                        + ("instrumented" if prog.get("enabled") else
                           f"ran without the shim: {prog.get('reason') or '?'}")) if prog else "",
            "totals": f"{fmt_int(tot['calls'])} calls, {fmt_int(tot['errors'])} errors, "
                      f"{fmt_ns(tot['time_ns'])} in system calls",
            "processes": str(tot["processes"]),
            "shim_calls": (f"{sum(shim.values())} (" + ", ".join(f"{k} {v}" for k, v in shim.items())
                           + "), not in the tables") if shim else "none",
            "host": f"{info.get('host') or '?'}, kernel {info.get('kernel') or '?'}, "
                    f"ferry {info.get('ferry_version') or '?'}",
            "notes": "\n".join(n for n in notes if n),
            "dir": str(run_dir),
        }
        for key, label in self.fields.items():
            label.setTextFormat(Qt.RichText if key == "exit" else Qt.PlainText)
            label.setText(values[key])
        self.title.setText(f"<b>Run {Path(run_dir).name}</b> — {shlex.join(info.get('command') or [])}")
        for b in (self.html_button, self.folder_button):
            b.setEnabled(True)


class _Item(QTreeWidgetItem):
    """Sorts numeric columns as numbers."""

    def __lt__(self, other):
        col = self.treeWidget().sortColumn() if self.treeWidget() else 0
        a, b = self.data(col, Qt.UserRole), other.data(col, Qt.UserRole)
        if a is not None and b is not None:
            return a < b
        return self.text(col) < other.text(col)


class ProcessTree(QTreeWidget):
    """Processes under their parents; an image replaced by exec holds its successor."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("processes")
        self.setHeaderLabels(list(PROCESS_COLUMNS))
        self.setSortingEnabled(True)
        self.setAlternatingRowColors(True)
        self.setUniformRowHeights(True)
        self.sortByColumn(0, Qt.AscendingOrder)

    def show_model(self, model):
        self.clear()
        self.setSortingEnabled(False)
        latest = {}       # pid -> the item of its latest image
        for p in model["processes"]:
            if p.get("enabled") is False:
                shim = f"not enabled: {p.get('reason') or '?'}"
            else:
                shim = "enabled" + (f" ({p['reason']})" if p.get("reason") else "")
            values = [p["pid"], R.program(p), R.state_text(p), shim, p.get("threads"),
                      p.get("calls"), p.get("errors"), p.get("time_ns"), p.get("duration_s"),
                      shlex.join(p["argv"]) if p.get("argv") else ""]
            texts = [str(p["pid"]), R.program(p), R.state_text(p), shim,
                     "" if p.get("threads") is None else str(p["threads"]),
                     fmt_int(p.get("calls")), fmt_int(p.get("errors")), fmt_ns(p.get("time_ns")),
                     "" if p.get("duration_s") is None else f"{p['duration_s']:.3f} s", values[-1]]
            item = _Item(texts)
            for col, v in enumerate(values):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    item.setData(col, Qt.UserRole, v)
                    item.setTextAlignment(col, Qt.AlignRight | Qt.AlignVCenter)
            item.setToolTip(3, shim)
            item.setData(0, Qt.UserRole + 1, p)
            parent = latest.get(p["pid"])
            if parent is None:
                parent = latest.get(p.get("ppid"))
            if parent is not None:
                parent.addChild(item)
            else:
                self.addTopLevelItem(item)
            latest[p["pid"]] = item
        self.expandAll()
        self.setSortingEnabled(True)
        for col in range(len(PROCESS_COLUMNS) - 1):
            self.resizeColumnToContents(col)

    def all_items(self):
        out = []

        def walk(item):
            out.append(item)
            for i in range(item.childCount()):
                walk(item.child(i))
        for i in range(self.topLevelItemCount()):
            walk(self.topLevelItem(i))
        return out


class RunView(QTabWidget):
    """load(run_dir) reads the run off the UI thread, then fills every tab; signals
    loaded(run_dir) or failed(one line)."""
    loaded = Signal(str)
    failed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("run_view")
        self.summary = SummaryTab()
        self.syscalls = Table(SYSCALL_COLUMNS, "syscalls", "Filter syscalls (name, errno, ...)")
        self.sites = Table(SITE_COLUMNS, "sites", "Filter sites (module, function, syscall, ...)")
        self.processes = ProcessTree()
        self.charts = charts.ChartsTab()
        self.compare = CompareTab()
        for widget, title in ((self.summary, "Summary"), (self.syscalls, "Syscalls"),
                              (self.sites, "Sites"), (self.processes, "Processes"),
                              (self.charts, "Charts"), (self.compare, "Compare")):
            self.addTab(widget, title)
        self.summary.html_button.clicked.connect(self.open_html_report)
        self.summary.folder_button.clicked.connect(self.open_folder)
        self.run_dir = None
        self.model = None
        self._token = 0
        self._job = None

    def load(self, run_dir):
        self._token += 1
        token = self._token
        run_dir = str(run_dir)

        def work():
            model = runstore.model(run_dir)
            return token, run_dir, model, charts.render(model)
        job = ThreadJob(work)
        job.signals.done.connect(self._loaded)
        job.signals.failed.connect(self._failed)
        self._job = job.start()

    def _failed(self, text):
        self.failed.emit(f"Cannot show the run: {text}")

    def _loaded(self, result):
        token, run_dir, model, pngs = result
        if token != self._token:
            return
        self.show_model(run_dir, model, pngs)
        self.loaded.emit(run_dir)

    def show_model(self, run_dir, model, pngs):
        self.run_dir, self.model = run_dir, model
        self.summary.show_model(run_dir, model)
        self.syscalls.set_rows(R.rows(model, "syscall", "time"), self.syscalls.column("time"))
        self.sites.set_rows(R.rows(model, "site", "time"), self.sites.column("calls"))
        self.processes.show_model(model)
        self.charts.show_charts(model, pngs)

    def report_html(self):
        """Write the run's HTML report (ferry.report.html) into its directory; its path."""
        from ..report.html import to_html
        from ..report.output import write_atomic
        path = Path(self.run_dir) / "report.html"
        write_atomic(path, to_html(self.model))
        return path

    def open_html_report(self):
        from ..base.errors import FerryError
        if self.model is None:
            return
        try:
            path = self.report_html()
        except FerryError as e:
            self.failed.emit(str(e))
            return
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))

    def open_folder(self):
        if self.run_dir:
            QDesktopServices.openUrl(QUrl.fromLocalFile(self.run_dir))
