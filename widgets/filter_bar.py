"""The filter bar over the request list: one line for plain words or a filter expression.

Owns `FilterBar`: a line edit, an inline error (a query that cannot be read says where, in
words, and the list keeps its last good filter), and "N of M" shown. Typing applies after a
short pause (`DELAY_MS`), Enter at once; `set_text` (a Ledger cell, a test) applies at once.
The language is inspector/query.py's; the tooltip lists its keys. GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QWidget

from inspector.query import KEYS, Query, QueryError, parse
from widgets.theme import COLOURS, MUTED

DELAY_MS = 150  # typing pauses this long before the list is filtered
HELP = ("Plain words: rows whose prompt or output holds every word (\"a phrase\" in quotes).\n"
        "Or an expression, as in mitmproxy: ~key value, combined with & (or a space), |, ! "
        "and ( ); values are regexes, case-insensitive, quoted when they hold spaces.\n"
        "e.g.  ~anomaly unfinished_call & ~model gemma\n\n"
        + "\n".join(f"~{k}  {what}" for k, what in KEYS.items())
        + "\n\nF8 / Shift+F8: next / previous row with anomalies.")


class FilterBar(QWidget):
    """Emits `query_changed(Query)` with each good query; an error shows inline instead."""

    query_changed = Signal(object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Filter: words, or ~anomaly unfinished_call & ~model gemma")
        self.edit.setClearButtonEnabled(True)
        self.edit.setToolTip(HELP)
        self.error = QLabel("")
        self.error.setStyleSheet(f"color: {COLOURS['anomaly']};")
        self.error.hide()
        self.shown = QLabel("")
        self.shown.setStyleSheet(f"color: {MUTED};")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.error)
        lay.addWidget(self.shown)
        self.query: Query = parse("")
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DELAY_MS)
        self._timer.timeout.connect(self.apply)
        self.edit.textEdited.connect(lambda _t: self._timer.start())
        self.edit.returnPressed.connect(self.apply)
        # The clear button empties the text without an edit signal of its own kind: apply.
        self.edit.textChanged.connect(lambda t: self.apply() if not t else None)

    @property
    def text(self) -> str:
        return self.edit.text()

    def set_text(self, text: str) -> bool:
        """Set the filter and apply it now; False (and the error shown) where it is bad."""
        self.edit.setText(text)
        return self.apply()

    def apply(self) -> bool:
        self._timer.stop()
        try:
            query = parse(self.edit.text())
        except QueryError as e:
            words = f"at {e.at + 1}: {e}"
            self.error.setText(words if len(words) <= 60 else words[:59] + "…")
            self.error.setToolTip(str(e))
            self.error.show()
            return False
        self.error.hide()
        self.error.setText("")
        if query.text != self.query.text:
            self.query = query
            self.query_changed.emit(query)
        return True

    def set_counts(self, shown: int, total: int) -> None:
        self.shown.setText(f"{shown} of {total}" if self.query.text.strip() else "")
