"""The profile of a project: one of the shipped profiles, or the project's own TOML edited
in place. The text is validated as it is typed (ferry.profiles.loads, the same check as
`ferry profile check`), and a mistake is marked on the line where it is."""
import re

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QTextCursor, QTextFormat
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QTextEdit,
                               QVBoxLayout, QWidget)

from ..profiles import loads, read_text, shipped_paths
from ..base.errors import FerryError

CUSTOM = "custom"
VALIDATE_AFTER_MS = 250
_TOML_LINE = re.compile(r"^line (\d+), column \d+:")
_SECTION = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*(\"(?:[^\"\\]|\\.)*\"|[A-Za-z0-9_-]+)\s*=")


def _unquote(s):
    s = s.strip()
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def _split_key(token):
    """'trace.syscalls[2]' -> ('trace', 'syscalls'); 'mode' -> ('', 'mode')."""
    token = re.sub(r"\[\d+\]$", "", token)
    parts = re.findall(r"\"(?:[^\"\\]|\\.)*\"|[^.]+", token)
    parts = [_unquote(p) for p in parts]
    if len(parts) >= 2:
        return parts[0], parts[1]
    return "", parts[0] if parts else ""


def locate(text, problem):
    """The 1-based line of `text` that a profile error (`problem`, without the file name)
    is about, or None if it is about no line (a key that is missing, say)."""
    lines = text.split("\n")
    m = _TOML_LINE.match(problem)
    if m:
        return min(int(m.group(1)), len(lines))
    if problem.startswith("end of file"):
        return len(lines)
    token, _, rest = problem.partition(": ")
    if rest.startswith("missing"):
        return None
    section, key = _split_key(token)
    if rest.startswith("unknown section"):
        section, key = key, None
    current, header = "", None
    for n, line in enumerate(lines, 1):
        s = _SECTION.match(line)
        if s:
            current = _unquote(s.group(1))
            if current == section and header is None:
                header = n
            continue
        k = _KEY.match(line)
        if key is not None and k and current == section and _unquote(k.group(1)) == key:
            return n
    return header


