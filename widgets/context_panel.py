"""The prompt's context panel: where the prompt's tokens went, as a bar and a list of parts.

Owns `ContextBar` (one coloured segment per kind of part: system, tools, messages, tool calls
and results, replayed reasoning, template scaffolding; its tooltip names each share) and
`ContextPanel` (the bar over a list of every part with its tokens and share; a tool declared
but never called is marked; clicking a part asks the prompt view to show it). The numbers come
from engine/record/context.py; this module only draws them. GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from engine.record.context import KINDS, Breakdown, Part
from widgets.theme import COLOURS, MUTED, PANEL

KIND_COLOURS = {
    "system": "#6f93c8",
    "tools": COLOURS["call"],
    "user": "#7fc99a",
    "assistant": COLOURS["content"],
    "tool_calls": "#e79a4f",
    "tool_results": "#4fb6c9",
    "reasoning": COLOURS["reasoning"],
    "scaffolding": "#5b6270",
}
KIND_LABELS = {"system": "system", "tools": "tool schemas", "user": "user",
               "assistant": "assistant", "tool_calls": "tool calls",
               "tool_results": "tool results", "reasoning": "replayed reasoning",
               "scaffolding": "template"}
UNUSED = "never called"


def share_text(b: Breakdown) -> str:
    by = b.by_kind()
    return "\n".join(f"{KIND_LABELS[k]}: {n} tokens ({100 * n / b.total:.1f}%)"
                     for k, n in by.items() if n and b.total)


class ContextBar(QWidget):
    """The shares of a breakdown as one horizontal bar."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.breakdown: Breakdown | None = None
        self.setMinimumHeight(14)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(200, 16)

    def set_breakdown(self, b: Breakdown | None) -> None:
        self.breakdown = b
        self.setToolTip(share_text(b) if b is not None else "")
        self.update()

    def segments(self) -> list[tuple[str, float, float]]:
        """(kind, x0, x1) in pixels, in the order of KINDS."""
        b = self.breakdown
        if b is None or not b.total:
            return []
        by, x, out, w = b.by_kind(), 0.0, [], float(self.width())
        for k in KINDS:
            if by[k]:
                dx = w * by[k] / b.total
                out.append((k, x, x + dx))
                x += dx
        return out

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(PANEL))
        for kind, x0, x1 in self.segments():
            p.fillRect(QRectF(x0, 0, max(x1 - x0, 1.0), self.height()),
                       QColor(KIND_COLOURS[kind]))
        p.end()


class ContextPanel(QWidget):
    """The bar and the parts list. `part_chosen` carries a located part's (start, end)."""

    part_chosen = Signal(int, int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.bar = ContextBar()
        self.parts = QTreeWidget()
        self.parts.setHeaderLabels(["Part", "Kind", "Tokens", "Share"])
        self.parts.setRootIsDecorated(False)
        self.parts.setUniformRowHeights(True)
        self.parts.setMaximumHeight(150)
        self.parts.itemClicked.connect(self._clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.bar)
        lay.addWidget(self.parts)
        self.breakdown: Breakdown | None = None

    def set_breakdown(self, b: Breakdown | None) -> None:
        self.breakdown = b
        self.bar.set_breakdown(b)
        self.parts.clear()
        if b is None:
            return
        for part in b.parts:
            self.parts.addTopLevelItem(self._item(part, b.total))
        for col in range(4):
            self.parts.resizeColumnToContents(col)

    def _item(self, part: Part, total: int) -> QTreeWidgetItem:
        label = part.label + (f" · {UNUSED}" if part.unused else "")
        if not part.located and part.kind == "tools":
            label += " · counted as JSON (not located in the prompt)"
        share = f"{100 * part.tokens / total:.1f}%" if total else ""
        item = QTreeWidgetItem([label, KIND_LABELS[part.kind], str(part.tokens), share])
        item.setForeground(1, QColor(KIND_COLOURS[part.kind]))
        if part.unused:
            item.setForeground(0, QColor(COLOURS["anomaly"]))
            item.setToolTip(0, "Declared in the request but never called in the conversation: "
                            "its schema costs tokens on every turn.")
        elif not part.located:
            item.setForeground(0, QColor(MUTED))
        item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight)
        item.setTextAlignment(3, Qt.AlignmentFlag.AlignRight)
        item.setData(0, Qt.ItemDataRole.UserRole, (part.start, part.end))
        return item

    def _clicked(self, item: QTreeWidgetItem, _col: int) -> None:
        start, end = item.data(0, Qt.ItemDataRole.UserRole)
        if start >= 0:
            self.part_chosen.emit(start, end)
