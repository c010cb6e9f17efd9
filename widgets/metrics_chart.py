"""The charts: tokens/s, TTFT per request, queue depth with busy slots, anomalies, and the
share of draft tokens each request kept (speculation), over time.

Owns `RingBuffer` (a fixed-size float64 x/y store with amortised O(1) appends and a contiguous
view for `setData`) and `MetricsCharts` (five pyqtgraph plots, one `PlotDataItem` per series).
`refresh()` is called on a slow timer (2 Hz: a repaint of the plots costs ~10 ms here): it
asks its source (`engine.metrics.Metrics`, the service's or a playback's) for a sample and its
series, appends only the points newer than the last one seen, and scrolls the x range to the
last `window` seconds. The plots sit in a grid of three columns (the anomaly plot spans two)
inside a scroll area: a plot's data area never gets shorter than `MIN_PLOT_HEIGHT`, so its y
labels never overprint, however little height the window gives the charts. Serving several
models, each model's load, unload and eviction is a `Marker` on the timeline (`add_marker`): a
dashed vertical line across every plot, named on the first, at its time on the source's clock
(`Metrics.t0`); a source without metrics (no model loaded yet) draws nothing. GUI thread only.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from engine.parse.events import ANOMALY_KINDS
from inspector.tracks import TrackSource
from widgets.theme import ANOMALY_LABELS, BACKGROUND, COLOURS, MUTED

pg.setConfigOptions(antialias=True, background=BACKGROUND, foreground=MUTED)

_ANOMALY_PENS = ("#ff6b6b", "#ff9f43", "#feca57", "#c56cf0", "#48dbfb", "#1dd1a1", "#ff78c4")
PLOTS = (
    ("tokens_per_s", "tokens/s", COLOURS["content"]),
    ("ttft_ms", "TTFT per request (ms)", COLOURS["call"]),
    ("queue_depth", "queue depth · busy slots", COLOURS["markup"]),
    ("anomalies", "anomalies", COLOURS["anomaly"]),
    # Speculation (--speculate ngram): the share of each request's draft tokens kept.
    ("draft_kept_pct", "draft tokens kept (%)", COLOURS["reasoning"]),
)
# (row, column, column span) of each plot, in the two arrangements: one row of five where the
# charts are short and wide (a tab of a 1280×800 window), else three columns on two rows (the
# anomaly plot, with seven kinds, spanning two).
GRIDS = {
    1: {"tokens_per_s": (0, 0, 1), "ttft_ms": (0, 1, 1), "queue_depth": (0, 2, 1),
        "anomalies": (0, 3, 1), "draft_kept_pct": (0, 4, 1)},
    2: {"tokens_per_s": (0, 0, 1), "ttft_ms": (0, 1, 1), "queue_depth": (0, 2, 1),
        "anomalies": (1, 0, 2), "draft_kept_pct": (1, 2, 1)},
}
MIN_PLOT_HEIGHT = 90  # px of a plot's data area: five y labels without overprinting
MIN_PLOT_WIDTH = 160  # px of a plot, its y axis included
TITLE_H, AXIS_H = 20, 18  # a plot's title and x axis (their heights are set below)
ROW_OVERHEAD = TITLE_H + AXIS_H + 14  # and the grid's spacing: measured, with the view box's


MAX_MARKERS = 64  # the newest kept: a timeline shows two minutes


@dataclass(frozen=True, slots=True)
class Marker:
    """An event on the timeline: `t` is a time.perf_counter() value, as the metrics' times."""

    t: float
    label: str
    colour: str


class RingBuffer:
    """The last `capacity` (x, y) points, float64. Stored in a 2× array that is compacted
    when full, so `view()` is always one contiguous slice (no copy for setData)."""

    def __init__(self, capacity: int = 2000) -> None:
        self.capacity = capacity
        self._x = np.zeros(2 * capacity, dtype=np.float64)
        self._y = np.zeros(2 * capacity, dtype=np.float64)
        self._start = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def clear(self) -> None:
        self._start = self._end = 0

    @property
    def last_x(self) -> float:
        return float(self._x[self._end - 1]) if self._end > self._start else float("-inf")

    def extend(self, points) -> None:
        for x, y in points:
            if self._end == len(self._x):
                keep = self.capacity - 1
                self._x[:keep] = self._x[self._end - keep : self._end]
                self._y[:keep] = self._y[self._end - keep : self._end]
                self._start, self._end = 0, keep
            self._x[self._end] = x
            self._y[self._end] = y
            self._end += 1
            if self._end - self._start > self.capacity:
                self._start += 1

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[self._start : self._end], self._y[self._start : self._end]


