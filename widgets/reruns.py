"""The window's reruns: Request → *Re-run on…*, *Compare with its original*, *Stop re-runs*.

Owns `Reruns`, which the main window makes and wires (widgets/main_window.py): the actions (in
the Request menu and the request list's context menu), the dialog (widgets/rerun_dialog.py),
and each rerun's feed (inspector/rerun.py). The selected request, or the whole recording it was
played from, is sent again to the engine the dialog names: `start` (app/gui.py's) runs `prism
rerun`'s loop off the GUI thread and hands back a `RerunFeed`, which the window polls like its
other sources, so each re-run request streams into a row of its own (Source "rerun") linked
to its original. *Compare with its original* opens a pair in the Compare tab; a finished rerun
leaves every pair of it there, the most changed first, and says so in the status bar.
GUI thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from engine.record.compare import Side, compare
from inspector.rerun import EngineChoice, RerunFeed, RerunPlan, side_of_track
from inspector.tracks import Track
from widgets.rerun_dialog import RerunDialog

if TYPE_CHECKING:  # the window imports this module
    from widgets.main_window import MainWindow

Start = Callable[[EngineChoice, RerunPlan], RerunFeed]
COMPLETE = "\0complete"  # a rerun whose pairs were shown


class Reruns(QObject):
    """See the module docstring. `start` None: this window has no engine to re-run with (the
    actions are off)."""

    def __init__(self, window: MainWindow, start: Start | None, packs: Sequence[str]) -> None:
        super().__init__(window)
        self.window = window
        self._start = start
        self.packs = list(packs)
        self.models: list[str] = []  # serving several models: the ids (app/gui_catalog.py)
        self.feeds: list[RerunFeed] = []
        self._said: dict[int, str] = {}  # what the status bar last said of each rerun
        self.dialog: RerunDialog | None = None
        menu = window.menuBar().addMenu("&Request")
        self.action = menu.addAction("&Re-run on…")
        self.action.setShortcut("Ctrl+R")
        self.action.setToolTip("Send the selected request, or its whole recording, again to "
                               "another model, pack or upstream")
        self.action.setEnabled(start is not None)
        self.action.triggered.connect(self.ask)
        self.original_action = menu.addAction("&Compare with its original")
        self.original_action.setToolTip("A re-run request against the request it re-ran")
        self.original_action.triggered.connect(lambda: self.compare_with_original())
        self.stop_action = menu.addAction("&Stop re-runs")
        self.stop_action.setToolTip("Cancel the request each rerun has in flight, and stop")
        self.stop_action.triggered.connect(self.stop)

    # -- starting --------------------------------------------------------------------------

    def recording_of(self, track: Track) -> Path | None:
        """The open recording a played track came from (its home; a track without one names
        it by file name)."""
        if track.origin in ("", "live"):
            return None
        if track.home is not None:
            return track.home.path
        return next((p for p in reversed(self.window.recordings) if p.name == track.origin),
                    None)

    def ask(self) -> RerunDialog | None:
        """The dialog for the selected request (window-modal); the rerun starts when it is
        accepted."""
        track = self.window.log.current
        if self._start is None:
            self.window.say("This window has no engine to re-run with", error=True)
            return None
        if track is None:
            self.window.say("Select a request in the list first", error=True)
            return None
        recording, path = None, self.recording_of(track)
        if path is not None:
            try:
                recording = (path.name, len(RerunPlan.of_recording(path).requests))
            except (OSError, ValueError):
                path = None  # a text output, or gone since: the request alone
        if self.dialog is not None:
            self.dialog.deleteLater()  # the last one asked: done with
        dialog = RerunDialog(track.id, recording, self.packs, self.window,
                             models=self.models, alone=track.request is not None)
        dialog.accepted.connect(lambda: self._accepted(dialog, track, path))
        self.dialog = dialog
        dialog.open()
        return dialog

    def _accepted(self, dialog: RerunDialog, track: Track, path: Path | None) -> None:
        try:
            choice = dialog.choice()
            whole = dialog.whole_recording() and path is not None
            plan = RerunPlan.of_recording(path) if whole else RerunPlan.of_track(track)
        except (OSError, ValueError) as e:
            self.window.say(f"Cannot re-run: {e}", error=True)
            return
        self.start(choice, plan)

    def start(self, choice: EngineChoice, plan: RerunPlan) -> RerunFeed | None:
        """Start a rerun (off this thread) and poll its feed from now on."""
        if self._start is None:
            self.window.say("This window has no engine to re-run with", error=True)
            return None
        feed = self._start(choice, plan)
        self.feeds.append(feed)
        self.window.sources.append(feed)
        self.window.say(feed.message)
        return feed

    def stop(self) -> None:
        for feed in self.feeds:
            if not feed.finished:
                feed.cancel()

    # -- following -------------------------------------------------------------------------

    def watch(self) -> None:
        """Frame timer: each rerun's progress in the status bar; a finished one leaves its
        pairs in the Compare tab (the tab is not brought forward: the user may be reading)."""
        for feed in self.feeds:
            said = self._said.get(id(feed))
            if said == COMPLETE:
                continue
            if feed.complete:
                self._said[id(feed)] = COMPLETE
                found = feed.pairs()
                if found:
                    self.window.compare.show_pairs(found)
                note = f"; the Compare tab holds {len(found)} pair(s)" if found else ""
                self.window.say(feed.message + note, error=feed.error is not None)
            elif feed.message != said:
                self._said[id(feed)] = feed.message
                self.window.say(feed.message, error=feed.error is not None)

    # -- comparing -------------------------------------------------------------------------

    def original_of(self, track: Track) -> Side | None:
        """The compare side of the request `track` re-ran: from the rerun that made it, else
        the original's own row (a rerun recording opened beside its original), read back
        from its recording if the window let it go."""
        for feed in self.feeds:
            side = feed.original(track)
            if side is not None:
                return side
        original = self.window.store.get(track.counterpart) if track.counterpart else None
        if original is None or original is track:
            return None
        side = side_of_track(original, f"was:{original.id}")
        return side if side.tokens or not original.released else None

    def side_of(self, track: Track) -> Side:
        """A re-run request as a compare side, as its rerun's pairs read it."""
        for feed in self.feeds:
            if track in feed.tracks:
                return feed.side(track)
        return side_of_track(track, f"now:{track.id}")

    def compare_with_original(self, track: Track | None = None) -> bool:
        """A re-run request against the one it re-ran, in the Compare tab."""
        track = track or self.window.log.current
        if track is None or not track.counterpart:
            self.window.say("Select a re-run request (Source: rerun) first", error=True)
            return False
        original = self.original_of(track)
        if original is None:
            self.window.say(f"{track.id} re-ran {track.counterpart}, which the window no "
                            "longer holds: open its recording", error=True)
            return False
        self.window.compare.show_pairs([compare(original, self.side_of(track))])
        self.window.tabs.setCurrentWidget(self.window.compare)
        return True

    def close(self) -> None:
        for feed in self.feeds:
            feed.close()
