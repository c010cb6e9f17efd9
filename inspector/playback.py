"""Playback of recordings in the inspector: play, pause, step, speed, seek. Qt-free.

Owns `Playback`, which reads a Prism recording (or a plain text file, taken as one model
output) through the one recording loader (engine/record/recording.py) and plays its requests into
`inspector.tracks.Track`s, one token at a time, through a per-token pipeline of its own per
request (engine/pipeline.py), reading each output as its recording says it was read (the
request's `Reading`), so the window shows a recording exactly as it showed the live run. It
is driven by the GUI's frame timer (`poll(now)`) on the GUI thread; nothing here blocks or
starts a thread, which is what makes step and seek exact and testable without a window. See
docs/design.md, section 7 "The window".

Positions: a request of n tokens has positions 0..n+1; position k <= n means its first k
tokens were fed (so a tail the parser still holds can be looked at), n+1 that the parser was
finished. Seeking backwards restarts the request's track and feeds the prefix instantly (the
parser is linear, so this is cheap). Requests play back to back; within a request the recorded
token times are kept (so time to first token shows), divided by `speed` (0 = instant).

Charts: a recording's figures go to a `Metrics` of the playback's own, never the live
service's, so replaying never changes what `/metrics` reports.

Each played track knows its home (its file and id there, engine/record/index.py; the index is
built while the file opens), so a row the store let go reads its text back from the file when
it is selected (inspector/recall.py). Each opened file is a source of its own (`Track.origin`:
its name, numbered when that name is open already), so a recording of the window's own session
plays as rows of its own beside the live rows that share its request ids.

Errors say what is wrong and where, never the path (the window puts the path in front): a
damaged recording names the line (what precedes the damage plays, with `Playback.damage` saying
why the rest does not), a file that is neither a recording nor UTF-8 text says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from engine.backends.base import Finish, Timings, Token
from engine.metrics import Metrics
from engine.parse import families
from engine.pipeline import TokenPipeline
from engine.record.index import Home, index_of
from engine.record.reader import is_recording, read_session
from engine.record.recording import RecordingError
from engine.record.replay import ReplayOutput
from inspector.recall import call_ids, recorded_ids
from inspector.tracks import Track, TrackStore

log = logging.getLogger("prism")

SPEEDS = {"1×": 1.0, "10×": 10.0, "instant": 0.0}
_INSTANT_BUDGET = 50_000  # tokens fed per frame at "instant", so a huge file never freezes


@dataclass(eq=False)
class Item:
    """One recorded request and where playback is in it."""

    track: Track
    tokens: tuple[Token, ...]
    reason: str
    timings: Timings | None
    error: str | None = None
    pos: int = 0
    pipeline: TokenPipeline | None = None  # the current pass's parser and reporting
    ids: dict[int, str] | None = None  # the recorded call ids, by call index (recall.call_ids)
    added: bool = False  # shown in the request list (it has started playing once)
    reported: bool = False  # counted in the playback metrics once


def _pack_family(name: str) -> str:
    try:
        from engine.chat.packs import builtin_packs

        spec = builtin_packs().get(name)
        return spec.family if spec is not None else "auto"
    except Exception:  # a pack we cannot read: "auto" parses both families
        return "auto"


def _unreadable(e: OSError) -> OSError:
    """An OSError without the path, which the caller names."""
    return OSError(e.errno, e.strerror or str(e))


def load_items(path: Path | str, metrics: Metrics | None = None,
               origin: str | None = None) -> list[Item]:
    """The requests a file holds, as unplayed items. A recording damaged before its first
    request raises ValueError naming the line; one damaged later gives what precedes the
    damage (`load_damaged` says why). `origin`: the source its tracks name (the file's name)."""
    items, _damage = load_damaged(path, metrics, origin)
    return items


def load_damaged(path: Path | str, metrics: Metrics | None = None,
                 origin: str | None = None) -> tuple[list[Item], str | None]:
    """`load_items`, and where the recording is damaged ("line N: why"; None: it is whole)."""
    path = Path(path)
    name = origin or path.name
    try:
        recording = is_recording(path)
        text = None if recording else path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is neither a Prism recording nor UTF-8 text (a binary file?)"
                         ) from None
    except OSError as e:
        raise _unreadable(e) from None
    home = path.resolve()
    if text is not None:
        out = ReplayOutput.from_text(text, str(path))
        # The default reading: from reasoning, any family, no tools declared (a text file
        # declares nothing) and no policy.
        track = Track(id=f"{path.stem}", source="replay", model="(text file)",
                      metrics=metrics, origin=name, home=Home(home, ""))
        return [Item(track, out.tokens, "stop", None)], None
    damage = None
    try:
        session = read_session(path)
    except RecordingError as e:
        if not e.partial.requests:
            raise ValueError(str(e)) from None  # "line N: what is wrong"
        damage = str(e)
        log.warning("[prism] %s: %s; playing what precedes it", path, e)
        session = e.partial
    except OSError as e:
        raise _unreadable(e) from None
    index_of(home).scan()  # each request's offset, for reading a released row back
    pack_family = _pack_family(str(session.header.get("pack", "")))
    items = []
    for req in session.requests:
        body = req.request or {}
        # Read as recorded; files that do not name the family (or name one this version does
        # not know) fall back to the pack's.
        reading = req.reading
        if not families.known(req.family):
            reading = replace(reading, family=pack_family)
        track = Track(
            id=req.id,
            source=req.api or "replay",
            model=str(body.get("model") or session.model),
            prompt=req.prompt,
            prompt_tokens=req.timings.prompt_tokens if req.timings else 0,
            reading=reading,
            request=body,
            metrics=metrics,
            origin=name,
            home=Home(home, req.id),
            recorded_result=req.result,
            counterpart=req.counterpart,
            content_specials=req.content_specials,
            special_escaped=req.special_escaped,
            prefix=req.prefix,
        )
        reason, error = req.outcome
        items.append(Item(track, req.tokens, reason, req.timings, error))
    return items, damage


