"""Following one track across frames: the show-from-scratch / draw-what-is-new split.

Owns `TrackFollower`, a mixin for the views that render a track incrementally. `show_track`
remembers the track and its `generation`, calls the view's `_reset()` hook, then `sync()`s;
`sync` redraws from scratch when the track's events restarted (its generation moved on), and
otherwise calls the view's `_draw_new(track)` hook to draw only what arrived since the last
frame. GUI thread only; reads tracks, never writes them.

Also owns `follow_target`, the request list's *Follow newest* rule: which row the window
shows while following.
"""

from __future__ import annotations

from collections.abc import Iterable

from inspector.tracks import Track

FOLLOW_SCAN = 64  # rows looked at, newest first: the queue and the slots, with room to spare


def follow_target(rows: Iterable[Track | None]) -> Track | None:
    """The row *Follow newest* shows, from rows newest first: the newest one generating; when
    none is, the newest that has started at all (done, cancelled, failed). Queued rows are
    passed over: their panes are empty until a slot takes them. None: only queued rows."""
    fallback = None
    for i, track in enumerate(rows):
        if track is None or i >= FOLLOW_SCAN:
            break
        if track.status == "generating":
            return track
        if track.status != "queued" and fallback is None:
            fallback = track
    return fallback


class TrackFollower:
    """Mixin: subclasses implement `_reset()` (forget what was drawn) and `_draw_new(track)`."""

    track: Track | None = None  # the track being shown
    _gen = -1  # the track's generation when it was last drawn from scratch

    def show_track(self, track: Track | None) -> None:
        """Draw a track from scratch (selection changed, or its events restarted)."""
        self.track = track
        self._gen = -1
        self._reset()
        if track is not None:
            self._gen = track.generation
            self.sync()

    def sync(self) -> None:
        """Draw what arrived since the last call; start over if the track restarted."""
        track = self.track
        if track is None:
            return
        if track.generation != self._gen:
            self.show_track(track)
            return
        self._draw_new(track)

    def _reset(self) -> None:
        raise NotImplementedError

    def _draw_new(self, track: Track) -> None:
        raise NotImplementedError