class MetricsCharts(QWidget):
    def __init__(self, parent=None, window: float = 120.0) -> None:
        super().__init__(parent)
        self.window = window
        self.source = None  # an object with .metrics (engine Metrics) and .sample()
        self.title = QLabel("Charts")
        self.title.setStyleSheet("font-weight: bold; padding: 0 4px;")
        self.view = pg.GraphicsLayoutWidget()
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.buffers: dict[str, RingBuffer] = {}
        self._plot_keys: dict[str, list[str]] = {}  # plot name -> its series' keys
        self.rows = 0  # the arrangement in use (GRIDS), set by `_arrange`
        self.markers: list[Marker] = []
        self._marker_items: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self._markers_drawn: tuple = ()  # (the metrics they were placed for, how many)
        for name, title, colour in PLOTS:
            plot = pg.PlotItem(title=title)
            # Equal columns: the grid shares its width by stretch, not by the titles' widths.
            plot.setPreferredWidth(MIN_PLOT_WIDTH)
            plot.showGrid(x=True, y=True, alpha=0.15)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.getAxis("bottom").setHeight(AXIS_H)
            plot.titleLabel.setMaximumHeight(TITLE_H)
            plot.layout.setRowFixedHeight(0, TITLE_H)
            if name == "queue_depth":  # two series: the title is their key, in their colours
                title = (f"<span style='color:{colour}'>queue depth</span> · "
                         f"<span style='color:{COLOURS['reasoning']}'>busy slots</span>")
            plot.titleLabel.setText(title, size="9pt", color=MUTED)
            plot.setLimits(yMin=0)  # all are counts, rates or shares: no negative axis
            self.plots[name] = plot
            self._plot_keys[name] = [f"anomalies.{k}" for k in ANOMALY_KINDS] \
                if name == "anomalies" else [name]
            if name == "anomalies":
                for kind, pen in zip(ANOMALY_KINDS, _ANOMALY_PENS, strict=True):
                    self._add_curve(plot, f"anomalies.{kind}", pen, name=ANOMALY_LABELS[kind])
            else:
                symbol = "o" if name in ("ttft_ms", "draft_kept_pct") else None
                self._add_curve(plot, name, colour, symbol=symbol)
            if name == "queue_depth":  # how many wait, next to how many are being served
                self._add_curve(plot, "busy_slots", COLOURS["reasoning"])
                self._plot_keys[name].append("busy_slots")
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.view)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        # The key of the anomaly plot lives under the charts: a legend box would cover it.
        self.key = QLabel("anomalies: " + "  ".join(
            f"<span style='color:{pen}'>■ {html.escape(ANOMALY_LABELS[k])}</span>"
            for k, pen in zip(ANOMALY_KINDS, _ANOMALY_PENS, strict=True)))
        self.key.setStyleSheet(f"color: {MUTED}; padding: 0 4px;")
        self.key.setWordWrap(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.scroll, 1)
        lay.addWidget(self.key)
        self._arrange(2)

    def _arrange(self, rows: int) -> None:
        """Lay the plots out on `rows` rows (GRIDS); the grid's floor (`MIN_PLOT_HEIGHT` a
        plot) is the view's minimum size: below it the scroll area scrolls instead."""
        if rows == self.rows:
            return
        self.rows = rows
        layout = self.view.ci
        for plot in self.plots.values():
            if plot.scene() is not None:
                layout.removeItem(plot)
        grid = GRIDS[rows]
        for name, plot in self.plots.items():
            row, col, span = grid[name]
            layout.addItem(plot, row=row, col=col, colspan=span)
        columns = max(col + span for _row, col, span in grid.values())
        for col in range(5):
            layout.layout.setColumnStretchFactor(col, 1 if col < columns else 0)
        self.view.setMinimumHeight(rows * (MIN_PLOT_HEIGHT + ROW_OVERHEAD))
        self.view.setMinimumWidth(columns * MIN_PLOT_WIDTH)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        # Two rows where they fit at full height (or where five columns would not), else one.
        tall = self.scroll.height() >= 2 * (MIN_PLOT_HEIGHT + ROW_OVERHEAD)
        narrow = self.width() < 5 * MIN_PLOT_WIDTH
        self._arrange(2 if tall or narrow else 1)

    def _add_curve(self, plot, key: str, colour: str, symbol=None, name=None) -> None:
        kw = {"symbol": symbol, "symbolSize": 5, "symbolBrush": colour, "symbolPen": None} \
            if symbol else {}
        curve = plot.plot(pen=pg.mkPen(colour, width=1.6), name=name, **kw)
        self.curves[key] = curve
        self.buffers[key] = RingBuffer()

    def set_source(self, source: TrackSource, label: str = "") -> None:
        if source is self.source:
            return
        self.source = source
        for buf in self.buffers.values():
            buf.clear()
        for curve in self.curves.values():
            curve.setData([], [])
        self.title.setText(f"Charts · {label}" if label else "Charts")
        self.refresh()

    def add_marker(self, marker: Marker) -> None:
        """An event on the timeline (drawn at the next refresh)."""
        self.markers = [*self.markers, marker][-MAX_MARKERS:]

    def marker_positions(self) -> list[tuple[float, str]]:
        """Where each marker is drawn now: (x on the first plot, its label)."""
        first = next(iter(self.plots.values()))
        return [(line.value(), line.label.toPlainText() if line.label else "")
                for plot, line in self._marker_items if plot is first]

    def _draw_markers(self, metrics) -> None:
        key = (id(metrics), len(self.markers), self.markers[-1] if self.markers else None)
        if key == self._markers_drawn:
            return
        self._markers_drawn = key
        for plot, line in self._marker_items:
            plot.removeItem(line)
        self._marker_items = []
        first = next(iter(self.plots.values()))
        for m in self.markers:
            for plot in self.plots.values():
                line = pg.InfiniteLine(
                    pos=m.t - metrics.t0, angle=90, movable=False,
                    pen=pg.mkPen(m.colour, width=1, style=Qt.PenStyle.DashLine),
                    label=m.label if plot is first else None,
                    labelOpts={"position": 0.9, "color": m.colour, "rotateAxis": (1, 0)})
                plot.addItem(line, ignoreBounds=True)
                self._marker_items.append((plot, line))

    def points(self, key: str) -> int:
        return len(self.buffers[key])

    def plot_heights(self) -> dict[str, float]:
        """Each plot's data area, in px as laid out now (what a reader gets to see)."""
        return {name: plot.getViewBox().sceneBoundingRect().height()
                for name, plot in self.plots.items()}

    def refresh(self) -> None:
        src = self.source
        if src is None:
            return
        src.sample()
        if src.metrics is None:  # serving several models, none loaded yet
            return
        self._draw_markers(src.metrics)
        series = src.metrics.series()
        latest = 0.0
        for key, points in series.items():
            buf = self.buffers.get(key)
            if buf is None or not points:
                continue
            last = buf.last_x
            fresh = [p for p in points[-buf.capacity :] if p[0] > last]
            if key.startswith("anomalies.") and fresh and not len(buf):
                fresh.insert(0, (fresh[0][0], 0.0))  # a cumulative count starts from zero
            if fresh:
                buf.extend(fresh)
                x, y = buf.view()
                self.curves[key].setData(x, y)
            latest = max(latest, buf.last_x)
        for key, buf in self.buffers.items():
            # Counts hold their level up to now, so a flat line is visible, not a dot.
            if key.startswith("anomalies.") and len(buf) and buf.last_x < latest:
                buf.extend([(latest, buf.view()[1][-1])])
                self.curves[key].setData(*buf.view())
        lo = max(0.0, latest - self.window)
        for name, plot in self.plots.items():
            plot.setXRange(lo, max(latest, lo + 10.0), padding=0.02)
            # Every series is a count or a rate: the y axis runs from zero to the highest
            # visible point (auto-range zoomed a lone TTFT point to a sliver around its value).
            top = 0.0
            for key in self._plot_keys[name]:
                x, y = self.buffers[key].view()
                seen = y[x >= lo]
                if len(seen):
                    top = max(top, float(seen.max()))
            plot.setYRange(0.0, max(top * 1.1, 1.0), padding=0)
