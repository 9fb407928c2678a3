"""Tables of dict rows: a Qt model (shown text, sort value, alignment per column) and a
table widget with a filter box; sorting by any column, numbers as numbers."""
from dataclasses import dataclass
from typing import Any, Callable

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLineEdit, QTableView, QVBoxLayout, QWidget

SORT_ROLE = Qt.ItemDataRole.UserRole
ROW_ROLE = Qt.ItemDataRole.UserRole + 1


@dataclass
class Column:
    title: str
    value: Callable[[dict], Any]                  # the value (sorts the column)
    text: Callable[[Any], str] = None             # how it is shown (default: str, "" for None)
    numeric: bool = False
    tip: str = ""
    sort: Callable[[dict], Any] = None           # the sort value, if not the value


def fmt_int(v):
    return "" if v is None else f"{v:,}".replace(",", " ")


def fmt_ns(ns):
    """A duration in ns, in the unit that reads best."""
    if ns is None:
        return ""
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.3f} s"


def fmt_pct(p):
    return "" if p is None else f"{p:.1f} %"


def fmt_signed(v):
    if v is None:
        return ""
    return f"{v:+,}".replace(",", " ") if v else "0"


class RowsModel(QAbstractTableModel):
    def __init__(self, columns, parent=None):
        super().__init__(parent)
        self.columns = list(columns)
        self.rows = []

    def set_rows(self, rows, columns=None):
        self.beginResetModel()
        if columns is not None:
            self.columns = list(columns)
        self.rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and 0 <= section < len(self.columns):
            col = self.columns[section]
            if role == Qt.DisplayRole:
                return col.title
            if role == Qt.ToolTipRole and col.tip:
                return col.tip
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        row, col = self.rows[index.row()], self.columns[index.column()]
        if role in (Qt.DisplayRole, Qt.ToolTipRole):
            v = col.value(row)
            return col.text(v) if col.text else ("" if v is None else str(v))
        if role == SORT_ROLE:
            v = col.sort(row) if col.sort else col.value(row)
            if col.numeric:
                return float("-inf") if v is None else float(v)
            return "" if v is None else str(v).lower()
        if role == Qt.TextAlignmentRole and col.numeric:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == ROW_ROLE:
            return row
        return None


class _Proxy(QSortFilterProxyModel):
    def lessThan(self, left, right):
        a, b = left.data(SORT_ROLE), right.data(SORT_ROLE)
        try:
            return a < b
        except TypeError:
            return str(a) < str(b)


class Table(QWidget):
    """A sortable table of dict rows with a filter box above it (matches any column)."""

    def __init__(self, columns, name, filter_hint="Filter", parent=None):
        super().__init__(parent)
        self.setObjectName(name)
        self.model = RowsModel(columns, self)
        self.proxy = _Proxy(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.proxy.setFilterKeyColumn(-1)
        self.filter = QLineEdit(self)
        self.filter.setObjectName(f"{name}_filter")
        self.filter.setPlaceholderText(filter_hint)
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.proxy.setFilterFixedString)
        self.view = QTableView(self)
        self.view.setObjectName(f"{name}_view")
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(-1, Qt.AscendingOrder)   # the rows' own order until asked
        self.view.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(22)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.view.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.filter)
        layout.addWidget(self.view)

    def set_rows(self, rows, sort_column=None, order=Qt.DescendingOrder, columns=None):
        self.model.set_rows(rows, columns)
        if sort_column is not None:
            self.view.sortByColumn(sort_column, order)
        self.view.resizeColumnsToContents()

    def column(self, title):
        return next(i for i, c in enumerate(self.model.columns) if c.title == title)

    def shown_rows(self):
        """The rows as shown (filtered, sorted): dicts."""
        return [self.proxy.index(i, 0).data(ROW_ROLE) for i in range(self.proxy.rowCount())]

    def shown_text(self, row, title):
        return self.proxy.index(row, self.column(title)).data(Qt.DisplayRole)

    def selected_rows(self):
        rows = {i.row() for i in self.view.selectionModel().selectedRows()}
        return [self.proxy.index(r, 0).data(ROW_ROLE) for r in sorted(rows)]
