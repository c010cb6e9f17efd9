"""The ledger in the window: `prism stats`'s table for the recordings the window has open, the
requests it served live and its re-runs.

Owns `LedgerView`, a table with one column per group of replies and one row per figure
(the layout engine/record/ledger.py's `table` gives, the one `prism stats` prints), and a
"group by" choice (every key, or one of model, quant, family, template, engine). It reads the
recordings itself when they change (`set_recordings`), never per frame: the ledger is about
whole files, not the request playing. The window's own requests (live, composed, re-run: every
row of the request list not played from a file) are counted from the list's row summaries
(inspector/summaries.py), at most once a second while the dock is shown (`follow`). A click on
a count filters the request list to the requests it counts (inspector/query.py's
`expression_for`). GUI thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.record.ledger import KEYS, Reply, Row, figure_of, ledger, read_replies, table
from engine.record.reader import is_recording
from engine.record.recording import RecordingError
from inspector.query import expression_for
from inspector.summaries import LIVE_ENGINE, RERUN_ENGINE, reply_of
from widgets.theme import MUTED

ALL = "every key"
LIVE_MS = 1000  # the window's own requests are counted again at most this often


class LedgerView(QWidget):
    """The ledger of `paths` (recordings; other files are left out) and of the followed
    request list's own requests, grouped as chosen. Emits `filter_requested(expression)`
    when a count is clicked (and sets it on the followed list)."""

    filter_requested = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.by = QComboBox()
        self.by.addItems([ALL, *KEYS])
        self.by.setToolTip("Group the replies by model file, quant, family, template hash or "
                           "engine (local, replay, or the upstream's URL)")
        self.by.currentTextChanged.connect(lambda _t: self.refresh())
        self.note = QLabel("")
        self.note.setStyleSheet(f"color: {MUTED};")
        self.table = QTableWidget()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().setDefaultSectionSize(20)
        head = QHBoxLayout()
        head.setContentsMargins(4, 0, 4, 0)
        title = QLabel("Ledger")
        title.setStyleSheet("font-weight: bold;")
        head.addWidget(title)
        head.addWidget(self.note, 1)
        head.addWidget(QLabel("group by"))
        head.addWidget(self.by)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.table)
        self.paths: list[Path] = []
        self.replies: list[Reply] = []  # the files' and the window's own
        self._files: list[Reply] = []
        self.rows: list[Row] = []
        self._lines: list[tuple[str, list[str]]] = []
        self._log = None  # the request list followed (widgets/request_log.py)
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(LIVE_MS)
        self._timer.timeout.connect(self._tick)
        self.table.cellClicked.connect(self._cell_clicked)

    # -- the window's own requests ---------------------------------------------------------

    def follow(self, log) -> None:
        """Count the requests of this request list that were not played from a file, and
        filter it when a count is clicked."""
        self._log = log
        model = log.model
        for signal in (model.rowsInserted, model.rowsRemoved, model.dataChanged,
                       model.modelReset):
            signal.connect(self._changed)
        self._timer.start()

    def _changed(self, *_args) -> None:
        self._dirty = True

    def _tick(self) -> None:
        if self._dirty and self.isVisible():
            self.count_live()

    def count_live(self) -> None:
        """Count the followed list's own requests again (the files are not read again)."""
        self._dirty = False
        self.replies = self._files + self._own()
        self.refresh()

    def _own(self) -> list[Reply]:
        if self._log is None:
            return []
        model = self._log.model
        out = []
        for track in model.tracks():
            if track.origin != "live":
                continue  # played from a file: the file is counted
            reply = reply_of(model.summary(track))
            if reply is not None:
                out.append(reply)
        return out

    # -- the files -------------------------------------------------------------------------

    def set_recordings(self, paths: Sequence[str | Path]) -> None:
        """Read these files' replies (plain text outputs are not recordings: left out)."""
        self.paths = [Path(p) for p in paths]
        replies: list[Reply] = []
        for p in self.paths:
            try:
                if is_recording(p):
                    replies += read_replies([p])
            except (OSError, RecordingError):  # gone or damaged since it was opened
                continue
        self._files = replies
        self.count_live()

    def refresh(self) -> None:
        by = KEYS if self.by.currentText() == ALL else (self.by.currentText(),)
        rows = self.rows = ledger(self.replies, by)
        lines = self._lines = table(rows)
        n = sum(1 for p in self.paths if p.exists())
        live = sum(1 for r in self.replies if r.source == LIVE_ENGINE)
        rerun = sum(1 for r in self.replies if r.source == RERUN_ENGINE)
        self.note.setText(f"  {len(self.replies)} replies: {len(self._files)} in {n} file(s), "
                          f"{live} live, {rerun} re-run")
        self.table.clear()
        self.table.setRowCount(len(lines))
        self.table.setColumnCount(len(rows))
        self.table.setHorizontalHeaderLabels([f"group {i + 1}" for i in range(len(rows))])
        self.table.setVerticalHeaderLabels([label for label, _ in lines])
        for r, (_label, cells) in enumerate(lines):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if r >= len(by):  # the figures, not the group's names
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()

    def cell(self, figure: str, group: int = 0) -> str:
        """The text shown for `figure` (a row label) in a group's column (for tests)."""
        for r in range(self.table.rowCount()):
            if self.table.verticalHeaderItem(r).text() == figure:
                item = self.table.item(r, group)
                return item.text() if item is not None else ""
        raise KeyError(figure)

    # -- a click: the requests it counts ---------------------------------------------------

    def expression(self, figure: str, group: int = 0) -> str:
        """The filter that shows the requests counted in `figure`'s cell of a group's column
        (the group's requests alone where the ledger has several groups)."""
        ids = [id for _source, id in self.rows[group].ids] if len(self.rows) > 1 else ()
        return expression_for(figure_of(figure), ids)

    def _cell_clicked(self, row: int, column: int) -> None:
        if not 0 <= row < len(self._lines) or not 0 <= column < len(self.rows):
            return
        text = self.expression(self._lines[row][0], column)
        self.filter_requested.emit(text)
        if self._log is not None:
            self._log.set_filter(text)