class ProfileEditor(QWidget):
    """Signals: edited() when the choice or the text changes, checked(ok, message) after
    each validation."""
    edited = Signal()
    checked = Signal(bool, str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("profile_editor")
        self.project = None
        self.choice = QComboBox()
        self.choice.setObjectName("profile_choice")
        self._shipped = shipped_paths()
        for name in self._shipped:
            self.choice.addItem(name, name)
        self.choice.addItem("this project's own (edited)", CUSTOM)
        self.choice.currentIndexChanged.connect(self._chosen)
        self.where = QLabel("")
        self.where.setObjectName("profile_where")
        self.where.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setObjectName("profile_text")
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.Monospace)
        self.text.setFont(font)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.textChanged.connect(self._typed)
        self.error = QLabel("")
        self.error.setObjectName("profile_error")
        self.error.setWordWrap(True)
        self.error.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.validate)
        top = QHBoxLayout()
        top.addWidget(QLabel("Profile:"))
        top.addWidget(self.choice, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.where)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.error)
        self._custom_text = None
        self._loading = False
        self.problem = None          # the current error (one line), or None
        self.error_line = None       # the line it is on, or None
        self.profile = None          # the Profile of the text when valid
        self.load_warning = None     # the project's profile could not be read

    # --- the project's profile -----------------------------------------------------------

    def set_project(self, project):
        """Show the profile `project` uses (a shipped one, or its own file)."""
        self.project = project
        self._custom_text = None
        unreadable = None
        if project.profile_is_file():
            try:
                self._custom_text = read_text(project.profile_file())
            except FerryError as e:
                unreadable = f"{e}: starting again from the shipped trace profile"
            self._select(CUSTOM)
        elif project.profile in self._shipped:
            self._select(project.profile)
        else:
            unreadable = (f"{project.profile}: no shipped profile of this name: starting from "
                          "the shipped trace profile")
            self._select(CUSTOM)
        self._fill()
        self.load_warning = unreadable
        if unreadable:
            self.where.setText(f"<span style='color:#9a7d0a'>{_html(unreadable)}</span>")

    def _select(self, value):
        self._loading = True
        self.choice.setCurrentIndex(self.choice.findData(value))
        self._loading = False

    def chosen(self):
        return self.choice.currentData()

    def choose(self, value):
        """Pick a shipped profile by name, or CUSTOM."""
        self.choice.setCurrentIndex(self.choice.findData(value))

    def _custom_path(self):
        if self.project is None:
            return None
        if self.project.profile_is_file():
            return self.project.profile_file()
        return self.project.folder / self.project.custom_profile_name()

    def path(self):
        """The file the profile is (or will be saved) in."""
        c = self.chosen()
        return self._custom_path() if c == CUSTOM else self._shipped[c]

    def _fill(self):
        c = self.chosen()
        if c == CUSTOM:
            text = self._custom_text if self._custom_text is not None else self._shipped_text("trace")
            self.where.setText(f"This project's own profile, saved as {self._custom_path()}")
        else:
            text = self._shipped_text(c)
            self.where.setText(f"Shipped profile {c} ({self._shipped[c]}). Editing it makes "
                               "a profile of this project's own; the shipped file is not changed.")
        self._loading = True
        self.text.setPlainText(text)
        self._loading = False
        self.validate()

    def _shipped_text(self, name):
        try:
            return read_text(self._shipped[name])
        except FerryError as e:
            return f"# {e}\n"

    def _chosen(self, _i):
        if self._loading:
            return
        self._fill()
        self.edited.emit()

    def _typed(self):
        if self._loading:
            return
        text = self.text.toPlainText()
        c = self.chosen()
        if c != CUSTOM and text != self._shipped_text(c):
            self._select(CUSTOM)
            self.where.setText(f"This project's own profile (from {c}), saved as "
                               f"{self._custom_path()}")
        if self.chosen() == CUSTOM:
            self._custom_text = text
        self._timer.start(VALIDATE_AFTER_MS)
        self.edited.emit()

    def apply_to(self, project):
        """Record the choice in `project` (saving the project's own profile file is save())."""
        if self.chosen() == CUSTOM:
            path = self._custom_path()
            try:
                project.profile = str(path.relative_to(project.folder))
            except ValueError:
                project.profile = str(path)
        else:
            project.profile = self.chosen()

    def save(self):
        """Write the project's own profile file (when it has one); FerryError if it cannot."""
        if self.chosen() != CUSTOM or self.project is None:
            return None
        from ..report.output import write_atomic
        path = self._custom_path()
        try:
            write_atomic(path, self.text.toPlainText())
        except FerryError as e:
            raise FerryError(path, e.problem.replace("the report", "the profile")) from None
        return path

    # --- validation ------------------------------------------------------------------

    def validate(self):
        """Check the text now; the Profile, or None (the problem is shown where it is)."""
        self._timer.stop()
        text = self.text.toPlainText()
        path = self.path() or "profile.toml"
        try:
            self.profile = loads(text, path)
        except FerryError as e:
            self.profile = None
            self._show_problem(e.problem, locate(text, e.problem))
            self.checked.emit(False, self.problem)
            return None
        self.problem, self.error_line = None, None
        self.error.setText(f"<span style='color:#27ae60'>valid: profile {self.profile.name}, "
                           f"mode {self.profile.mode}</span>")
        self.text.setExtraSelections([])
        self.checked.emit(True, "")
        return self.profile

    def _show_problem(self, problem, line):
        self.problem, self.error_line = problem, line
        where = f"line {line}: " if line and not _TOML_LINE.match(problem) else ""
        self.error.setText(f"<span style='color:#c0392b'><b>{_html(where + problem)}</b></span>")
        marks = []
        if line:
            sel = QTextEdit.ExtraSelection()
            sel.format.setBackground(QColor("#fadbd8"))
            sel.format.setProperty(QTextFormat.FullWidthSelection, True)
            sel.cursor = QTextCursor(self.text.document().findBlockByLineNumber(line - 1))
            sel.cursor.clearSelection()
            marks.append(sel)
        self.text.setExtraSelections(marks)

    def focus_problem(self):
        """Put the cursor on the line of the problem (shown when a run is refused)."""
        if self.error_line:
            block = self.text.document().findBlockByLineNumber(self.error_line - 1)
            self.text.setTextCursor(QTextCursor(block))
            self.text.centerCursor()
        self.text.setFocus()


def _html(s):
    from html import escape
    return escape(s)
