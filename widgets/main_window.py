"""The inspector window: the request list across the whole width, the channel panes (until the
first request, a hint of what to do), then the tabs (raw, prompt, charts, compose, re-parse,
compare), and a ledger dock (View → Ledger; widgets/ledger_view.py). The menus are built from
the declared actions (widgets/actions.py; their handlers in widgets/window_commands.py); the
layout is saved and restored (widgets/window_layout.py).

Request → *Re-run on…* (also the request list's context menu) sends the selected request, or
its whole recording, again to another engine; its feed is one more source polled here, each
re-run request a row of its own linked to its original (widgets/reruns.py).

Owns `MainWindow`, which lays the views out and runs the frame timer (~30 Hz). Each frame it
polls its sources (objects with `poll() -> changed tracks`, `metrics` and `sample()`: the live
feed of a service and the playback of recordings), adds new tracks to the request list,
refreshes changed rows, and lets the views of the selected track draw what arrived since the
previous frame. While *Follow newest* is on, the panes follow the newest row that is generating
(widgets/track_follower.py), not the newest row, which is often queued with nothing to show.
The charts refresh on a slower timer. Everything that is not Qt (tracks, the feed, playback)
is passed in by `app/gui.py`, so this module imports neither the server nor llama.cpp. GUI
thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolBar,
    QToolButton,
)

from engine.chat.request import ChatRequest
from engine.service import Run
from inspector.playback import Playback
from inspector.rerun import side_of_track
from inspector.tracks import Track, TrackSource, TrackStore
from widgets.actions import build_actions
from widgets.channel_view import ChannelPanes
from widgets.compare_view import CompareView
from widgets.compose_box import ComposeBox
from widgets.first_steps import StatusMessage
from widgets.ledger_view import LedgerView
from widgets.metrics_chart import MetricsCharts
from widgets.playback_bar import PlaybackBar
from widgets.prompt_view import PromptView
from widgets.raw_view import RawView
from widgets.reparse_view import ReparseView
from widgets.request_log import RequestLog
from widgets.reruns import Reruns, Start
from widgets.theme import COLOURS, MUTED
from widgets.track_follower import follow_target
from widgets.window_commands import WindowCommands
from widgets.window_layout import SPLIT, restore_layout, save_layout

FRAME_MS = 33
CHART_MS = 500
TAB_FLOOR = 150  # px: the least a tab page keeps
LEDGER_WIDTH = 460  # px: the ledger's columns and numbers, without a scrollbar
MODELS_WIDTH = 620  # px: the model list's columns and buttons


class MainWindow(WindowCommands, QMainWindow):
    server_toggled = Signal(bool)
    free_port_chosen = Signal(int)  # the status bar's *Use free port N* (app/gui.py)
    closed = Signal()

    def __init__(self, store: TrackStore, playback: Playback | None,
                 sources: Sequence[TrackSource],
                 submit: Callable[[ChatRequest], Run] | None = None,
                 title: str = "Prism",
                 rerun: Start | None = None,
                 packs: Sequence[str] = (),
                 guard_calls: bool | None = True,
                 settings: QSettings | None = None,
                 size: tuple[int, int] | None = None) -> None:
        """`rerun` starts a rerun off the GUI thread and returns its feed (app/gui.py);
        `packs` are the built-in packs *Re-run on…* offers; `guard_calls` is Compose's
        *Guard calls* at start (the service's, --no-guard-calls; None: the engine runs
        no guard). `settings`: where the layout (geometry, splitters, docks) is restored from
        and saved to at close (None: neither); `size` overrides the restored size."""
        super().__init__()
        self.setWindowTitle(title)
        self.setObjectName("prism_main")
        self.setAcceptDrops(True)
        self.store = store
        self.playback = playback
        self.sources = list(sources)
        self.settings = settings
        self.frames = 0
        self.frame_ms: list[float] = []  # how long each frame's work took (bench/gui.py)
        self.recordings_dir: Path | None = None  # where File → Open starts
        self.recording_to: Path | None = None  # this window's own recording

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

        # Until the first request the panes hold what to do first, not three empty boxes.
        self.hint = QLabel()
        self.hint.setObjectName("empty_hint")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet(f"color: {MUTED}; font-size: 11pt; padding: 12px;")
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.hint.linkActivated.connect(self._hint_link)
        self.body = QStackedWidget()
        self.body.addWidget(self.hint)
        self.body.addWidget(self.channels)
        self.server_url: str | None = None
        self._update_hint()

        # The request list across the whole width (its columns need it); the charts in a
        # tab of their own, where their plots get the height to be read.
        self.tabs = QTabWidget()
        self.tabs.setObjectName("tabs")
        self.tabs.addTab(self.raw, "Raw && tokens")
        self.tabs.addTab(self.prompt, "Prompt")
        self.tabs.addTab(self.charts, "Charts")
        self.tabs.addTab(self.compose, "Compose")
        self.tabs.addTab(self.reparse, "Re-parse && export")
        self.tabs.addTab(self.compare, "Compare")
        # A tab widget is as tall as its tallest page wants: these pages may be squeezed
        # (the splitter gives them more) rather than hold the whole window's layout.
        for page in (self.compare, self.reparse):
            page.setMinimumHeight(TAB_FLOOR)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setObjectName("main_split")
        self.split.setChildrenCollapsible(False)
        for i, w in enumerate((self.log, self.body, self.tabs)):
            self.split.addWidget(w)
            self.split.setStretchFactor(i, SPLIT[i])
        self.setCentralWidget(self.split)

        tb = QToolBar("Playback")
        tb.setObjectName("playback_toolbar")
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

        self.menuBar().addMenu("&File")  # first in the bar; filled from the actions table
        # The ledger (`prism stats`) of the recordings opened here, in a dock of its own.
        self.ledger = LedgerView()
        self.ledger.follow(self.log)  # counts the window's own requests; a click filters it
        self.ledger_dock = QDockWidget("Ledger", self)
        self.ledger_dock.setObjectName("ledger")
        self.ledger_dock.setWidget(self.ledger)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.ledger_dock)
        self.ledger_dock.hide()
        self._ledger_sized = False
        self.ledger_action = self.ledger_dock.toggleViewAction()
        self.ledger_action.setText("&Ledger of open recordings")
        self.ledger_action.setShortcut("Ctrl+L")
        self.ledger_dock.visibilityChanged.connect(self._ledger_shown)
        self.view_menu = self.menuBar().addMenu("&View")
        self.view_menu.addAction(self.ledger_action)
        self.recordings: list[Path] = []
        self.reruns = Reruns(self, rerun, packs)  # the Request menu
        self.actions_by_name = build_actions(self, {
            "open": self.ask_open, "export": self.reparse._export_clicked,
            "compare": self.ask_compare, "recordings": self.show_recordings_folder,
            "quit": self.close, "play": self._play_pause, "step": self._step,
            "next": lambda: self.go(1), "previous": lambda: self.go(-1),
            "send": self._send_composed, "to_compose": self.to_compose,
            "shortcuts": self.show_shortcuts})

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
        self.port_btn = QToolButton()  # shown when the port was taken: start on a free one
        self.port_btn.setObjectName("free_port")
        self.port_btn.hide()
        self.port_btn.clicked.connect(self._use_free_port)
        self._free_port: int | None = None
        self.record_label = QLabel("")  # where this window records
        self.record_label.setStyleSheet(f"color: {MUTED};")
        self.record_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message = StatusMessage()
        sb = self.statusBar()
        for w in (self.model_label, self.engine_label):
            sb.addWidget(w)
        sb.addWidget(self.message, 1)
        for w in (self.record_label, self.server_label, self.port_btn, self.copy_btn):
            sb.addPermanentWidget(w)

        # The request list's context menu: what can be done with the row right-clicked (the
        # click selects it first).
        table = self.log.table
        table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        for action in (self.reruns.action, self.reruns.original_action,
                       self.actions_by_name["to_compose"]):
            table.addAction(action)
        self.log.selected.connect(self.show_track)
        self.log.verdict_clicked.connect(self.show_verdict)
        # After the list's own handler (which picks the top row, maybe a queued one).
        self.log.follow.toggled.connect(lambda on: on and self._follow_newest())
        self.bar.open_requested.connect(self.ask_open)
        self.bar.navigated.connect(self._show_playing)
        self._playing_track = None  # the playback's current request at the last frame
        self._shown: Track | None = None  # the request the panes draw
        self._row_actions(None)
        if self.sources:
            self.charts.set_source(self.sources[0], self._source_label(self.sources[0]))

        self.timer = QTimer(self)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self.frame)
        self.timer.start(FRAME_MS)
        self.chart_timer = QTimer(self)
        self.chart_timer.timeout.connect(self.charts.refresh)
        self.chart_timer.start(CHART_MS)
        restore_layout(self, settings, size)

    # -- the frame -------------------------------------------------------------------------

    def frame(self) -> None:
        """Drain every source and draw what changed (frame timer, ~30 Hz)."""
        t0 = time.perf_counter()
        changed = []
        for src in self.sources:
            changed += src.poll()
        if changed:
            model = self.log.model
            fresh = [t for t in changed if not model.contains(t)]
            if fresh:
                self._add_rows(fresh)
                self._update_hint()
            excess = model.total - self.store.max_rows
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
            if self.log.follow.isChecked():
                self._follow_newest()
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

    def _add_rows(self, fresh: list[Track]) -> None:
        """New rows into the list. While following, the list selects each row as it is
        added, often a queued one with empty panes: its `selected` signal is held back here
        and `_follow_newest` decides what the panes show."""
        self.log.blockSignals(True)
        try:
            for t in fresh:
                self.log.add(t)
        finally:
            self.log.blockSignals(False)

    def _follow_newest(self) -> None:
        """Select the newest row that is generating (or, with none, the newest that has
        output): a queued row has nothing to show yet."""
        model = self.log.model
        rows = (model.track_at(i) for i in range(model.rowCount()))
        # Only queued rows and nothing shown yet: the row the list chose, as it is.
        target = follow_target(rows) or self._shown or self.log.current
        if target is None:
            return
        if target is self._shown:  # drawn already: only the list's selection catches up
            if self.log.current is not target:
                self.log.blockSignals(True)
                try:
                    self.log.select(target)
                finally:
                    self.log.blockSignals(False)
        elif self.log.current is target:  # the list chose it while adding it, unheard
            self.show_track(target)
        else:
            self.log.select(target)

    def show_track(self, track: Track) -> None:
        """The selection changed: draw this request everywhere."""
        self._row_actions(track)
        self._shown = track
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

    def add_models(self, widget) -> QDockWidget:
        """Serving several models: their list (widgets/model_list.py, filled by
        app/gui_catalog.py) in a dock of its own, shown (View → Models)."""
        dock = QDockWidget("Models", self)
        dock.setObjectName("models")
        dock.setWidget(widget)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
        # Wide enough for its columns (its buttons last), at most two fifths of the window.
        self.resizeDocks([dock], [min(MODELS_WIDTH, self.width() * 2 // 5)],
                         Qt.Orientation.Horizontal)
        action = dock.toggleViewAction()
        action.setText("&Models")
        self.view_menu.addAction(action)
        return dock

    def _ledger_shown(self, visible: bool) -> None:
        if visible:
            self.ledger.set_recordings(self.recordings)
            if not self._ledger_sized:  # first shown: wide enough for its numbers
                self._ledger_sized = True
                width = min(max(LEDGER_WIDTH, self.ledger.sizeHint().width()),
                            self.width() * 2 // 5)
                self.resizeDocks([self.ledger_dock], [width], Qt.Orientation.Horizontal)

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
        path, _ = QFileDialog.getOpenFileName(self, "Open a recording or a model output",
                                              self._start_dir(),
                                              "Recordings (*.jsonl);;All files (*)")
        if path:
            self.open_recording(path)

    def open_recording(self, path: str | Path, play: bool = True) -> bool:
        try:
            items = self.playback.open(path, play=play)
        except (OSError, ValueError) as e:
            self.say(f"Cannot open {path}: {e}", error=True)
            return False
        damage = self.playback.damage
        if damage:  # what precedes the damage plays; the rest is named, with its line
            self.say(f"Opened {Path(path).name}: {len(items)} request(s); the file is "
                     f"damaged at {damage}", error=True)
        else:
            self.say(f"Opened {Path(path).name}: {len(items)} request(s)")
        self.recordings.append(Path(path))
        if self.ledger_dock.isVisible():
            self.ledger.set_recordings(self.recordings)
        self.bar.refresh()
        return True

    def ask_compare(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Compare a rerun with its original, or two recordings", self._start_dir(),
            "Recordings (*.jsonl);;All files (*)")
        if paths:
            self.compare_recordings(*paths[:2])

    def compare_recordings(self, first: str | Path, second: str | Path | None = None) -> bool:
        """Every pair of two recordings in the Compare tab; one recording alone is a rerun,
        compared with the recording it names."""
        from engine.record.compare import compare_sessions
        from engine.record.reader import load_recording

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
        """The status bar's message, whole: cut with "…" where it does not fit, the rest in
        its tooltip and a click away."""
        self.message.show_message(text, error)

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
            self.port_btn.hide()
        self.server_label.setToolTip(note)
        self._update_hint()

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
        if self.isVisible():  # the geometry of a window that was shown
            save_layout(self, self.settings)
        self.timer.stop()
        self.chart_timer.stop()
        self.closed.emit()
        super().closeEvent(event)
