"""The request list's table model: one row per request the filter lets through, newest first.

Owns `RequestLogModel` (the columns: why it stopped (engine/record/verdict.py), anomaly badges,
the newest message's first words, then the request, state, finish reason, model, source, the
engine's slot, tokens, cached / prompt tokens (the tooltip: slot and disk shares and where the
prompt left the cache), TTFT and tokens/s: the most telling first, so they are in view in a
narrow window), `verdict` (a track's, cached) and `BadgeDelegate` (paints the anomaly badges).

The model holds every track it is given and shows those its `Query` (inspector/query.py) lets
through; it keeps each track's searchable summary (`summaries`), made again on the frame the
track changes, so a row whose text the store released is still found by its words, and still
says why it stopped. Rows are refreshed by the frame timer with the tracks that changed, one
`dataChanged` per row, never per token. GUI thread only; widgets/request_log.py is the widget.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath
from PySide6.QtWidgets import QStyledItemDelegate

from engine.parse.events import ANOMALY_KINDS
from engine.record import forensics
from engine.record.verdict import Verdict, verdict_of
from inspector.query import Query, parse
from inspector.summaries import Index
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

COLUMNS = ("Why it stopped", "Anomalies", "Message", "Request", "State", "Finish", "Model",
           "Source", "Slot", "Prompt", "Cached", "Output", "TTFT ms", "tok/s")
# Column numbers by name, so a new column moves no caller's index.
(VERDICT_COL, ANOMALIES_COL, MESSAGE_COL, REQUEST_COL, STATE_COL, FINISH_COL, MODEL_COL,
 SOURCE_COL, SLOT_COL, PROMPT_COL, CACHED_COL, OUTPUT_COL, TTFT_COL, RATE_COL) = \
    range(len(COLUMNS))
_NUMERIC = {SLOT_COL, PROMPT_COL, CACHED_COL, OUTPUT_COL, TTFT_COL, RATE_COL}
# every column but the last (stretched); the first three fit a list 560 px wide
_WIDTHS = (150, 140, 240, 105, 120, 70, 110, 62, 36, 52, 80, 52, 62)
MESSAGE_TIP = ("The first words of the request's newest message: what it asks, or the tool "
               "result it reads")
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
_VERDICTS: dict[tuple[str, str], tuple[int, Verdict]] = {}


def verdict(t: Track) -> Verdict | None:
    """A finished track's verdict from the events it holds (None while it runs, or once its
    events were released). Cached per track version: rows repaint often, tracks change
    rarely once done."""
    if t.status not in _ENDED or t.released:
        return None
    cached = _VERDICTS.get(t.key)
    if cached is not None and cached[0] == t.version:
        return cached[1]
    out = verdict_of(t.events, t.finish_reason or t.status, error=t.error)
    _VERDICTS[t.key] = (t.version, out)
    if len(_VERDICTS) > 4096:  # rows are bounded; the cache is too
        _VERDICTS.pop(next(iter(_VERDICTS)))
    return out
_STATE_COLOURS = {"generating": COLOURS["call"], "prompt": COLOURS["markup"], "queued": MUTED,
                  "error": COLOURS["anomaly"], "cancelled": MUTED}


class RequestLogModel(QAbstractTableModel):
    """Every track given, oldest first; row r shows the r-th newest the query lets through."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._tracks: list[Track] = []  # every track, oldest first
        self._shown: list[Track] = []  # those the query lets through, oldest first
        self._seq: dict[Track, int] = {}  # arrival order (tracks hash by identity)
        self._next = 0
        self._keys: set[tuple[str, str]] = set()  # Track.key: ids repeat across sources
        self.summaries = Index()
        self.query: Query = parse("")

    @property
    def total(self) -> int:
        """Every row held, shown or not (`rowCount` counts the shown ones)."""
        return len(self._tracks)

    # -- updates (frame timer) -------------------------------------------------------------

    def add(self, track: Track) -> None:
        self._seq[track] = self._next
        self._next += 1
        self._tracks.append(track)
        self._keys.add(track.key)
        if self.query.matches(self.summaries.update(track)):
            self.beginInsertRows(QModelIndex(), 0, 0)
            self._shown.append(track)
            self.endInsertRows()

    def remove_oldest(self, n: int = 1) -> None:
        n = min(n, len(self._tracks))
        if n <= 0:
            return
        gone = self._tracks[:n]
        del self._tracks[:n]
        # The oldest shown rows are the ones among the oldest tracks: the bottom rows.
        k = next((i for i, t in enumerate(self._shown) if self._seq[t] > self._seq[gone[-1]]),
                 len(self._shown))
        if k:
            last = len(self._shown) - 1
            self.beginRemoveRows(QModelIndex(), last - k + 1, last)
            del self._shown[:k]
            self.endRemoveRows()
        for t in gone:
            self._keys.discard(t.key)
            self._seq.pop(t, None)
            self.summaries.forget(t)

    def changed(self, tracks: Iterable[Track]) -> None:
        """Refresh these rows; a track that starts or stops passing the filter (it finished,
        an anomaly came) is inserted or removed where it belongs."""
        for t in tracks:
            if t not in self._seq:
                continue
            passes = self.query.matches(self.summaries.update(t))
            r = self.row_of(t)
            if r is not None and passes:
                self.dataChanged.emit(self.index(r, 0), self.index(r, len(COLUMNS) - 1))
            elif r is not None:
                self.beginRemoveRows(QModelIndex(), r, r)
                del self._shown[len(self._shown) - 1 - r]
                self.endRemoveRows()
            elif passes:
                i = bisect_left(self._shown, self._seq[t], key=self._seq.__getitem__)
                row = len(self._shown) - i
                self.beginInsertRows(QModelIndex(), row, row)
                self._shown.insert(i, t)
                self.endInsertRows()

    def set_query(self, query: Query) -> None:
        """Show the rows `query` lets through (one reset: the view reselects after it)."""
        self.beginResetModel()
        self.query = query
        update = self.summaries.update
        self._shown = [t for t in self._tracks if query.matches(update(t))]
        self.endResetModel()

    def contains(self, track: Track) -> bool:
        """Held (shown or not); by key, as the store names tracks."""
        return track.key in self._keys

    def row_of(self, track: Track) -> int | None:
        """The row showing `track`, or None (not held, or filtered out)."""
        seq = self._seq.get(track)
        if seq is None:
            return None
        i = bisect_left(self._shown, seq, key=self._seq.__getitem__)
        if i < len(self._shown) and self._shown[i] is track:
            return len(self._shown) - 1 - i
        return None

    def track_at(self, row: int):
        if 0 <= row < len(self._shown):
            return self._shown[-1 - row]
        return None

    def summary(self, track: Track):
        return self.summaries.get(track)

    def tracks(self) -> list[Track]:
        """Every track held, shown or not, oldest first."""
        return list(self._tracks)

    # -- Qt model API ----------------------------------------------------------------------

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._shown)

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
        if role == Qt.ItemDataRole.ToolTipRole and section == MESSAGE_COL:
            return MESSAGE_TIP
        return None

    def _verdict(self, t: Track) -> Verdict | None:
        """Read from its events while it holds them, else as its summary kept it."""
        out = verdict(t)
        return out if out is not None or t.status not in _ENDED \
            else self.summaries.get(t).verdict

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
            return self._verdict(t)
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
                out = self._verdict(t)
                return VERDICT_TIP if out is None else f"{out.label}: {out.detail}\n\n" \
                    + VERDICT_TIP
            if col == MESSAGE_COL:
                words = self.summaries.get(t).first_words
                return f"{words}\n\n{MESSAGE_TIP}" if words else MESSAGE_TIP
            if col == CACHED_COL:
                return _cache_tip(t)
        return None

    def _display(self, t, col: int) -> str:
        if col == MESSAGE_COL:
            return self.summaries.get(t).first_words
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
            out = self._verdict(t)
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


