"""The main window: a project (application, arguments, working directory, environment,
profile) on the left with its previous runs; the run view and the console on the right;
the actions Instrument, Run, Report and all three in one click, with progress and Cancel."""
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QSplitter, QStyle, QTabWidget, QToolBar, QVBoxLayout, QWidget)

from .. import __version__
from ..base.errors import FerryError
from . import project as projects
from . import recent
from .console import Console
from .messages import MessageBar
from .pipeline import LEVELS, TITLES, Pipeline
from .profile_editor import ProfileEditor
from .project_form import ProjectForm
from .run_view import RunView
from .runs_panel import RunsPanel

APP_NAME = "Ferry"
ACTIONS = (  # key, title, steps, shortcut, tip
    ("instrument", "Instrument", ("instrument",), "Ctrl+I",
     "Rewrite the application and its libraries (through the image cache)"),
    ("run", "Run", ("run",), "Ctrl+R", "Run it with the shim and record a run"),
    ("report", "Report", ("report",), "Ctrl+E", "Report the selected (or latest) run"),
    ("all", "Instrument + Run + Report", ("instrument", "run", "report"), "F5",
     "All three, one after the other"),
)


class MainWindow(QMainWindow):
    """Signals: pipeline_finished(ok, text) after each action."""
    pipeline_finished = Signal(bool, str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("main_window")
        self.project = None
        self.pipeline = None
        self._loading = False
        self.resize(1360, 860)

        self.messages = MessageBar()
        self.form = ProjectForm()
        self.profile_editor = ProfileEditor()
        self.runs = RunsPanel()
        self.run_view = RunView()
        self.console = Console()

        self.left_tabs = QTabWidget()
        self.left_tabs.setObjectName("project_tabs")
        self.left_tabs.addTab(self.form, "Project")
        self.left_tabs.addTab(self.profile_editor, "Profile")
        runs_box = QWidget()
        runs_layout = QVBoxLayout(runs_box)
        runs_layout.setContentsMargins(4, 4, 4, 4)
        runs_layout.addWidget(QLabel("<b>Previous runs</b>"))
        runs_layout.addWidget(self.runs)
        left = QSplitter(Qt.Vertical)
        left.addWidget(self.left_tabs)
        left.addWidget(runs_box)
        left.setSizes([330, 470])
        right = QSplitter(Qt.Vertical)
        right.addWidget(self.run_view)
        right.addWidget(self.console)
        right.setSizes([600, 220])
        main = QSplitter(Qt.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setSizes([520, 840])
        main.setStretchFactor(1, 1)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.messages)
        layout.addWidget(main, 1)
        self.setCentralWidget(central)

        self._make_actions()
        self._make_status_bar()
        self.form.edited.connect(self._modified)
        self.profile_editor.edited.connect(self._modified)
        self.runs.open_requested.connect(self.open_run)
        self.runs.compare_requested.connect(self.compare_runs)
        self.runs.message.connect(self.show_message)
        self.runs.refreshed.connect(self._runs_refreshed)
        self.run_view.failed.connect(lambda text: self.show_message("error", text))
        self.run_view.compare.failed.connect(lambda text: self.show_message("error", text))
        self._update_actions()
        self._update_title()
        self.show_message("info", "No project open: Project ▸ New… to make one for a program, "
                                  "or Project ▸ Open….")

    # --- building ----------------------------------------------------------------------

    def _make_actions(self):
        style = self.style()
        menu = self.menuBar().addMenu("&Project")
        self.action_new = QAction("&New…", self, shortcut=QKeySequence.New, triggered=self._new_dialog)
        self.action_open = QAction("&Open…", self, shortcut=QKeySequence.Open, triggered=self._open_dialog)
        self.action_save = QAction("&Save", self, shortcut=QKeySequence.Save, triggered=self.save_project)
        self.action_save_as = QAction("Save &As…", self, shortcut=QKeySequence.SaveAs,
                                      triggered=self._save_as_dialog)
        menu.addAction(self.action_new)
        menu.addAction(self.action_open)
        self.recent_menu = menu.addMenu("Open &Recent")
        self.recent_menu.setObjectName("recent_menu")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        menu.addSeparator()
        menu.addAction(self.action_save)
        menu.addAction(self.action_save_as)
        menu.addSeparator()
        menu.addAction(QAction("&Quit", self, shortcut=QKeySequence.Quit, triggered=self.close))

        self.actions = {}
        icons = {"instrument": QStyle.SP_FileDialogDetailedView, "run": QStyle.SP_MediaPlay,
                 "report": QStyle.SP_FileDialogContentsView, "all": QStyle.SP_MediaSeekForward}
        run_menu = self.menuBar().addMenu("&Actions")
        toolbar = QToolBar("Actions")
        toolbar.setObjectName("actions_toolbar")
        toolbar.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        toolbar.setMovable(False)
        self.addToolBar(toolbar)
        self.toolbar = toolbar
        for key, title, steps, shortcut, tip in ACTIONS:
            a = QAction(style.standardIcon(icons[key]), title, self)
            a.setObjectName(f"action_{key}")
            a.setShortcut(QKeySequence(shortcut))
            a.setToolTip(f"{tip} ({shortcut})")
            a.triggered.connect(lambda _=False, s=steps: self.start(s))
            self.actions[key] = a
            run_menu.addAction(a)
            toolbar.addAction(a)
        self.action_cancel = QAction(style.standardIcon(QStyle.SP_BrowserStop), "Cancel", self)
        self.action_cancel.setObjectName("action_cancel")
        self.action_cancel.setShortcut(QKeySequence("Esc"))
        self.action_cancel.setToolTip("Stop what is running (SIGTERM, then SIGKILL)")
        self.action_cancel.triggered.connect(self.cancel)
        run_menu.addSeparator()
        run_menu.addAction(self.action_cancel)
        toolbar.addSeparator()
        toolbar.addAction(self.action_cancel)

        runs_menu = self.menuBar().addMenu("&Runs")
        runs_menu.addAction(QAction("&Refresh", self, shortcut=QKeySequence.Refresh,
                                    triggered=self.runs.refresh))
        runs_menu.addAction(QAction("&Open selected", self, triggered=self.runs.open_selected))
        runs_menu.addAction(QAction("&Compare selected", self, triggered=self.runs.compare_selected))
        runs_menu.addAction(QAction("&Export selected…", self, triggered=self.runs.export_selected))
        runs_menu.addAction(QAction("&Delete selected…", self, triggered=self.runs.delete_selected))
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(QAction("&About Ferry", self, triggered=self._about))

    def _make_status_bar(self):
        bar = self.statusBar()
        self.step_label = QLabel("")
        self.step_label.setObjectName("step_label")
        self.progress = QProgressBar()
        self.progress.setObjectName("progress")
        self.progress.setMaximumWidth(260)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.elapsed_label = QLabel("")
        bar.addPermanentWidget(self.step_label)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.elapsed_label)
        self._clock = QElapsedTimer()
        self._ticker = QTimer(self)
        self._ticker.setInterval(200)
        self._ticker.timeout.connect(self._tick)

    def button(self, key):
        """The toolbar button of an action ("instrument", "run", "report", "all", "cancel")."""
        action = self.action_cancel if key == "cancel" else self.actions[key]
        return self.toolbar.widgetForAction(action)

    # --- messages --------------------------------------------------------------------

    def show_message(self, level, text):
        """Show `text` in the message area, unless something worse is already shown for
        the action under way."""
        if self.busy() and self.messages.level and LEVELS[self.messages.level] > LEVELS.get(level, 0):
            self.statusBar().showMessage(text, 10000)
            return
        self.messages.show_message(level, text)
        self.statusBar().showMessage(text, 10000)
        if level == "error":
            self.console.append_text(f"{text}\n", "err")

    # --- projects --------------------------------------------------------------------

    def _new_dialog(self):
        path, _ = QFileDialog.getSaveFileName(self, "New project", str(Path.cwd() / "project.ferryproj"),
                                              "Ferry projects (*.ferryproj)")
        if path:
            self.new_project(path)

    def _open_dialog(self):
        start = str(self.project.folder if self.project else Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self, "Open project", start,
                                              "Ferry projects (*.ferryproj);;All files (*)")
        if path:
            self.open_project(path)

    def _save_as_dialog(self):
        if self.project is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save project as", str(self.project.path),
                                              "Ferry projects (*.ferryproj)")
        if path:
            if not path.endswith(projects.SUFFIX):
                path += projects.SUFFIX
            self.save_project(path)

    def _fill_recent(self):
        self.recent_menu.clear()
        paths = recent.load()
        for p in paths:
            self.recent_menu.addAction(p, lambda _checked=False, p=p: self.open_project(p))
        if not paths:
            a = self.recent_menu.addAction("(none yet)")
            a.setEnabled(False)

    def new_project(self, path, application=""):
        """Make a project file at `path` and open it; the Project, or None."""
        if not self._may_replace_project():
            return None
        try:
            project = projects.new(path, application)
        except FerryError as e:
            self.show_message("error", f"Cannot create the project: {e}")
            return None
        self._set_project(project)
        self.show_message("info", f"New project {project.path}: choose the application, "
                                  "then press Instrument + Run + Report.")
        return project

    def open_project(self, path):
        """Open the project file `path`; the Project, or None (the problem is shown)."""
        if not self._may_replace_project():
            return None
        try:
            project = projects.load(path)
        except FerryError as e:
            self.show_message("error", f"Cannot open the project: {e}")
            return None
        self._set_project(project)
        self.messages.clear()
        if self.profile_editor.load_warning:
            self.show_message("warning", f"Profile: {self.profile_editor.load_warning}")
        self.statusBar().showMessage(f"Opened {project.path}", 5000)
        return project

    def _may_replace_project(self):
        if self.busy():
            self.show_message("warning", "Cancel what is running before changing project")
            return False
        if self.project is not None and self.isWindowModified():
            self.save_project()
        return True

    def _set_project(self, project):
        self._loading = True
        self.project = project
        self.form.set_project(project)
        self.profile_editor.set_project(project)
        self.runs.set_project(project)
        self._loading = False
        self.setWindowModified(False)
        recent.add(project.path)
        self._update_title()
        self._update_actions()
        runs = self.runs.runs()
        if runs:
            self.open_run(runs[0]["dir"])

    def _modified(self):
        if not self._loading and self.project is not None:
            self.setWindowModified(True)

    def _apply(self):
        """The form and the profile choice into self.project; FerryError if they do not parse."""
        self.form.apply_to(self.project)
        self.profile_editor.apply_to(self.project)

    def save_project(self, path=None):
        """Save the project (and its own profile, if it has one); True if saved."""
        if self.project is None:
            return False
        try:
            self._apply()
            self.profile_editor.save()
            self.project.save(path)
        except FerryError as e:
            self.show_message("error", f"Cannot save the project: {e}")
            return False
        self.setWindowModified(False)
        recent.add(self.project.path)
        self._update_title()
        self.statusBar().showMessage(f"Saved {self.project.path}", 5000)
        return True

    def _update_title(self):
        name = self.project.path.name if self.project else "no project"
        self.setWindowTitle(f"{name}[*] — {APP_NAME}")

    # --- actions ---------------------------------------------------------------------

    def busy(self):
        return self.pipeline is not None and self.pipeline.running()

    def _update_actions(self):
        busy = self.busy()
        have = self.project is not None
        for a in self.actions.values():
            a.setEnabled(have and not busy)
        self.action_cancel.setEnabled(busy)
        self.action_save.setEnabled(have and not busy)
        self.action_save_as.setEnabled(have and not busy)
        self.left_tabs.setEnabled(have and not busy)

    def start(self, steps):
        """Start Instrument / Run / Report (a sequence of those); False if refused."""
        if self.project is None or self.busy():
            return False
        self.messages.clear()
        try:
            self._apply()
        except FerryError as e:
            self.left_tabs.setCurrentWidget(self.form)
            self.show_message("error", f"Cannot start: {e}")
            return False
        if "run" in steps and self.profile_editor.validate() is None:
            self.left_tabs.setCurrentWidget(self.profile_editor)
            self.profile_editor.focus_problem()
            line = self.profile_editor.error_line
            where = f" (line {line})" if line else ""
            self.show_message("error", f"Invalid profile{where}: {self.profile_editor.problem}")
            return False
        if not self.save_project():
            return False
        report_dir = None
        if steps == ("report",):
            selected = self.runs.table.selected_rows()
            report_dir = selected[0]["dir"] if len(selected) == 1 else None
        self.pipeline = Pipeline(self.project, steps, report_dir, self)
        p = self.pipeline
        p.step_started.connect(self._step_started)
        p.progress.connect(self._progress)
        p.output.connect(self.console.append_text)
        p.message.connect(self.show_message)
        p.run_recorded.connect(self._run_recorded)
        p.report_ready.connect(self.open_run)
        p.finished.connect(self._finished)
        self.console.append_text(f"\n=== {' + '.join(TITLES[s] for s in p.steps)}: "
                                 f"{self.project.name} ===\n", "info")
        self._clock.start()
        self._ticker.start()
        self.progress.show()
        self.progress.setRange(0, 0)
        p.start()
        self._update_actions()
        return True

    def cancel(self):
        if self.busy():
            self.step_label.setText("cancelling…")
            self.pipeline.cancel()

    def _step_started(self, step, index, count):
        self.step_label.setText(f"{index}/{count} {TITLES[step]}")
        self.statusBar().showMessage(f"{TITLES[step]}: {self.project.application}")

    def _progress(self, value, maximum, text):
        self.progress.setRange(0, maximum)
        if maximum:
            self.progress.setValue(value)
        self.progress.setFormat(text[:40] + (" %v/%m" if maximum > 1 else ""))

    def _tick(self):
        self.elapsed_label.setText(f"{self._clock.elapsed() / 1000:.1f} s")

    def _run_recorded(self, run_dir):
        self.runs.refresh()
        self.runs.select_dirs([run_dir])

    def _runs_refreshed(self):
        self.run_view.compare.set_runs(self.runs.labels())

    def _finished(self, ok, text):
        self._ticker.stop()
        self._tick()
        self.progress.hide()
        self.step_label.setText("done" if ok else text)
        if ok and not self.messages.level:
            self.show_message("info", f"Done: {text}")
        self.statusBar().showMessage(text, 10000)
        self.pipeline.deleteLater()
        self.pipeline = None
        self._update_actions()
        self.pipeline_finished.emit(ok, text)

    # --- runs ------------------------------------------------------------------------

    def open_run(self, run_dir):
        self.run_view.load(run_dir)

    def compare_runs(self, dir_a, dir_b):
        self.run_view.setCurrentWidget(self.run_view.compare)
        self.run_view.compare.compare(dir_a, dir_b)

    # --- window ----------------------------------------------------------------------

    def _about(self):
        QMessageBox.about(self, "About Ferry",
                          f"<b>Ferry {__version__}</b><p>Rewrites the system-call sites of compiled "
                          "programs so that every call goes through Ferry's shim.</p><p>Instrument, "
                          "Run, Report: the loop of Etch's Visual Etch, over the same library "
                          "code as the <tt>ferry</tt> command line.</p>")

    def closeEvent(self, event):
        if self.busy():
            job = self.pipeline.job
            self.pipeline.cancel()
            if job is not None and not job.proc.waitForFinished(3000):
                job.proc.kill()
                job.proc.waitForFinished(1000)
        if self.project is not None and self.isWindowModified():
            self.save_project()
        event.accept()
