"""The model list: a window serving several models shows each one's state and lets it be loaded,
unloaded and pinned.

Owns `ModelList`, a table of the catalog's models (engine/catalog.py `ModelStatus`): its id,
its state (unloaded, loading, loaded, failed, with the failure's message in the cell and its
tooltip; "draining" while it waits to be unloaded), its file size, the memory it takes
(planned until it is loaded, then the engine's own figure), its context, how many requests
it is serving, a *pin* box and *Load* / *Unload* buttons. It only reads statuses given to it
(`show_statuses`, called by app/gui_catalog.py from the window's frame timer once a catalog
event arrived) and says what was asked through its signals (`load_requested`,
`unload_requested`, `pin_toggled`): the app hands those to the catalog, whose loader thread
does the work; nothing here waits for a load. GUI thread only.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.catalog import ModelStatus
from widgets.theme import COLOURS, MUTED

COLUMNS = ("Model", "Status", "Size", "Memory", "Context", "Busy", "Pin", "")
STATE_COLOURS = {"loaded": COLOURS["content"], "loading": COLOURS["markup"],
                 "failed": COLOURS["anomaly"], "unloaded": MUTED}


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def state_text(s: ModelStatus) -> str:
    if s.state == "failed":
        return f"failed: {s.error}" if s.error else "failed"
    if s.draining:
        return f"{s.state}, unloading when idle"
    return s.state


class _Row:
    """One model's widgets: its pin box and buttons keep their identity across updates."""

    def __init__(self, owner: ModelList, model: str) -> None:
        self.pin = QCheckBox()
        self.pin.setToolTip("Pinned: never evicted to make room, never unloaded when idle")
        self.pin.toggled.connect(lambda on: owner.pin_toggled.emit(model, on))
        self.load = QPushButton("Load")
        self.load.clicked.connect(lambda: owner.load_requested.emit(model))
        self.unload = QPushButton("Unload")
        self.unload.clicked.connect(lambda: owner.unload_requested.emit(model))
        self.buttons = QWidget()
        lay = QHBoxLayout(self.buttons)
        lay.setContentsMargins(2, 0, 2, 0)
        lay.addWidget(self.load)
        lay.addWidget(self.unload)


class ModelList(QWidget):
    load_requested = Signal(str)
    unload_requested = Signal(str)
    pin_toggled = Signal(str, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model_list")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # A failure's message is long: the cell is cut, the whole of it in its tooltip.
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(1, 150)
        self.summary = QLabel("")
        self.summary.setStyleSheet(f"color: {MUTED}; padding: 2px 4px;")
        self.summary.setWordWrap(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.summary)
        self._rows: dict[str, _Row] = {}
        self._order: list[str] = []
        self.statuses: dict[str, ModelStatus] = {}

    def show_statuses(self, statuses: Sequence[ModelStatus], limit: int = 0) -> None:
        """Draw these statuses (the catalog's, in its order); `limit`: the memory limit, for
        the summary line (0: none shown)."""
        ids = [s.id for s in statuses]
        if ids != self._order:
            self._order = ids
            self._rows = {m: self._rows.get(m) or _Row(self, m) for m in ids}
            self.table.setRowCount(len(ids))
            for i, m in enumerate(ids):
                row = self._rows[m]
                self.table.setCellWidget(i, 6, _centred(row.pin))
                self.table.setCellWidget(i, 7, row.buttons)
        for i, s in enumerate(statuses):
            self.statuses[s.id] = s
            state = QTableWidgetItem(state_text(s))
            state.setForeground(QColor(STATE_COLOURS.get(s.state, MUTED)))
            state.setToolTip(s.error or state_text(s))
            cells = (s.id, None, mib(s.size), mib(s.memory), f"{s.n_ctx:,}", str(s.busy))
            for col, text in enumerate(cells):
                item = state if text is None else QTableWidgetItem(text)
                if col == 0 and s.aliases:
                    item.setToolTip("also answers to " + ", ".join(s.aliases))
                if col >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, col, item)
            row = self._rows[s.id]
            row.pin.blockSignals(True)
            row.pin.setChecked(s.pinned)
            row.pin.blockSignals(False)
            row.load.setEnabled(s.state in ("unloaded", "failed"))
            row.load.setText("Retry" if s.state == "failed" else "Load")
            row.unload.setEnabled(s.state in ("loaded", "loading") and not s.draining)
        resident = [s for s in statuses if s.state in ("loaded", "loading")]
        used = sum(s.memory for s in resident)
        self.summary.setText(f"{len(resident)} of {len(statuses)} resident, {mib(used)}"
                             + (f" of the {mib(limit)} limit" if limit else ""))

    def row(self, model: str) -> _Row:
        return self._rows[model]

    def state_of(self, model: str) -> str:
        """The status cell's text (what a reader sees)."""
        i = self._order.index(model)
        return self.table.item(i, 1).text()


def _centred(w: QWidget) -> QWidget:
    box = QWidget()
    lay = QHBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setAlignment(Qt.AlignmentFlag.AlignCenter)
    lay.addWidget(w)
    return box
