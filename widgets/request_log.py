"""The request list: every request the window knows, newest first, and the filter over it.

Owns `RequestLog`: the table (its model and columns are widgets/request_model.py's), the
filter bar over it (widgets/filter_bar.py; the language is inspector/query.py's), *Next /
previous anomaly* (F8 / Shift+F8: the next row down / up among those shown that has an
anomaly) and a "follow newest" switch: while it is on, the newest request is selected as it
arrives; clicking an older one pins it. Its actions (`find_action`, `next_anomaly_action`,
`previous_anomaly_action`) are its own, live wherever the list is shown, and a menu may list
them. With `--parallel N` several rows generate at once; the panes draw the selected one only
(docs/design.md, section 7 "The window").

Rows never move under the pointer: while the pointer is over the list or a row is pinned,
rows inserted above the first one in view (new requests, rows that start to pass the filter)
scroll the view down by as many rows, so the rows in view stay where they are. GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from inspector.query import Query
from inspector.tracks import Track
from widgets.filter_bar import FilterBar
from widgets.request_model import (  # noqa: F401 - the list's names, as callers import them
    _WIDTHS,
    ANOMALIES_COL,
    BADGES,
    CACHED_COL,
    COLUMNS,
    FINISH_COL,
    MESSAGE_COL,
    MODEL_COL,
    OUTPUT_COL,
    PROMPT_COL,
    RATE_COL,
    REQUEST_COL,
    SLOT_COL,
    SOURCE_COL,
    STATE_COL,
    TRACK,
    TTFT_COL,
    VERDICT,
    VERDICT_COL,
    BadgeDelegate,
    RequestLogModel,
    verdict,
)
from widgets.theme import MUTED

ROW_HEIGHT = 22


class RequestLog(QWidget):
    """The filter bar, the table and its follow switch. Emits `selected(track)` when the
    selection changes."""

    selected = Signal(object)
    # (track, Verdict): its "why it stopped" cell was clicked; the window shows the event
    verdict_clicked = Signal(object, object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.model = RequestLogModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.table.setShowGrid(False)
        self.table.setItemDelegateForColumn(ANOMALIES_COL, BadgeDelegate(self.table))
        hh = self.table.horizontalHeader()
        hh.setStretchLastSection(True)
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for col, w in enumerate(_WIDTHS):
            self.table.setColumnWidth(col, w)

        self.bar = FilterBar()
        self.follow = QCheckBox("Follow newest")
        self.follow.setChecked(True)
        self.follow.setToolTip("Select each new request as it arrives; clicking an older one "
                               "pins it")
        self.count = QLabel("")
        self.count.setStyleSheet(f"color: {MUTED};")
        head = QHBoxLayout()
        head.setContentsMargins(4, 0, 4, 0)
        title = QLabel("Requests")
        title.setStyleSheet("font-weight: bold;")
        head.addWidget(title)
        head.addWidget(self.count)
        head.addWidget(self.bar, 1)
        head.addWidget(self.follow)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.table)

        self.find_action = self._action("&Find requests…", QKeySequence.StandardKey.Find,
                                        self.focus_filter)
        self.next_anomaly_action = self._action("&Next anomaly", "F8",
                                                lambda: self.next_anomaly(1))
        self.previous_anomaly_action = self._action("&Previous anomaly", "Shift+F8",
                                                    lambda: self.next_anomaly(-1))
        self._current = None
        self._programmatic = False
        self._pointer_in = False
        self.table.viewport().installEventFilter(self)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.table.clicked.connect(self._clicked)
        self.follow.toggled.connect(self._follow_toggled)
        self.bar.query_changed.connect(self._query_changed)
        self.model.rowsInserted.connect(self._rows_inserted)

    def _action(self, text: str, keys, slot) -> QAction:
        action = QAction(text, self)
        action.setShortcut(QKeySequence(keys))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    @property
    def current(self) -> Track | None:
        return self._current

    # -- rows ------------------------------------------------------------------------------

    def add(self, track: Track) -> None:
        self.model.add(track)
        self._counts()
        if self.follow.isChecked():
            self.select(track)

    def _counts(self) -> None:
        self.count.setText(f"  {self.model.total}")
        self.bar.set_counts(self.model.rowCount(), self.model.total)

    def select(self, track: Track) -> None:
        row = self.model.row_of(track)
        if row is None:
            return
        self._programmatic = True
        # Following while the pointer is over the list: select the newest without scrolling
        # the rows under the pointer away.
        scroll = not self._anchored()
        self.table.setAutoScroll(scroll)
        try:
            self.table.selectRow(row)
        finally:
            self.table.setAutoScroll(True)
            self._programmatic = False
        if self._current is not track:
            self._current = track
            self.selected.emit(track)

    def _anchored(self) -> bool:
        """Rows in view must stay put: the pointer is over them, or one is pinned."""
        return self._pointer_in or not self.follow.isChecked()

    def eventFilter(self, watched, event) -> bool:
        if watched is self.table.viewport():
            if event.type() in (QEvent.Type.Enter, QEvent.Type.MouseMove):
                self._pointer_in = True
            elif event.type() == QEvent.Type.Leave:
                self._pointer_in = False
        return super().eventFilter(watched, event)

    def _rows_inserted(self, _parent: QModelIndex, first: int, last: int) -> None:
        bar = self.table.verticalScrollBar()
        top = bar.value()
        if not self._anchored() or first * ROW_HEIGHT > top:
            return  # below the first row in view: nothing in view moves
        self.table.updateGeometries()  # the range grows now, not at the next layout
        bar.setValue(top + (last - first + 1) * self.table.rowHeight(first))

    # -- the filter and anomalies ----------------------------------------------------------

    def set_filter(self, text: str) -> bool:
        """Filter the list (a Ledger cell, a test); False where `text` cannot be read (the
        bar says why and the list keeps its filter)."""
        return self.bar.set_text(text)

    def focus_filter(self) -> None:
        self.bar.edit.setFocus()
        self.bar.edit.selectAll()

    def _query_changed(self, query: Query) -> None:
        current = self._current
        self.model.set_query(query)
        self._counts()
        if current is not None and self.model.row_of(current) is not None:
            self._programmatic = True
            try:
                self.table.selectRow(self.model.row_of(current))
            finally:
                self._programmatic = False

    def next_anomaly(self, step: int = 1) -> Track | None:
        """Select the next row down (`step` 1) or up (-1) from the selected one that has an
        anomaly, among the rows shown; None (the selection kept) where there is none."""
        model = self.model
        here = model.row_of(self._current) if self._current is not None else None
        row = (-1 if step > 0 else model.rowCount()) if here is None else here
        while True:
            row += step
            track = model.track_at(row)
            if track is None:
                self.bar.shown.setText("no anomaly " + ("below" if step > 0 else "above"))
                return None
            if track.anomaly_total:
                break
        self.follow.setChecked(False)  # the user went to a row: pin it
        self.select(track)
        self.table.scrollTo(model.index(row, 0))
        return track

    # -- the user's picks ------------------------------------------------------------------

    def _row_changed(self, current, _previous) -> None:
        track = self.model.track_at(current.row())
        if track is None:
            return
        if not self._programmatic and current.row() != 0:
            self.follow.setChecked(False)  # the user picked an older one: pin it
        if track is not self._current:
            self._current = track
            self.selected.emit(track)

    def _clicked(self, index) -> None:
        if index.column() != VERDICT_COL:
            return
        track, out = self.model.track_at(index.row()), index.data(VERDICT)
        if track is not None and out is not None:
            self.verdict_clicked.emit(track, out)

    def _follow_toggled(self, on: bool) -> None:
        if on and self.model.rowCount():
            self.select(self.model.track_at(0))
