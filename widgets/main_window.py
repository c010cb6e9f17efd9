"""The inspector window: request list, charts, channel panes, raw/prompt/compose/re-parse tabs,
and a ledger dock for the open recordings (View → Ledger; widgets/ledger_view.py).

Request → *Re-run on…* (also the request list's context menu) sends the selected request, or
its whole recording, again to another engine; its feed is one more source polled here, each
re-run request a row of its own linked to its original (widgets/reruns.py).

Owns `MainWindow`, which lays the views out and runs the frame timer (~30 Hz). Each frame it
polls its sources (objects with `poll() -> changed tracks`, `metrics` and `sample()`: the live
feed of a service and the playback of recordings), adds new tracks to the request list,
refreshes changed rows, and lets the views of the selected track draw what arrived since the
previous frame. The charts refresh on a slower timer. Everything that is not Qt (tracks, the
feed, playback) is passed in by `app/gui.py`, so this module imports neither the server nor
llama.cpp. GUI thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QSplitter,
    QTabWidget,
    QToolBar,
    QToolButton,
)

from engine.chat.request import ChatRequest
from engine.service import Run
from inspector.playback import Playback
from inspector.rerun import side_of_track
from inspector.tracks import Track, TrackSource, TrackStore
from widgets.channel_view import ChannelPanes
from widgets.compare_view import CompareView
from widgets.compose_box import ComposeBox
from widgets.ledger_view import LedgerView
from widgets.metrics_chart import MetricsCharts
from widgets.playback_bar import PlaybackBar
from widgets.prompt_view import PromptView
from widgets.raw_view import RawView
from widgets.reparse_view import ReparseView
from widgets.request_log import RequestLog
from widgets.reruns import Reruns, Start
from widgets.theme import COLOURS, MUTED

FRAME_MS = 33
CHART_MS = 500


class MainWindow(QMainWindow):
    server_toggled = Signal(bool)
    closed = Signal()

    def __init__(self, store: TrackStore, playback: Playback | None,
                 sources: Sequence[TrackSource],
                 submit: Callable[[ChatRequest], Run] | None = None,
                 title: str = "Prism",
                 rerun: Start | None = None,
                 packs: Sequence[str] = (),
                 guard_calls: bool | None = True) -> None:
        """`rerun` starts a rerun off the GUI thread and returns its feed (app/gui.py);
        `packs` are the built-in packs *Re-run on…* offers; `guard_calls` is Compose's
        *Guard calls* at start (the service's, --no-guard-calls; None: the engine runs
        no guard)."""
        super().__init__()
        self.setWindowTitle(title)
        self.resize(1560, 980)
        self.setAcceptDrops(True)
        self.store = store
        self.playback = playback
        self.sources = list(sources)
        self.frames = 0
        self.frame_ms: list[float] = []  # how long each frame's work took (bench/gui.py)

        self.log = RequestLog()
        self.charts = MetricsCharts()
        self.channels = ChannelPanes()
        self.raw = RawView()
        self.prompt = PromptView()
        self.compose = ComposeBox(submit=submit, guard_calls=guard_calls)
        self.reparse = ReparseView()
        self.compare = CompareView()
        self.compare.pick.connect(self._pick_for_compare)
        self.bar = PlaybackBar(playback)

        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.log)
        top.addWidget(self.charts)
        top.setSizes([900, 660])
        self.tabs = QTabWidget()
        self.tabs.addTab(self.raw, "Raw && tokens")
        self.tabs.addTab(self.prompt, "Prompt")
        self.tabs.addTab(self.compose, "Compose")
        self.tabs.addTab(self.reparse, "Re-parse && export")
        self.tabs.addTab(self.compare, "Compare")
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(self.channels)
        split.addWidget(self.tabs)
        split.setSizes([290, 380, 260])
        self.setCentralWidget(split)

        tb = QToolBar("Playback")
        tb.setMovable(False)
        tb.addWidget(self.bar)
        self.server_action = QAction("Server", self)
        self.server_action.setCheckable(True)
        self.server_action.setToolTip("Serve the OpenAI / Anthropic / Responses APIs on "
                                      "localhost from this window's engine")
        self.server_action.toggled.connect(self.server_toggled)
        tb.addSeparator()
        tb.addAction(self.server_action)
        self.addToolBar(tb)

        menu = self.menuBar().addMenu("&File")
        open_action = menu.addAction("&Open recording…")
        open_action.setShortcut(QKeySequence.StandardKey.Open)
        open_action.triggered.connect(self.ask_open)
        export_action = menu.addAction("&Export selected request as fixture…")
        export_action.triggered.connect(self.reparse._export_clicked)
        compare_action = menu.addAction("&Compare recordings…")
        compare_action.setToolTip("A rerun against the recording it re-ran, or any two")
        compare_action.triggered.connect(self.ask_compare)
        menu.addSeparator()
        quit_action = menu.addAction("&Quit")
        # The ledger (`prism stats`) of the recordings opened here, in a dock of its own.
        self.ledger = LedgerView()
        self.ledger_dock = QDockWidget("Ledger", self)
        self.ledger_dock.setObjectName("ledger")
        self.ledger_dock.setWidget(self.ledger)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.ledger_dock)
        self.ledger_dock.hide()
        self.ledger_action = self.ledger_dock.toggleViewAction()
        self.ledger_action.setText("&Ledger of open recordings")
        self.ledger_action.setShortcut("Ctrl+L")
        self.ledger_dock.visibilityChanged.connect(self._ledger_shown)
        self.menuBar().addMenu("&View").addAction(self.ledger_action)
        self.recordings: list[Path] = []
        self.reruns = Reruns(self, rerun, packs)  # the Request menu
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)

        self.model_label = QLabel("")
        self.engine_label = QLabel("")
        self.server_label = QLabel("server off")
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_btn = QToolButton()
        self.copy_btn.setText("Copy URL")
        self.copy_btn.setToolTip("Copy the base URL: paste it into Open WebUI as an OpenAI "
                                 "API connection (any key)")
        self.copy_btn.clicked.connect(self._copy_url)
        self.copy_btn.setEnabled(False)
        self.message = QLabel("")
        self.message.setStyleSheet(f"color: {MUTED};")
        sb = self.statusBar()
        for w in (self.model_label, self.engine_label):
            sb.addWidget(w)
        sb.addWidget(self.message, 1)
        sb.addPermanentWidget(self.server_label)
        sb.addPermanentWidget(self.copy_btn)
        self.server_url: str | None = None

        # The request list's context menu: what can be done with the row right-clicked (the
        # click selects it first).
        table = self.log.table
        table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        for action in (self.reruns.action, self.reruns.original_action):
            table.addAction(action)
        self.log.selected.connect(self.show_track)
        self.log.verdict_clicked.connect(self.show_verdict)
        self.bar.open_requested.connect(self.ask_open)
        self.bar.navigated.connect(self._show_playing)
        self._playing_track = None  # the playback's current request at the last frame
        if self.sources:
            self.charts.set_source(self.sources[0], self._source_label(self.sources[0]))

        self.timer = QTimer(self)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self.frame)
        self.timer.start(FRAME_MS)
        self.chart_timer = QTimer(self)
        self.chart_timer.timeout.connect(self.charts.refresh)
        self.chart_timer.start(CHART_MS)

    # -- the frame -------------------------------------------------------------------------

    def frame(self) -> None:
        """Drain every source and draw what changed (frame timer, ~30 Hz)."""
        t0 = time.perf_counter()
        changed = []
        for src in self.sources:
            changed += src.poll()
        if changed:
            model = self.log.model
            for t in changed:
                if not model.contains(t):
                    self.log.add(t)
            excess = model.rowCount() - self.store.max_rows
            if excess > 0:
                model.remove_oldest(excess)
            model.changed(changed)
            # Following: a playback moving on to its next request is "the newest" too.
            playing = self.playback.current.track if self.playback and \
                self.playback.current else None
            if playing is not self._playing_track:
                self._playing_track = playing
                if playing is not None and self.log.follow.isChecked():
                    self.log.select(playing)
            current = self.log.current
            if current is not None and any(t is current for t in changed):
                self.channels.sync()
                self.raw.sync()
                if self.prompt.track is not current or current.generation != self.prompt._gen:
                    self.prompt.show_track(current)
        if self.reruns.feeds:
            self.reruns.watch()
        self.bar.refresh()
        self.compose.refresh()
        self.frames += 1
        if changed:
            self.frame_ms.append((time.perf_counter() - t0) * 1000.0)
            if len(self.frame_ms) > 10_000:
                del self.frame_ms[:5_000]

    def show_track(self, track: Track) -> None:
        """The selection changed: draw this request everywhere."""
        self.store.protected = track
        self.channels.show_track(track)
        self.raw.show_track(track)
        self.prompt.show_track(track)
        self.reparse.set_track(track)
        src = self._source_for(track)
        if src is not None:
            self.charts.set_source(src, self._source_label(src))
        pb = self.playback
        if pb is not None and not pb.playing:
            i = pb.item_for(track)
            if i is not None and i != pb.index:
                pb.select(i)

    def show_verdict(self, track: Track, verdict) -> None:
        """A "why it stopped" cell was clicked: the request, and its deciding event selected
        in the raw view."""
        self.log.select(track)
        if verdict.span is not None:
            self.tabs.setCurrentWidget(self.raw)
            self.raw.show_span(verdict.span)
        self.say(f"{track.id}: {verdict.label}: {verdict.detail}")

    def _ledger_shown(self, visible: bool) -> None:
        if visible:
            self.ledger.set_recordings(self.recordings)

    def _show_playing(self) -> None:
        """Previous / next in the bar: show that request, pinned or not."""
        self.frame()  # lists it, if it is new
        it = self.playback.current
        if it is not None:
            self._playing_track = it.track
            self.log.select(it.track)

    def _source_for(self, track: Track) -> TrackSource | None:
        for src in self.sources:
            if src.metrics is track.metrics:
                return src
        return None

    def _source_label(self, src: TrackSource) -> str:
        if src is self.playback:
            return "playback"
        return getattr(src, "label", None) or "engine (live)"

    # -- recordings ------------------------------------------------------------------------

    def ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a recording or a model output", "",
                                              "Recordings (*.jsonl);;All files (*)")
        if path:
            self.open_recording(path)

    def open_recording(self, path: str | Path, play: bool = True) -> bool:
        try:
            items = self.playback.open(path, play=play)
        except (OSError, ValueError) as e:
            self.say(f"Cannot open {path}: {e}", error=True)
            return False
        self.say(f"Opened {Path(path).name}: {len(items)} request(s)")
        self.recordings.append(Path(path))
        if self.ledger_dock.isVisible():
            self.ledger.set_recordings(self.recordings)
        self.bar.refresh()
        return True

    def ask_compare(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Compare a rerun with its original, or two recordings", "",
            "Recordings (*.jsonl);;All files (*)")
        if paths:
            self.compare_recordings(*paths[:2])

    def compare_recordings(self, first: str | Path, second: str | Path | None = None) -> bool:
        """Every pair of two recordings in the Compare tab; one recording alone is a rerun,
        compared with the recording it names."""
        from engine.record.compare import compare_sessions
        from engine.record.recording import load_recording

        try:
            b = load_recording(first)
            if second is None:
                if not b.rerun_of:
                    raise ValueError("not a rerun (it names no original); pick two recordings")
                a, labels = load_recording(b.rerun_of), ("was", "now")
            else:
                a, b, labels = b, load_recording(second), ("a", "b")
        except (OSError, ValueError) as e:
            self.say(f"Cannot compare: {e}", error=True)
            return False
        found = compare_sessions(a, b, labels)
        self.compare.show_pairs(found)
        self.tabs.setCurrentWidget(self.compare)
        self.say(f"Compared {len(found)} pair(s)")
        return True

    def _pick_for_compare(self, which: str) -> None:
        track = self.log.current
        if track is None:
            self.say("Select a request in the list first", error=True)
            return
        self.compare.set_side(which, side_of_track(track, f"{track.origin or 'live'}:{track.id}"))

    def dragEnterEvent(self, event) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.open_recording(url.toLocalFile())
        event.acceptProposedAction()

    # -- status ----------------------------------------------------------------------------

    def say(self, text: str, error: bool = False) -> None:
        self.message.setStyleSheet(f"color: {COLOURS['anomaly'] if error else MUTED};")
        self.message.setText(text)

    def set_engine_status(self, model: str, state: str, queue: int = 0,
                          slots: tuple[int, int] | None = None) -> None:
        """`slots`: (busy, total) for an engine with parallel sequences, shown when it has
        more than one (--parallel N)."""
        self.model_label.setText(f"model: {model}")
        colour = {"generating": COLOURS["call"], "loading": COLOURS["markup"],
                  "closed": COLOURS["anomaly"]}.get(state, MUTED)
        busy = f" · {slots[0]}/{slots[1]} slots busy" if slots and slots[1] > 1 else ""
        waiting = f" · {queue} waiting" if queue else ""
        self.engine_label.setText(f"engine: <span style='color:{colour}'>{state}</span>"
                                  f"{busy}{waiting}")

    def set_server(self, url: str | None, note: str = "") -> None:
        self.server_url = url
        self.server_action.blockSignals(True)
        self.server_action.setChecked(url is not None)
        self.server_action.blockSignals(False)
        self.copy_btn.setEnabled(url is not None)
        if url is None:
            self.server_label.setText(note or "server off")
        else:
            self.server_label.setText(f"OpenAI base URL: {url}")
        self.server_label.setToolTip(note)

    def _copy_url(self) -> None:
        if self.server_url:
            QGuiApplication.clipboard().setText(self.server_url)
            self.say("Base URL copied: in Open WebUI, Settings → Connections → OpenAI API.")

    # -- screenshots and closing -----------------------------------------------------------

    def save_screenshot(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.grab().save(str(path)):
            raise OSError(f"could not write {path}")
        return path

    def closeEvent(self, event) -> None:
        self.timer.stop()
        self.chart_timer.stop()
        self.closed.emit()
        super().closeEvent(event)
