"""The compare view: two runs of one request side by side, pane against pane.

Owns `CompareView` (`side_of_track`, a request the window holds as a compare `Side`, is
inspector/rerun.py's). The pairs and everything said about them are engine/record/compare.py's;
this module only draws: the summary line; for each side the raw output with the first token
where the runs part marked (amber, with a tooltip giving each side's probability of both
tokens when they were recorded); the reasoning, content and calls panes with what differs from
the other side shaded; and, for two whole recordings, the list of every pair with what
changed, the most changed first (selecting one shows it). Sides come from a rerun (recorded,
or run in the window: *Re-run on…*), from two recordings opened for comparing, or from any two
requests the user picks in the request list (*A ← selected*, *B ← selected*). GUI thread
only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.record.compare import Comparison, Side, channel_diff, compare
from inspector.rerun import side_of_track  # noqa: F401 - the window's and tests' name for it
from widgets.theme import BACKGROUND, COLOURS, MUTED, TEXT

ROWS = ("raw", "reasoning", "content", "calls")
PART_BG = "#6b4e12"  # the parting token
DIFF_BG = "#4a2026"  # text the other side does not have
PART = QTextCharFormat.Property.UserProperty + 10  # set on the parting token's span (tests)


def _fmt(colour: str, background: str | None = None, bold: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(colour))
    if background:
        f.setBackground(QColor(background))
    if bold:
        f.setFontWeight(QFont.Weight.Bold)
    return f


def _calls_text(side: Side) -> str:
    return "\n".join(f"{c.get('name')}({json.dumps(c.get('arguments'), ensure_ascii=False)})"
                     for c in side.calls)


class CompareView(QWidget):
    """Two runs of one request, side by side. `pick` asks the window for the selected
    request as side "a" or "b"."""

    pick = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.comparison: Comparison | None = None
        self.comparisons: list[Comparison] = []
        self._picked: dict[str, Side] = {}

        self.summary = QLabel("Compare two runs: re-run a request or a recording (Run → Re-run "
                              "on…, or prism rerun), open two recordings (File → Compare "
                              "recordings…), or pick two requests.")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.pick_a = QPushButton("A ← selected")
        self.pick_b = QPushButton("B ← selected")
        self.pick_a.setToolTip("Take the request selected in the list as side A")
        self.pick_b.setToolTip("Take the request selected in the list as side B")
        self.pick_a.clicked.connect(lambda: self.pick.emit("a"))
        self.pick_b.clicked.connect(lambda: self.pick.emit("b"))
        head = QHBoxLayout()
        head.addWidget(self.summary, 1)
        head.addWidget(self.pick_a)
        head.addWidget(self.pick_b)

        self.pairs = QTableWidget(0, 3)
        self.pairs.setHorizontalHeaderLabels(["request", "change", "what changed"])
        self.pairs.horizontalHeader().setStretchLastSection(True)
        self.pairs.verticalHeader().setVisible(False)
        self.pairs.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.pairs.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.pairs.currentCellChanged.connect(lambda row, *_: self._pair_selected(row))
        self.pairs.hide()

        grid = QWidget()
        layout = QGridLayout(grid)
        layout.setContentsMargins(0, 0, 0, 0)
        self.titles = {s: QLabel(s.upper()) for s in "ab"}
        layout.addWidget(self.titles["a"], 0, 1)
        layout.addWidget(self.titles["b"], 0, 2)
        self.panes: dict[tuple[str, str], QPlainTextEdit] = {}
        for r, row in enumerate(ROWS, start=1):
            name = QLabel(row)
            name.setStyleSheet(f"color: {COLOURS.get(row, COLOURS['markup'])};")
            layout.addWidget(name, r, 0, Qt.AlignmentFlag.AlignTop)
            for c, side in enumerate("ab", start=1):
                pane = QPlainTextEdit()
                pane.setReadOnly(True)
                pane.setObjectName(f"{row}_{side}")
                pane.setMouseTracking(True)
                # The state colours are drawn for a dark ground, whatever the palette.
                pane.setStyleSheet(f"QPlainTextEdit {{ background: {BACKGROUND}; color: {TEXT}; }}")
                self.panes[(row, side)] = pane
                layout.addWidget(pane, r, c)
            layout.setRowStretch(r, 2 if row in ("raw", "content") else 1)
        layout.setColumnStretch(1, 1)
        layout.setColumnStretch(2, 1)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.pairs)
        split.addWidget(grid)
        split.setSizes([120, 500])
        outer = QVBoxLayout(self)
        outer.addLayout(head)
        outer.addWidget(split, 1)

    # -- what to show ----------------------------------------------------------------------

    def set_side(self, which: str, side: Side) -> None:
        """A picked request as side "a" or "b"; once both are there, they are compared."""
        self._picked[which] = side
        self.titles[which].setText(f"{which.upper()}: {side.label}")
        if len(self._picked) == 2:
            self.show_pairs([compare(self._picked["a"], self._picked["b"])])

    def show_pairs(self, comparisons: Sequence[Comparison]) -> None:
        """Pairs, the most changed first: with more than one, the list shows them all."""
        self.comparisons = list(comparisons)
        self.pairs.setRowCount(0)
        self.pairs.setVisible(len(self.comparisons) > 1)
        for row, c in enumerate(self.comparisons):
            self.pairs.insertRow(row)
            for col, text in enumerate((c.a.id or c.a.label, f"{c.change:.2f}", c.changed())):
                self.pairs.setItem(row, col, QTableWidgetItem(text))
        if self.comparisons:
            self.pairs.selectRow(0)
            self.show_comparison(self.comparisons[0])

    def _pair_selected(self, row: int) -> None:
        if 0 <= row < len(self.comparisons):
            self.show_comparison(self.comparisons[row])

    def show_comparison(self, c: Comparison) -> None:
        self.comparison = c
        self.summary.setText(c.summary())
        for which, side in (("a", c.a), ("b", c.b)):
            self.titles[which].setText(f"{which.upper()}: {side.label}")
            self._raw(which, side, c)
        for ch in c.channels:
            self._diffed(ch.channel, c.a.result.get(ch.channel) or "",
                         c.b.result.get(ch.channel) or "", COLOURS[ch.channel])
        self._diffed("calls", _calls_text(c.a), _calls_text(c.b), COLOURS["call"])

    # -- drawing ---------------------------------------------------------------------------

    def _raw(self, which: str, side: Side, c: Comparison) -> None:
        pane = self.panes[("raw", which)]
        pane.clear()
        cur = QTextCursor(pane.document())
        p = c.parting
        if p is None:
            cur.insertText(side.text, _fmt(TEXT))
            pane.setToolTip("the two runs wrote the same tokens")
            return
        k = p.index_a if which == "a" else p.index_b
        tokens = side.tokens
        cur.insertText("".join(t.text for t in tokens[:k]), _fmt(TEXT))
        part = _fmt(COLOURS["call"], PART_BG, bold=True)
        part.setProperty(PART, True)
        tok = tokens[k] if k < len(tokens) else None
        own, other = (p.p_a_own, p.p_a_other) if which == "a" else (p.p_b_own, p.p_b_other)
        other_tok = p.token_b if which == "a" else p.token_a
        tip = [f"token {k}: {tok.text!r} (id {tok.id})" if tok else f"token {k}: (ended)"]
        if own is not None:
            tip.append(f"p(this) = {own:.3f}")
        if other is not None and other_tok is not None:
            tip.append(f"p({other_tok.text!r}, the other side's) = {other:.3f}")
        part.setToolTip("\n".join(tip))
        cur.insertText(tok.text if tok and tok.text else "⟂", part)
        cur.insertText("".join(t.text for t in tokens[k + 1:]), _fmt(MUTED))
        pane.setToolTip("\n".join(tip))

    def _diffed(self, row: str, a: str, b: str, colour: str) -> None:
        d = channel_diff(row, a, b)
        for which, text in (("a", a), ("b", b)):
            pane = self.panes[(row, which)]
            pane.clear()
            cur = QTextCursor(pane.document())
            spans = [(op[1], op[2]) if which == "a" else (op[3], op[4]) for op in d.opcodes]
            at = 0
            for start, end in sorted(s for s in spans if s[1] > s[0]):
                cur.insertText(text[at:start], _fmt(colour))
                cur.insertText(text[start:end], _fmt(colour, DIFF_BG))
                at = end
            cur.insertText(text[at:], _fmt(colour))
            pane.setToolTip("the same on both sides" if d.same
                            else f"differs from character {d.at}; {d.ratio:.0%} alike")
