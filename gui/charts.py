"""The Charts tab: the plots of the HTML report (ferry.report.plots, matplotlib PNGs) for
one run. `render(model)` draws them (in a worker thread); the tab shows them."""
import threading

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from ..report import plots

CHARTS = (
    ("calls", "Calls per syscall", plots.calls_per_syscall),
    ("latency", "Latency distribution", plots.latency),
    ("timeline", "Timeline", plots.timeline),
)
AGGREGATION_NOTE = ("Batch sizes and kernel crossings saved appear here for runs made with "
                    "aggregation on; this run did not aggregate calls (profile mode {mode}).")


_drawing = threading.Lock()


def render(model):
    """{chart key: PNG bytes or None (nothing to draw)}; one drawing at a time (matplotlib
    keeps some state of its own)."""
    with _drawing:
        return {key: draw(model) for key, _, draw in CHARTS}


class ChartsTab(QScrollArea):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("charts")
        self.setWidgetResizable(True)
        body = QWidget()
        layout = QVBoxLayout(body)
        self.titles, self.images = {}, {}
        for key, title, _ in CHARTS:
            t = QLabel(f"<b>{title}</b>")
            img = QLabel("no run loaded")
            img.setObjectName(f"chart_{key}")
            img.setAlignment(Qt.AlignLeft | Qt.AlignTop)
            layout.addWidget(t)
            layout.addWidget(img)
            self.titles[key], self.images[key] = t, img
        self.aggregation = QLabel("")
        self.aggregation.setObjectName("chart_aggregation")
        self.aggregation.setWordWrap(True)
        layout.addWidget(QLabel("<b>Batch sizes and crossings</b>"))
        layout.addWidget(self.aggregation)
        layout.addStretch(1)
        self.setWidget(body)
        self.pixmaps = {}      # chart key -> the full-size QPixmap

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._fit()

    def _fit(self):
        """Charts are drawn at their own size, or narrower to fit the tab."""
        width = max(200, self.viewport().width() - 30)
        for key, pix in self.pixmaps.items():
            label = self.images[key]
            label.setPixmap(pix if pix.width() <= width else
                            pix.scaledToWidth(width, Qt.SmoothTransformation))

    def show_charts(self, model, pngs):
        for key, _, _ in CHARTS:
            label = self.images[key]
            png = pngs.get(key)
            pix = QPixmap()
            if png and pix.loadFromData(png, "PNG"):
                self.pixmaps[key] = pix
            else:
                self.pixmaps.pop(key, None)
                label.setPixmap(QPixmap())
                label.setText("nothing to draw for this run")
        self._fit()
        mode = ((model.get("info") or {}).get("profile") or {}).get("mode") or "?"
        self.aggregation.setText(AGGREGATION_NOTE.format(mode=mode))

    def clear(self):
        self.pixmaps = {}
        for label in self.images.values():
            label.setPixmap(QPixmap())
            label.setText("no run loaded")
        self.aggregation.setText("")
