"""`TextPane`: the append-only, read-only text widget under every inspector text view.

Owns three things the views need and `QPlainTextEdit` lacks: appending with a given (cached)
format at the end in one edit block per frame; a *tail* region kept last in the document (the
held-back text, redrawn every frame until the parser decides it); and tooltips read from the
character formats under the mouse, or from a provider function (the token strip looks up a
token by position instead of storing a format per token). GUI thread only.

Positions are QTextDocument positions (UTF-16 code units, as Qt counts), never Python string
offsets: callers that remember places ask `end()` after inserting.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QTextCharFormat, QTextCursor, QTextOption
from PySide6.QtWidgets import QPlainTextEdit, QToolTip


class TextPane(QPlainTextEdit):
    def __init__(self, parent=None, *, mono: bool = False, wrap: bool = True) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)  # an undo stack would keep every insert alive
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere if wrap
                             else QTextOption.WrapMode.NoWrap)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth if wrap
                             else QPlainTextEdit.LineWrapMode.NoWrap)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        if mono:
            from widgets.theme import formats

            self.setFont(formats().mono)
        self.tooltip_provider: Callable[[int], str | None] | None = None
        self._cur = QTextCursor(self.document())
        self._tail = -1  # document position where the tail starts, -1 without one
        self._batch = 0
        self._follow = True

    # -- batches ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Start a frame's edits (nestable); the view follows the end if it was there."""
        if self._batch == 0:
            sb = self.verticalScrollBar()
            self._follow = sb.value() >= sb.maximum() - 4
            self._cur.beginEditBlock()
        self._batch += 1

    def end_batch(self) -> None:
        self._batch -= 1
        if self._batch == 0:
            self._cur.endEditBlock()
            if self._follow:
                sb = self.verticalScrollBar()
                sb.setValue(sb.maximum())

    # -- editing ---------------------------------------------------------------------------

    def clear_all(self) -> None:
        self.document().clear()
        self._cur = QTextCursor(self.document())
        self._tail = -1

    def end(self) -> int:
        """Where the next decided text goes (before the tail, which is always removed first)."""
        return self.document().characterCount() - 1 if self._tail < 0 else self._tail

    def append(self, text: str, fmt: QTextCharFormat) -> int:
        """Insert text at the end (the tail must be cleared); returns its start position."""
        self.clear_tail()
        c = self._cur
        c.movePosition(QTextCursor.MoveOperation.End)
        start = c.position()
        if text:
            c.insertText(text, fmt)
        return start

    def replace_from(self, start: int, text: str, fmt: QTextCharFormat) -> None:
        """Replace everything from `start` to the end with text (e.g. streamed arguments by
        their pretty-printed form)."""
        self.clear_tail()
        c = self._cur
        c.setPosition(start)
        c.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        c.insertText(text, fmt)

    def merge_format(self, start: int, end: int, fmt: QTextCharFormat) -> None:
        if end <= start:
            return
        c = self._cur
        c.setPosition(start)
        c.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        c.mergeCharFormat(fmt)
        c.clearSelection()

    def set_tail(self, text: str, fmt: QTextCharFormat) -> None:
        """Show `text` after everything else, replacing the previous tail."""
        self.clear_tail()
        if text:
            self._tail = self.append(text, fmt)

    def clear_tail(self) -> None:
        if self._tail >= 0:
            c = self._cur
            c.setPosition(self._tail)
            c.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            c.removeSelectedText()
            self._tail = -1

    @property
    def tail_text(self) -> str:
        if self._tail < 0:
            return ""
        c = QTextCursor(self.document())
        c.setPosition(self._tail)
        c.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        return c.selectedText().replace("\u2029", "\n")

    # -- tooltips --------------------------------------------------------------------------

    def format_at(self, pos: int) -> QTextCharFormat:
        """The format of the character at document position pos."""
        c = QTextCursor(self.document())
        c.setPosition(min(pos + 1, self.document().characterCount() - 1))
        return c.charFormat()

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            c = self.cursorForPosition(event.pos())
            pos = c.position()
            tip = self.tooltip_provider(pos) if self.tooltip_provider else None
            if tip is None:
                tip = self.format_at(pos).toolTip() or None
            if tip:
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)
