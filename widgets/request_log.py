"""The request list: every request the window knows, newest first, with its figures.

Owns `RequestLogModel` (a table model over tracks: source, model, state, the engine's slot,
tokens, cached / prompt tokens (issue 20; the tooltip: slot and disk shares and where the prompt
left the cache), TTFT, tokens/s, finish reason, why it stopped (engine/record/verdict.py; a
click asks the window to show the deciding event), anomaly badges), `BadgeDelegate` (paints the
anomaly badges) and `RequestLog` (the table plus a "follow newest" switch: while it is on, the
newest request is selected as it arrives; clicking an older one pins it). With `--parallel N`
several rows generate at once, each in its own slot; the panes draw the selected one only
(docs/design.md, section 7 "The window"). Rows are refreshed by the frame timer with the tracks
that changed, one `dataChanged` per row, never per token. GUI thread only.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QStyledItemDelegate,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.parse.events import ANOMALY_KINDS
from engine.record import forensics
from engine.record.verdict import Verdict, verdict_of
from inspector.tracks import Track
from widgets.theme import (
    ANOMALY_LABELS,
    ANOMALY_TIPS,
    COLOURS,
    MUTED,
    NOTE_LABELS,
    NOTE_TIPS,
    TEXT,
)

COLUMNS = ("Request", "Source", "Model", "State", "Slot", "Prompt", "Cached", "Output",
           "TTFT ms", "tok/s", "Finish", "Why it stopped", "Anomalies")
# Column numbers by name, so a new column moves no caller's index.
(REQUEST_COL, SOURCE_COL, MODEL_COL, STATE_COL, SLOT_COL, PROMPT_COL, CACHED_COL, OUTPUT_COL,
 TTFT_COL, RATE_COL, FINISH_COL, VERDICT_COL, ANOMALIES_COL) = range(len(COLUMNS))
_NUMERIC = {SLOT_COL, PROMPT_COL, CACHED_COL, OUTPUT_COL, TTFT_COL, RATE_COL}
# every column but the last (stretched)
_WIDTHS = (105, 62, 110, 150, 36, 52, 80, 52, 62, 48, 70, 150)
SLOT_TIP = ("The engine's parallel sequence (slot) that serves this request (--parallel N: "
            "up to N generate at once). A request waiting for one shows none.")
CACHED_TIP = ("Prompt tokens reused from the KV cache (a slot's or the disk cache's) / prompt "
              "tokens. Hover a row for the slot and disk shares and where its prompt left the "
              "best cached prefix.")
VERDICT_TIP = ("Why it stopped: the inspector's reading of the request (engine/record/"
               "verdict.py). Click to show the event that decided it in the raw view.")
BADGES = Qt.ItemDataRole.UserRole + 1
TRACK = Qt.ItemDataRole.UserRole + 2
VERDICT = Qt.ItemDataRole.UserRole + 3
_ENDED = ("done", "cancelled", "error")
_VERDICTS: dict[str, tuple[int, Verdict]] = {}


def verdict(t: Track) -> Verdict | None:
    """A finished track's verdict from the events it holds (None while it runs, or once its
    events were released). Cached per track version: rows repaint often, tracks change
    rarely once done."""
    if t.status not in _ENDED or t.released:
        return None
    cached = _VERDICTS.get(t.id)
    if cached is not None and cached[0] == t.version:
        return cached[1]
    out = verdict_of(t.events, t.finish_reason or t.status, error=t.error)
    _VERDICTS[t.id] = (t.version, out)
    if len(_VERDICTS) > 4096:  # rows are bounded; the cache is too
        _VERDICTS.pop(next(iter(_VERDICTS)))
    return out
_STATE_COLOURS = {"generating": COLOURS["call"], "prompt": COLOURS["markup"], "queued": MUTED,
                  "error": COLOURS["anomaly"], "cancelled": MUTED}


class RequestLogModel(QAbstractTableModel):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._tracks: list[Track] = []  # oldest first; row r shows _tracks[-1 - r]
        self._rows: dict[str, Track] = {}

    # -- updates (frame timer) -------------------------------------------------------------

    def add(self, track: Track) -> None:
        self.beginInsertRows(QModelIndex(), 0, 0)
        self._tracks.append(track)
        self._rows[track.id] = track
        self.endInsertRows()

    def remove_oldest(self, n: int = 1) -> None:
        n = min(n, len(self._tracks))
        if n <= 0:
            return
        last = len(self._tracks) - 1
        self.beginRemoveRows(QModelIndex(), last - n + 1, last)
        for t in self._tracks[:n]:
            self._rows.pop(t.id, None)
        del self._tracks[:n]
        self.endRemoveRows()

    def changed(self, tracks: Iterable[Track]) -> None:
        for t in tracks:
            r = self.row_of(t)
            if r is not None:
                self.dataChanged.emit(self.index(r, 0), self.index(r, len(COLUMNS) - 1))

    def contains(self, track: Track) -> bool:
        return track.id in self._rows

    def row_of(self, track: Track) -> int | None:
        if track.id not in self._rows:
            return None
        # Rows are few (bounded) and changes per frame fewer; a scan from the newest end
        # finds live rows at once.
        for i in range(len(self._tracks) - 1, -1, -1):
            if self._tracks[i] is track:
                return len(self._tracks) - 1 - i
        return None

    def track_at(self, row: int):
        if 0 <= row < len(self._tracks):
            return self._tracks[-1 - row]
        return None

    # -- Qt model API ----------------------------------------------------------------------

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._tracks)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole and section == VERDICT_COL:
            return VERDICT_TIP
        if role == Qt.ItemDataRole.ToolTipRole and section == SLOT_COL:
            return SLOT_TIP
        if role == Qt.ItemDataRole.ToolTipRole and section == CACHED_COL:
            return CACHED_TIP
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        t = self.track_at(index.row())
        if t is None:
            return None
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(t, col)
        if role == TRACK:
            return t
        if role == VERDICT and col == VERDICT_COL:
            return verdict(t)
        if role == BADGES and col == ANOMALIES_COL:
            return [(NOTE_LABELS[n], 1) for n in t.notes if n in NOTE_LABELS] + [
                (ANOMALY_LABELS.get(k, k), t.anomalies[k]) for k in _kinds(t)]
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == STATE_COL:
                return QColor(_STATE_COLOURS.get("prompt" if t.in_prompt else t.status, TEXT))
            if col == FINISH_COL and t.finish_reason == "tool_calls":
                return QColor(COLOURS["call"])
            return None
        if role == Qt.ItemDataRole.TextAlignmentRole and col in _NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == ANOMALIES_COL and (t.anomaly_total or t.notes):
                return "\n\n".join([NOTE_TIPS[n] for n in t.notes if n in NOTE_TIPS] + [
                    f"{t.anomalies[k]} × {ANOMALY_TIPS.get(k, k)}" for k in _kinds(t)])
            if col == REQUEST_COL:
                where = "live" if t.origin == "live" else f"played from {t.origin}"
                return f"{t.id}\n{where}{_slot_line(t)}" + (
                    f"\nerror: {t.error}" if t.error else "")
            if col == SLOT_COL:
                return SLOT_TIP
            if col == VERDICT_COL:
                out = verdict(t)
                return VERDICT_TIP if out is None else f"{out.label}: {out.detail}\n\n" \
                    + VERDICT_TIP
            if col == CACHED_COL:
                return _cache_tip(t)
        return None

    @staticmethod
    def _display(t, col: int) -> str:
        if col == REQUEST_COL:
            return t.id
        if col == SOURCE_COL:
            return t.source
        if col == MODEL_COL:
            return t.model
        if col == STATE_COL:
            if t.in_prompt:  # in a slot, reading its prompt: no longer waiting
                return "prompt"
            return t.status + (f" · {t.state}" if t.status == "generating" else "")
        if col == SLOT_COL:
            return str(t.slot) if t.slot >= 0 else ""
        if col == PROMPT_COL:
            return str(t.prompt_tokens or "")
        if col == CACHED_COL:
            return forensics.reuse_cell(t.timings)
        if col == OUTPUT_COL:
            return str(t.output_tokens)
        if col == TTFT_COL:
            v = t.ttft_ms
            return "" if v is None else f"{v:.0f}"
        if col == RATE_COL:
            v = t.tokens_per_s
            return "" if v is None else f"{v:.1f}"
        if col == FINISH_COL:
            return t.finish_reason or ""
        if col == VERDICT_COL:
            out = verdict(t)
            return "" if out is None else out.label
        if col == ANOMALIES_COL:
            return " ".join([NOTE_LABELS[n] for n in t.notes if n in NOTE_LABELS] + [
                f"{ANOMALY_LABELS.get(k, k)}×{t.anomalies[k]}" for k in _kinds(t)])
        return ""


# Badge order: the parser's kinds first, then the request's own (an extra tool call, special
# tokens in content, an upstream leak), which are badges too, not only counts.
_KNOWN = (*ANOMALY_KINDS, *(k for k in ANOMALY_LABELS if k not in ANOMALY_KINDS))


def _kinds(t: Track) -> list[str]:
    """The anomaly kinds this request has, in badge order (unlabelled ones last, sorted)."""
    return [k for k in _KNOWN if t.anomalies.get(k)] + sorted(
        k for k, n in t.anomalies.items() if n and k not in ANOMALY_LABELS)


def _cache_tip(t: Track) -> str | None:
    """Where the prompt's tokens came from and where it left the best cached prefix (issue
    20); the place needs the prompt, which a released row no longer has."""
    p = t.prefix
    place = None
    if p is not None and p.source and t.prompt:
        at = forensics.prompt_offset(t.prompt, p)
        place = forensics.locate(t.prompt, forensics.messages_of(t.request), at)
    return forensics.miss_tip(t.timings, p, place) or None


def _slot_line(t: Track) -> str:
    """The request's slot and, once it is done, how much of its prompt that slot's cache
    already held (the reason a request is sent to one slot rather than another)."""
    if t.slot < 0:
        return ""
    tm = t.timings
    if tm is not None and tm.prompt_tokens:
        return f"\nslot {t.slot}: {tm.cached_tokens} of {tm.prompt_tokens} prompt tokens cached"
    return f"\nslot {t.slot}"


class BadgeDelegate(QStyledItemDelegate):
    """Anomaly counts as small red pills (the text fallback is for copy and tests)."""

    def paint(self, painter: QPainter, option, index) -> None:
        badges = index.data(BADGES)
        if not badges:
            super().paint(painter, option, index)
            return
        self.initStyleOption(option, index)
        option.text = ""
        option.widget.style().drawControl(
            option.widget.style().ControlElement.CE_ItemViewItem, option, painter, option.widget)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont(option.font)
        font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
        painter.setFont(font)
        fm = painter.fontMetrics()
        x = option.rect.x() + 4
        h = fm.height() + 2
        y = option.rect.y() + (option.rect.height() - h) / 2
        for label, n in badges:
            text = f"{label} ×{n}" if n > 1 else label
            w = fm.horizontalAdvance(text) + 10
            if x + w > option.rect.right():
                break
            path = QPainterPath()
            path.addRoundedRect(QRectF(x, y, w, h), h / 2, h / 2)
            painter.fillPath(path, QColor("#5c2129"))
            painter.setPen(QColor(COLOURS["anomaly"]))
            painter.drawText(QRectF(x, y, w, h), Qt.AlignmentFlag.AlignCenter, text)
            x += w + 4
        painter.restore()

    def sizeHint(self, option, index) -> QSize:
        s = super().sizeHint(option, index)
        return QSize(max(s.width(), 160), s.height())


class RequestLog(QWidget):
    """The table and its follow switch. Emits `selected(track)` when the selection changes."""

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
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setShowGrid(False)
        self.table.setItemDelegateForColumn(ANOMALIES_COL, BadgeDelegate(self.table))
        hh = self.table.horizontalHeader()
        hh.setStretchLastSection(True)
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for col, w in enumerate(_WIDTHS):
            self.table.setColumnWidth(col, w)

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
        head.addWidget(self.count, 1)
        head.addWidget(self.follow)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.table)
        self._current = None
        self._programmatic = False
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.table.clicked.connect(self._clicked)
        self.follow.toggled.connect(self._follow_toggled)

    @property
    def current(self) -> Track | None:
        return self._current

    def add(self, track: Track) -> None:
        self.model.add(track)
        self.count.setText(f"  {self.model.rowCount()}")
        if self.follow.isChecked():
            self.select(track)

    def select(self, track: Track) -> None:
        row = self.model.row_of(track)
        if row is None:
            return
        self._programmatic = True
        try:
            self.table.selectRow(row)
        finally:
            self._programmatic = False
        if self._current is not track:
            self._current = track
            self.selected.emit(track)

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