class Playback:
    """Plays loaded items into a `TrackStore`. GUI thread only; see the module docstring."""

    def __init__(self, store: TrackStore,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.store = store
        self.clock = clock
        self.metrics = Metrics()
        self.metrics.t0 = clock()  # chart x values count from the playback clock
        self.items: list[Item] = []
        self.index = 0
        self.playing = False
        self.speed = 1.0
        self._origin = 0.0  # clock time at which the current item's token times count from
        self._touched: dict[tuple[str, str], Track] = {}
        self._opened: dict[str, int] = {}  # how many times each file name was opened
        self.damage: str | None = None  # the last file opened is damaged: where, and why

    # -- loading ---------------------------------------------------------------------------

    def open(self, path: Path | str, play: bool = True) -> list[Item]:
        """Append a file's requests; playback jumps to the first of them. A file opened again
        plays as a source of its own ("name (2)")."""
        name = Path(path).name
        n = self._opened.get(name, 0) + 1
        items, damage = load_damaged(path, self.metrics, name if n == 1 else f"{name} ({n})")
        if not items:
            raise ValueError("it records no request to play")
        self._opened[name] = n
        self.damage = damage
        first = len(self.items)
        self.items.extend(items)
        self.select(first)
        if play:
            self.play()
        return items

    # -- state -----------------------------------------------------------------------------

    @property
    def current(self) -> Item | None:
        return self.items[self.index] if self.items else None

    @property
    def finished(self) -> bool:
        """Every loaded request has been played to its end."""
        return bool(self.items) and all(it.pos == len(it.tokens) + 1 for it in self.items)

    @property
    def at_end(self) -> bool:
        it = self.current
        return it is None or (self.index == len(self.items) - 1 and self._done(it))

    @staticmethod
    def _done(it: Item) -> bool:
        return it.pos > len(it.tokens)

    def item_for(self, track: Track) -> int | None:
        for i, it in enumerate(self.items):
            if it.track is track:
                return i
        return None

    # -- controls --------------------------------------------------------------------------

    def play(self) -> None:
        if self.current is None:
            return
        if self.at_end:  # play at the very end starts over, as media players do
            self.index = 0
            self.seek(0)
        self.playing = True
        self._rebase(self.clock())

    def pause(self) -> None:
        self.playing = False

    def toggle(self) -> None:
        self.pause() if self.playing else self.play()

    def set_speed(self, speed: float) -> None:
        self.speed = max(0.0, float(speed))
        if self.playing:
            self._rebase(self.clock())

    def step(self, n: int = 1) -> None:
        """Pause and advance n positions (the last position finishes the request; stepping on
        from there goes to the next request)."""
        self.playing = False
        for _ in range(n):
            it = self.current
            if it is None:
                return
            if self._done(it):
                if self.index + 1 >= len(self.items):
                    return
                self.select(self.index + 1)
                it = self.current
            self._advance(it, 1)

    def select(self, index: int) -> None:
        """Make request `index` current (as it is: seek to replay it)."""
        if not 0 <= index < len(self.items):
            raise IndexError(index)
        self.index = index
        self._show(self.items[index])
        self._rebase(self.clock())

    def seek(self, pos: int) -> None:
        """Move the current request to position `pos` (see the module docstring)."""
        it = self.current
        if it is None:
            return
        pos = max(0, min(pos, len(it.tokens) + 1))
        if pos < it.pos:
            it.track.restart()
            it.pos, it.pipeline = 0, None
            self._touch(it.track)
        self._advance(it, pos - it.pos)
        self._rebase(self.clock())

    # -- the frame timer -------------------------------------------------------------------

    def sample(self) -> None:
        """A chart point now, so the playback's charts scroll (and fall to 0) while idle."""
        self.metrics.sample(t=self.clock())

    def poll(self, now: float | None = None) -> list[Track]:
        """Feed every token that is due by `now`; returns the tracks that changed."""
        now = self.clock() if now is None else now
        if self.playing and self.items:
            budget = _INSTANT_BUDGET
            while budget > 0 and self.playing:
                it = self.items[self.index]
                if self._done(it):
                    if self.index + 1 >= len(self.items):
                        self.playing = False
                        break
                    self.index += 1
                    it = self.items[self.index]
                    self._show(it)
                    if self._done(it) or it.pos:
                        it.track.restart()
                        it.pos, it.pipeline = 0, None
                    self._origin = now
                    continue
                due = self._due(it, now)
                if due <= 0:
                    break
                budget -= self._advance(it, min(due, budget))
        touched, self._touched = list(self._touched.values()), {}
        return touched

    # -- internals -------------------------------------------------------------------------

    def _due(self, it: Item, now: float) -> int:
        """How many positions of `it` are due at `now`."""
        n = len(it.tokens)
        if self.speed <= 0:
            return n + 1 - it.pos
        k = it.pos
        limit = (now - self._origin) * self.speed
        while k < n and it.tokens[k].t <= limit:
            k += 1
        if k == n and it.pos <= n and (n == 0 or it.tokens[-1].t <= limit):
            k = n + 1  # the finish comes with the last token
        return k - it.pos

    def _rebase(self, now: float) -> None:
        """Keep the current item's pace from here: its next token is due as recorded after
        the last one fed."""
        it = self.current
        if it is None:
            return
        if self.speed > 0:
            last = it.tokens[it.pos - 1].t if 0 < it.pos <= len(it.tokens) else 0.0
            self._origin = now - last / self.speed
        else:
            self._origin = now

    def _show(self, it: Item) -> None:
        if not it.added:
            it.added = True
            it.track.created = time.time()
            self.store.add(it.track)
        self._touch(it.track)

    def _touch(self, track: Track) -> None:
        self._touched[track.key] = track

    def _advance(self, it: Item, n: int) -> int:
        """Feed up to n positions of `it` at once; returns how many were fed."""
        if n <= 0:
            return 0
        self._show(it)
        track = it.track
        if it.pipeline is None:
            # Read as the track's reading says: the recorded request's, as the live run read it.
            reading = track.reading
            # A request is counted in the charts the first time it plays to its end only:
            # playing it again (a seek, a replay) must not count it twice.
            it.pipeline = TokenPipeline(track.id, reading.parser(), clock=self.clock,
                                        metrics=None if it.reported else self.metrics,
                                        filters=reading.filters(), tools=reading.tools)
            track.submitted = self.clock()
            if it.ids is None:
                it.ids = call_ids(track.recorded_result)
            it.pipeline.start(track.source, track.model, track.prompt_tokens, t=track.submitted)
        pipe = it.pipeline
        ntok = len(it.tokens)
        end = min(it.pos + n, ntok)
        fed = end - it.pos
        if fed > 0:
            now = self.clock()
            toks = it.tokens[it.pos : end]
            speed, evs = self.speed, []
            for tok in toks:
                # Charts get each token's due time, not the frame's: a frame feeds several
                # tokens at once, and equal times would read as a burst.
                due = self._origin + tok.t / speed if speed > 0 else now
                evs += pipe.feed(tok, t=min(due, now))
            evs = recorded_ids(evs, it.ids)
            # Token times are re-based on the playback clock, so TTFT and tokens/s in the
            # request list describe what is on screen.
            base = track.submitted
            # (Every other field as recorded: top-k, the guard's mark.)
            track.add_tokens(replace(t, t=base + t.t) for t in toks)
            track.add_events(evs)
            track.state = pipe.state
            it.pos = end
        if it.pos == ntok and n > fed:
            evs = recorded_ids(pipe.finish(), it.ids)
            track.add_events(evs)
            track.state = pipe.state
            track.finish(it.reason, it.timings, it.error)
            fin = Finish(it.reason, it.timings or Timings(output_tokens=ntok), it.error)
            pipe.finished(fin, track.result, finish_reason=track.finish_reason or it.reason)
            it.reported = True
            it.pos = ntok + 1
            fed += 1
        self._touch(track)
        return fed
