"""The project's settings as a form: application, arguments, working directory,
environment additions (the profile has its own editor)."""
import os
import shlex

from PySide6.QtCore import Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QFileDialog, QFormLayout, QHBoxLayout, QLineEdit, QPlainTextEdit,
                               QPushButton, QVBoxLayout, QWidget)

from ..base.errors import FerryError


def parse_environment(text):
    """{NAME: value} from NAME=VALUE lines (blank lines and # comments skipped)."""
    env = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        name, eq, value = s.partition("=")
        if not eq or not name.strip():
            raise FerryError("environment", f"line {n}: expected NAME=VALUE, got {s!r}")
        env[name.strip()] = value
    return env


class ProjectForm(QWidget):
    edited = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("project_form")
        self.project = None
        self.application = QLineEdit()
        self.application.setObjectName("application")
        self.application.setPlaceholderText("the program to run: a path, or a command on PATH")
        self.arguments = QLineEdit()
        self.arguments.setObjectName("arguments")
        self.arguments.setPlaceholderText("its arguments, as in a shell: -v 'a file.txt'")
        self.working_directory = QLineEdit()
        self.working_directory.setObjectName("working_directory")
        self.working_directory.setPlaceholderText(". (the project's folder)")
        self.environment = QPlainTextEdit()
        self.environment.setObjectName("environment")
        self.environment.setPlaceholderText("NAME=VALUE, one a line: added to the program's environment")
        self.environment.setFont(QFont("DejaVu Sans Mono"))
        self.environment.setMaximumHeight(90)
        browse_app = QPushButton("Browse…")
        browse_app.setObjectName("browse_application")
        browse_app.clicked.connect(self._browse_application)
        browse_dir = QPushButton("Browse…")
        browse_dir.setObjectName("browse_working_directory")
        browse_dir.clicked.connect(self._browse_directory)
        outer = QVBoxLayout(self)
        form = QFormLayout()
        outer.addLayout(form)
        outer.addStretch(1)
        form.addRow("Application:", _row(self.application, browse_app))
        form.addRow("Arguments:", self.arguments)
        form.addRow("Working directory:", _row(self.working_directory, browse_dir))
        form.addRow("Environment:", self.environment)
        for w in (self.application, self.arguments, self.working_directory):
            w.textEdited.connect(self.edited)
        self.environment.textChanged.connect(self._env_changed)
        self._loading = False

    def _env_changed(self):
        if not self._loading:
            self.edited.emit()

    def set_project(self, project):
        self.project = project
        self._loading = True
        self.application.setText(project.application)
        self.arguments.setText(shlex.join(project.arguments))
        self.working_directory.setText(project.working_directory)
        self.environment.setPlainText("".join(f"{k}={v}\n" for k, v in project.environment.items()))
        self._loading = False

    def apply_to(self, project):
        """Copy the form into `project`; FerryError for arguments or environment that do
        not parse."""
        try:
            args = shlex.split(self.arguments.text())
        except ValueError as e:
            raise FerryError("arguments", f"{e} (write them as in a shell)") from None
        env = parse_environment(self.environment.toPlainText())
        project.application = self.application.text().strip()
        project.arguments = args
        project.working_directory = self.working_directory.text().strip() or "."
        project.environment = env

    def _browse_application(self):
        start = str(self.project.folder) if self.project else os.getcwd()
        path, _ = QFileDialog.getOpenFileName(self, "Application", start)
        if path:
            self.application.setText(path)
            self.edited.emit()

    def _browse_directory(self):
        start = str(self.project.cwd()) if self.project else os.getcwd()
        path = QFileDialog.getExistingDirectory(self, "Working directory", start)
        if path:
            self.working_directory.setText(path)
            self.edited.emit()


def _row(*widgets):
    w = QWidget()
    layout = QHBoxLayout(w)
    layout.setContentsMargins(0, 0, 0, 0)
    for x in widgets:
        layout.addWidget(x, 1 if isinstance(x, QLineEdit) else 0)
    return w
