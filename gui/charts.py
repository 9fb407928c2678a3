"""The Charts tab: the plots of the HTML report (ferry.report.plots, matplotlib PNGs) for
one run. `render(model)` draws them (in a worker thread); the tab shows them. A run that
aggregated calls also gets what the report's Aggregation section shows: its summary, the
batch sizes and the fibers and switches per carrier."""
import threading

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from ..report import aggregation, plots

CHARTS = (
    ("calls", "Calls per syscall", plots.calls_per_syscall),
    ("latency", "Latency distribution", plots.latency),
    ("timeline", "Timeline", plots.timeline),
)
# drawn only for a run with aggregation figures; hidden otherwise
AGGREGATION_CHARTS = (
    ("batches", "Batch sizes (calls per io_uring_enter)", plots.batch_sizes),
    ("carriers", "Fibers and switches per carrier", plots.carriers),
)
NO_AGGREGATION = "This run did not aggregate calls (profile mode {mode})."


_drawing = threading.Lock()


def render(model):
    """{chart key: PNG bytes or None (nothing to draw)}; one drawing at a time (matplotlib
    keeps some state of its own)."""
    with _drawing:
        return {key: draw(model) for key, _, draw in CHARTS + AGGREGATION_CHARTS}


def aggregation_text(model):
    """The report's words on the run's aggregation (ferry.report.aggregation)."""
    agg = aggregation.of(model)
    if agg:
        return " ".join([aggregation.summary(agg), *aggregation.unfinished_notes(agg)])
    mode = ((model.get("info") or {}).get("profile") or {}).get("mode") or "?"
    return aggregation.unused_note(model) or NO_AGGREGATION.format(mode=mode)


class ChartsTab(QScrollArea):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("charts")
        self.setWidgetResizable(True)
        body = QWidget()
        layout = QVBoxLayout(body)
        self.titles, self.images = {}, {}
        for key, title, _ in CHARTS:
            self._add_chart(layout, key, title)
        layout.addWidget(QLabel("<b>Aggregation</b>"))
        self.aggregation = QLabel("")
        self.aggregation.setObjectName("chart_aggregation")
        self.aggregation.setWordWrap(True)
        layout.addWidget(self.aggregation)
        for key, title, _ in AGGREGATION_CHARTS:
            self._add_chart(layout, key, title)
            self.titles[key].hide()
            self.images[key].hide()
        layout.addStretch(1)
        self.setWidget(body)
        self.pixmaps = {}      # chart key -> the full-size QPixmap

    def _add_chart(self, layout, key, title):
        t = QLabel(f"<b>{title}</b>")
        img = QLabel("no run loaded")
        img.setObjectName(f"chart_{key}")
        img.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        layout.addWidget(t)
        layout.addWidget(img)
        self.titles[key], self.images[key] = t, img

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
        optional = {key for key, _, _ in AGGREGATION_CHARTS}
        for key in self.images:
            label = self.images[key]
            png = pngs.get(key)
            pix = QPixmap()
            drawn = bool(png) and pix.loadFromData(png, "PNG")
            if drawn:
                self.pixmaps[key] = pix
            else:
                self.pixmaps.pop(key, None)
                label.setPixmap(QPixmap())
                label.setText("nothing to draw for this run")
            if key in optional:
                self.titles[key].setVisible(drawn)
                label.setVisible(drawn)
        self._fit()
        self.aggregation.setText(aggregation_text(model))

    def clear(self):
        self.pixmaps = {}
        for label in self.images.values():
            label.setPixmap(QPixmap())
            label.setText("no run loaded")
        for key, _, _ in AGGREGATION_CHARTS:
            self.titles[key].hide()
            self.images[key].hide()
        self.aggregation.setText("")
