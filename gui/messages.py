"""The message area at the top of the window: the latest problem (or news) in one line,
coloured by how bad it is, with a button to dismiss it."""
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton

STYLES = {
    "info": ("#eaf2f8", "#1f618d"),
    "warning": ("#fef5e7", "#9a7d0a"),
    "error": ("#fdedec", "#c0392b"),
}
ICONS = {"info": "ℹ", "warning": "⚠", "error": "✖"}


class MessageBar(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("message_bar")
        self.icon = QLabel()
        self.label = QLabel()
        self.label.setObjectName("message_text")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        close = QToolButton()
        close.setText("×")
        close.setAutoRaise(True)
        close.clicked.connect(self.clear)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.icon)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.level = None
        self.hide()

    def show_message(self, level, text):
        bg, fg = STYLES.get(level, STYLES["info"])
        self.setStyleSheet(f"#message_bar {{ background: {bg}; border: 1px solid {fg}; "
                           f"border-radius: 3px; }} QLabel {{ color: {fg}; }}")
        self.icon.setText(ICONS.get(level, ""))
        self.label.setText(text)
        self.level = level
        self.show()

    def text(self):
        return self.label.text() if self.level else ""

    def clear(self):
        self.level = None
        self.label.setText("")
        self.hide()
