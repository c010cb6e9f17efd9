"""What a new user reads first: the empty-state hint, the shortcuts list, whole status messages.

Owns `hint_html` (the text the window shows in place of the channel panes until its first
request: the base URL to point a client at, Compose, Open), `ShortcutsDialog` (Help → Keyboard
shortcuts, drawn from the actions table, widgets/actions.py) and `StatusMessage` (the status
bar's message: a message too long for the bar is cut with "…" rather than silently, the whole
of it in the tooltip, and a click shows it in full). GUI thread only.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.actions import shortcut_rows
from widgets.theme import COLOURS, MUTED


def hint_html(url: str | None, recordings: Path | None) -> str:
    """The empty window's hint; links: `compose:` and `open:` (the window follows them)."""
    if url:
        serve = (f"Point a client at <b style='color:{COLOURS['content']}'>{html.escape(url)}"
                 "</b> (any key; <i>Copy URL</i> in the status bar): its requests appear here "
                 "as they stream.")
    else:
        serve = ("The server is off: the <b>Server</b> button in the toolbar starts it, and "
                 "clients' requests then appear here as they stream.")
    where = f" (recordings are in {html.escape(str(recordings))})" if recordings else ""
    link = f"color: {COLOURS['call']};"
    return (f"<p style='font-size: 13pt'>No requests yet</p><p>{serve}</p>"
            f"<p>Or write one in <a style='{link}' href='compose:'>Compose</a> "
            "(Ctrl+Enter sends), or <a style='{link}' href='open:'>open a recording</a> "
            f"(Ctrl+O, or drop a file on the window){where}.</p>"
            "<p>Help → Keyboard shortcuts (F1) lists every key.</p>").replace("{link}", link)


def action_rows(actions) -> list[tuple[str, str]]:
    """(keys, what it does) for QActions a widget owns (the request list's Find and next /
    previous anomaly), read from the actions themselves so the list cannot drift."""
    rows = []
    for a in actions:
        keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText)
                         for k in a.shortcuts())
        if keys:
            rows.append((keys, a.text().replace("&", "").rstrip("…")))
    return rows


class ShortcutsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, extra=()) -> None:
        """`extra`: QActions with keys that widgets own, listed after the window's."""
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.setObjectName("shortcuts_dialog")
        rows = shortcut_rows() + action_rows(extra)
        self.table = QTableWidget(len(rows), 2)
        self.table.setHorizontalHeaderLabels(["Keys", "Command"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for i, (keys, what) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(keys))
            self.table.setItem(i, 1, QTableWidgetItem(what))
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)
        note = QLabel("In the request list: arrow keys move between requests; right-click a "
                      "request for Re-run on…, Compare with its original and Copy to Compose.")
        note.setWordWrap(True)
        note.setStyleSheet(f"color: {MUTED};")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.table)
        lay.addWidget(note)
        lay.addWidget(buttons)
        self.resize(520, 420)


class StatusMessage(QLabel):
    """The status bar's message; `full` is the whole text, whatever the bar shows of it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.full = ""
        self.error = False
        self.setMinimumWidth(80)
        self.setStyleSheet(f"color: {MUTED};")

    def show_message(self, text: str, error: bool = False) -> None:
        self.full, self.error = text, error
        self.setStyleSheet(f"color: {COLOURS['anomaly'] if error else MUTED};")
        self.setToolTip(text)
        self._fit()

    def _fit(self) -> None:
        # Elided to the width the bar gives it: "…" says there is more (tooltip, click).
        shown = self.fontMetrics().elidedText(self.full, Qt.TextElideMode.ElideRight,
                                              max(40, self.width() - 4))
        QLabel.setText(self, shown)

    # The message's text is the whole message (what callers and tests read); `shown()` is
    # what fits in the bar.
    def text(self) -> str:  # type: ignore[override]
        return self.full

    def setText(self, text: str) -> None:  # type: ignore[override]
        self.show_message(text, self.error)

    def shown(self) -> str:
        return QLabel.text(self)

    def text_cut(self) -> bool:
        return self.shown() != self.full

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def mousePressEvent(self, event) -> None:
        if self.full and self.text_cut():
            box = QMessageBox(QMessageBox.Icon.Warning if self.error
                              else QMessageBox.Icon.Information, "Prism", self.full,
                              parent=self)
            box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            box.open()
        super().mousePressEvent(event)

    def minimumSizeHint(self):  # the bar may squeeze it: the text is elided, not the bar grown
        hint = super().minimumSizeHint()
        hint.setWidth(80)
        return hint

    def sizeHint(self):
        hint = super().sizeHint()
        hint.setWidth(min(hint.width(), 600))
        return hint
