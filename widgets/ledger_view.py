"""The ledger in the window: `prism stats`'s table for the recordings the window has open.

Owns `LedgerView`, a table with one column per group of replies and one row per figure
(the layout engine/record/ledger.py's `table` gives, the one `prism stats` prints), and a
"group by" choice (every key, or one of model, quant, family, template, engine). It reads the
recordings itself when they change (`set_recordings`), never per frame: the ledger is about
whole files, not the request playing. GUI thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.record.ledger import KEYS, Reply, ledger, read_replies, table
from engine.record.recording import RecordingError, is_recording
from widgets.theme import MUTED

ALL = "every key"


class LedgerView(QWidget):
    """The ledger of `paths` (recordings; other files are left out), grouped as chosen."""

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
        self.replies: list[Reply] = []

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
        self.replies = replies
        self.refresh()

    def refresh(self) -> None:
        by = KEYS if self.by.currentText() == ALL else (self.by.currentText(),)
        rows = ledger(self.replies, by)
        lines = table(rows)
        n = sum(1 for p in self.paths if p.exists())
        self.note.setText(f"  {len(self.replies)} replies in {n} file(s)")
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
