"""The console: what the actions print, live (the program's stdout and stderr, ferry's
own lines), stderr in red, Ferry's notes in grey."""
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit

MAX_LINES = 20000
COLORS = {"out": None, "err": "#c0392b", "info": "#7f8c8d"}


class Console(QPlainTextEdit):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("console")
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        self.setLineWrapMode(QPlainTextEdit.NoWrap)
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.Monospace)
        font.setPointSize(9)
        self.setFont(font)
        self.setPlaceholderText("The output of Instrument, Run and Report appears here.")
        self._formats = {}
        for stream, color in COLORS.items():
            fmt = QTextCharFormat()
            if color:
                fmt.setForeground(QColor(color))
            self._formats[stream] = fmt

    def append_text(self, text, stream="out"):
        """Add `text` as it came (no newline added), keeping the view at the end if it was."""
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.End)
        cursor.insertText(text.replace("\r\n", "\n"), self._formats.get(stream, self._formats["out"]))
        if at_end:
            bar.setValue(bar.maximum())

    def text(self):
        return self.toPlainText()
