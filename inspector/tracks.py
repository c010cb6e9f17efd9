"""The inspector's Qt-free model: one `Track` per request, a bounded `TrackStore`, a `LiveFeed`.

A `Track` is a request as the window shows it: where it came from, its prompt, the tokens and
parser events received so far, its parser state and its summary figures. Live requests (from
the server or the compose box) are filled by `LiveFeed` from the service's `RunUpdate`s;
recordings are filled by `inspector.playback.Playback`, which runs its own parser per request
(through the same per-token pipeline as the service). The views in `widgets/` only read
tracks, so they cannot tell the two apart. Both fillers are a `TrackSource` to the window.
See docs/design.md, section 7 "The window".

Threads: `LiveFeed._on_update` runs on the engine thread (or the thread that submitted) and
only appends to a deque; everything else here runs on the GUI thread, inside the frame timer
(`LiveFeed.poll`). No Qt, so it is tested and benchmarked without a window.

Memory is bounded on purpose: the store keeps at most `max_rows` tracks, and only the newest
`max_documents` of them keep their documents (tokens, events, prompt); older ones keep their
summary row, marked released. The recording is the window's memory: a released track that
knows where its request was recorded (`Track.home`) gets its document back when it is selected
(`TrackStore.protected`), read from the file with one seek (inspector/recall.py), and is let go
again once it is no longer looked at. The held-back tail is not copied from the parser: the
events' spans tile the output, so the held text is exactly the raw output past the last event.

Tracks are keyed by where they came from and their id (`Track.key`): a request id is unique per
source only, and a recording of the window's own session holds the very ids its live rows have.

How a track's output is read is its `reading` (engine/parse/reading.py): the live run's, or the
one its recording stored. Playback, re-parse and fixture export all read the output from it, so
re-parsing "as shown" gives what the window showed (one call per reply included).
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from engine.backends.base import PrefixMatch, Timings, Token
from engine.chat.request import STREAM_TOOLS, ChatRequest
from engine.metrics import Metrics
from engine.parse.events import (
    ANOMALY,
    ANOMALY_KINDS,
    SPECIAL_TOKEN_IN_CONTENT,
    Event,
    ParseResult,
    result_of,
)
from engine.parse.reading import Reading
from engine.pipeline import TokenPipeline
from engine.record.index import Home, index_of
from engine.service import Run, RunUpdate, Service
from inspector.recall import reload

FIXTURE_FORMAT = "prism-fixture"


def _default_reading() -> Reading:
    return Reading(stream_tools=STREAM_TOOLS)  # a request's default, not the bare parser's


class _Part:
    """A `Track` attribute that is one field of its reading: `track.family` reads
    `track.reading.family`, and setting it (or passing it to `Track(...)`) gives the track a
    reading with that field changed. The views and tests read and set these by their old names;
    the reading stays the one truth. A dataclass field whose default is this descriptor
    (dataclasses' "descriptor-typed fields"): its default, None, keeps the reading's."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, track: Track | None, owner: type | None = None):
        if track is None:
            return None  # the field's default: take the reading's own
        return getattr(track.reading, self.name)

    def __set__(self, track: Track, value) -> None:
        if value is not None:
            track.reading = dataclasses.replace(track.reading, **{self.name: value})


@dataclass(eq=False)
class Track:
    """One request as the inspector sees it. Mutated on the GUI thread only.

    `generation` changes whenever the events restart (a playback seek backwards), so a view
    that rendered an older generation redraws from scratch; `version` changes on every update,
    so the request log knows which rows to refresh.
    """

    id: str
    source: str = "openai"  # openai | anthropic | responses | gui | replay
    model: str = ""
    prompt: str = ""
    prompt_tokens: int = 0
    # How its output is read (before the parts below, which __init__ sets through it).
    reading: Reading = field(default_factory=_default_reading)
    start_state: str = _Part("start")  # descriptor fields (see _Part)
    family: str = _Part("family")  # the parser's family (qwen-xml, hermes-json, auto...)
    tools: tuple = _Part("tools")
    stream_tools: bool = _Part("stream_tools")
    request: ChatRequest | dict | None = None  # the live request, or its recorded dict
    metrics: Metrics | None = None  # where its chart points go (the live or playback ones)
    origin: str = ""  # "live", or the recording it was played from
    home: Home | None = None  # where it was recorded: its document is read back from there
    counterpart: str = ""  # a rerun's request: the id of the request it re-ran (its original)
    created: float = field(default_factory=time.time)
    submitted: float = field(default_factory=time.perf_counter)
    tokens: list[Token] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    state: str = ""  # the parser state: reasoning | content | call
    status: str = "queued"  # queued | generating | done | cancelled | error
    # The engine's parallel sequence serving it (-1: not in one yet, or an engine without
    # slots): set live while it runs, then the one its finished timings name.
    slot: int = -1
    finish_reason: str | None = None
    error: str | None = None
    timings: Timings | None = None
    # Where its prompt left the best cached prefix (issue 20): the engine's, at its finish, or
    # the recording's, from the start of its playback (it describes the prompt, not the output).
    prefix: PrefixMatch | None = None
    result: ParseResult | None = None
    recorded_result: dict | None = None  # what the recording said, for re-parse diffs
    # Special tokens that came from message content, (start, end) in `prompt`; escaped: they
    # were tokenized as text (--escape-special), so they are not an anomaly (engine/chat/special.py)
    content_specials: tuple[tuple[int, int], ...] = ()
    special_escaped: bool = False
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALY_KINDS, 0))
    notes: tuple[str, ...] = ()  # about the request itself: Run.notes ("tools_ignored")
    released: bool = False
    generation: int = 0
    version: int = 0
    _raw: str = ""
    _raw_n: int = 0  # tokens already joined into _raw
    _events_end: int = 0  # raw offset where the last event ended

    def __post_init__(self) -> None:
        self.state = self.state or self.start_state
        self._count_prompt()

    def _count_prompt(self) -> None:
        """The prompt's own anomaly, which no output event carries."""
        if self.content_specials and not self.special_escaped:
            self.anomalies[SPECIAL_TOKEN_IN_CONTENT] = 1

    # -- reading ---------------------------------------------------------------------------

    @property
    def key(self) -> tuple[str, str]:
        """What names it among all the window holds: its source and its id there."""
        return (self.origin, self.id)

    @property
    def raw(self) -> str:
        """The model's output so far (the tokens' texts joined), joined lazily."""
        if self._raw_n < len(self.tokens):
            self._raw += "".join(t.text for t in self.tokens[self._raw_n :])
            self._raw_n = len(self.tokens)
        return self._raw

    @property
    def held(self) -> str:
        """Text the parser holds back: received, not yet decided."""
        return self.raw[self._events_end :] if self.status != "done" else ""

    @property
    def output_tokens(self) -> int:
        if self.timings is not None and self.timings.output_tokens:
            return self.timings.output_tokens
        return len(self.tokens) if not self.released else 0

    @property
    def ttft_ms(self) -> float | None:
        if self.timings is not None and self.timings.ttft_ms:
            return self.timings.ttft_ms
        if self.tokens:
            return max(0.0, (self.tokens[0].t - self.submitted) * 1000.0)
        return None

    @property
    def tokens_per_s(self) -> float | None:
        if self.timings is not None and self.timings.tokens_per_s:
            return self.timings.tokens_per_s
        if len(self.tokens) >= 2:
            span = self.tokens[-1].t - self.tokens[0].t
            return (len(self.tokens) - 1) / span if span > 0 else None
        return None

    @property
    def in_prompt(self) -> bool:
        """In a slot, its prompt being read: no longer waiting, no token yet."""
        return self.status == "queued" and self.slot >= 0

    @property
    def anomaly_total(self) -> int:
        return sum(self.anomalies.values())

    # -- writing (GUI thread) --------------------------------------------------------------

    def add_tokens(self, toks: Iterable[Token]) -> None:
        if self.released:
            return
        self.tokens.extend(toks)
        if self.status == "queued":
            self.status = "generating"
        self.version += 1

    def add_events(self, evs: Iterable[Event]) -> None:
        if self.released:
            return
        for ev in evs:
            self.events.append(ev)
            self._events_end = ev.span[1]
            if ev.kind == ANOMALY and ev.anomaly:
                self.anomalies[ev.anomaly] = self.anomalies.get(ev.anomaly, 0) + 1
        self.version += 1

    def finish(self, reason: str, timings: Timings | None = None, error: str | None = None,
               result: ParseResult | None = None) -> None:
        self.timings = timings
        if timings is not None and timings.slot >= 0:
            self.slot = timings.slot
        self.error = error
        self.result = result if result is not None else result_of(self.events, reason)
        self.finish_reason = self.result.finish_reason if reason in ("stop", "length") else reason
        self.status = {"cancelled": "cancelled", "error": "error"}.get(reason, "done")
        self.version += 1

    def restart(self) -> None:
        """Forget the output (a playback seek backwards); the views redraw from nothing."""
        self.tokens, self.events = [], []
        self._raw, self._raw_n, self._events_end = "", 0, 0
        self.anomalies = dict.fromkeys(ANOMALY_KINDS, 0)
        self._count_prompt()
        self.state, self.status, self.slot = self.start_state, "queued", -1
        self.finish_reason = self.error = self.timings = self.result = None
        self.generation += 1
        self.version += 1

    def release(self) -> None:
        """Drop the document (tokens, events, prompt), keep the summary row."""
        self.raw  # noqa: B018 - nothing to keep; reading settles the join before dropping it
        self.tokens, self.events, self.prompt = [], [], ""
        self._raw, self._raw_n = "", 0
        # The result holds the whole reasoning and content again: the row needs only the
        # finish reason and the anomaly counts, which are kept apart.
        self.request = self.result = self.recorded_result = None
        self.released = True
        self.generation += 1
        self.version += 1

    # -- re-parsing and fixtures -------------------------------------------------------------

    def reparse(self, reading: Reading | None = None, *, start: str | None = None,
                family: str | None = None,
                stream_tools: bool | None = None) -> tuple[list[Event], ParseResult]:
        """Run this output through a fresh parser and the reading's filters, token by token as
        it arrived: read as `reading` says (default: the track's own, so as it was shown),
        with `start`, `family` or `stream_tools` changed where given."""
        reading = self.reading if reading is None else reading
        changes = {"start": start, "family": family, "stream_tools": stream_tools}
        reading = dataclasses.replace(reading, **{k: v for k, v in changes.items()
                                                  if v is not None})
        # Call ids must not differ between two parses of one output; a re-parse reports
        # nowhere, it is not a request.
        pipe = TokenPipeline(self.id, reading.parser(id_prefix="fixture"),
                             filters=reading.filters())
        evs: list[Event] = []
        for tok in self.tokens:
            evs += pipe.feed(tok)
        evs += pipe.finish()
        reason = self.finish_reason if self.finish_reason in ("stop", "length") else "stop"
        return evs, result_of(evs, reason)

    def fixture(self) -> dict:
        """This request as a parser test fixture: the raw output, its chunking, how it was read
        (`parser`: its `Reading.to_dict()`, filters included) and the result that gives (call
        ids fixed, so it is stable)."""
        _, result = self.reparse()
        return {
            "format": FIXTURE_FORMAT,
            "version": 1,
            "id": self.id,
            "source": self.source,
            "model": self.model,
            "parser": self.reading.to_dict(),
            "raw": self.raw,
            "chunks": [t.text for t in self.tokens],
            "expected": result.to_dict(),
        }


class TrackStore:
    """Every request the window knows, oldest first, bounded (see the module docstring)."""

    def __init__(self, max_rows: int = 1000, max_documents: int = 32) -> None:
        self.max_rows = max_rows
        self.max_documents = max_documents
        self._tracks: OrderedDict[tuple[str, str], Track] = OrderedDict()
        self._docs: deque[Track] = deque()  # tracks holding a document, oldest first
        self._protected: Track | None = None

    @property
    def protected(self) -> Track | None:
        """The track looked at (the selected one): it keeps its document."""
        return self._protected

    @protected.setter
    def protected(self, track: Track | None) -> None:
        """Select a track: a released one reads its document back from its recording (the
        window sets this before it draws the track), and counts among the documents held."""
        self._protected = track
        if track is not None and track.released and track.home is not None and reload(track):
            self._docs.append(track)
            self._release_old()

    def __len__(self) -> int:
        return len(self._tracks)

    def __iter__(self) -> Iterator[Track]:
        return iter(self._tracks.values())

    def get(self, id: str, origin: str | None = None) -> Track | None:
        """The track with this id from `origin`; without one, the newest with this id."""
        if origin is not None:
            return self._tracks.get((origin, id))
        return next((t for t in reversed(self._tracks.values()) if t.id == id), None)

    def newest(self) -> Track | None:
        return next(reversed(self._tracks.values()), None)

    def add(self, track: Track) -> list[Track]:
        """Add a track; returns the tracks dropped from the list to make room."""
        self._tracks[track.key] = track
        self._docs.append(track)
        self._release_old()
        dropped = []
        while len(self._tracks) > self.max_rows:
            _, old = self._tracks.popitem(last=False)
            old.release()
            dropped.append(old)
        return dropped

    def _release_old(self) -> None:
        keep: list[Track] = []
        while len(self._docs) > self.max_documents:
            old = self._docs.popleft()
            if old is self._protected or old.status in ("queued", "generating"):
                keep.append(old)  # still in use: looked at, or still being written
                continue
            old.release()
        self._docs.extendleft(reversed(keep))


class TrackSource(Protocol):
    """What the window polls on its frame timer: the live feed and the playback are both one.
    `metrics` is where their tracks' chart points go."""

    @property
    def metrics(self) -> Metrics | None: ...

    def poll(self, now: float | None = None) -> list[Track]: ...

    def sample(self) -> None: ...


class _Attached:
    """A service the feed listens to: its name for the Model column, where it records, and
    the listener to take off it again."""

    def __init__(self, feed: LiveFeed, service: Service, name: str) -> None:
        self.service, self.name = service, name
        # Where the service records: each track's home, indexed as it is written.
        rec = getattr(service, "recorder", None)
        self.recording = None if rec is None else index_of(rec.path, rec.offsets).path
        self.listener = lambda upd: feed._on_update(upd, self)


class LiveFeed:
    """Carries services' run updates to tracks: enqueue on the engine thread, apply on the
    GUI thread's frame timer, never one Qt signal per token. One service (`service`), or,
    serving several models, each model's as it loads (`add_service`, named by its id: the
    Model column; called on the catalog's loader thread before the model takes a request, so
    no run is missed) until it unloads (`remove_service`); `service` is then None, and so are
    `metrics` (each track has its model's). `wanted(run)`, when set, picks the runs to show
    (a rerun on a service others use); `claim` leaves a run to another feed."""

    def __init__(self, service: Service | None, store: TrackStore) -> None:
        self.service = service
        self.store = store
        self._queue: deque[tuple[RunUpdate, str, _Attached]] = deque()
        # Live runs and their tracks by id, until they finish. A run waiting for a slot gets
        # one with no update (the engine sets `job.slot` when it takes the job), so each frame
        # looks at the runs still live.
        self._live: dict[str, tuple[Run, Track]] = {}
        self._attached: list[_Attached] = []
        # Requests another feed shows (a rerun on one of these services), by identity.
        self._claimed: set[int] = set()
        self.wanted: Callable[[Run], bool] | None = None
        if service is not None:
            self.add_service(service)

    def add_service(self, service: Service, name: str = "") -> None:
        """Listen to this service too: its runs become tracks here. Any thread (the GUI
        thread reads the list of services only by copying it)."""
        if any(a.service is service for a in self._attached):
            return
        att = _Attached(self, service, name)
        self._attached.append(att)
        service.add_listener(att.listener)

    def remove_service(self, service: Service) -> None:
        """Stop listening to this service (any thread); its updates queued still apply."""
        for att in [a for a in self._attached if a.service is service]:
            if att in self._attached:  # not taken off by another thread meanwhile
                self._attached.remove(att)
                service.remove_listener(att.listener)

    @property
    def services(self) -> list[Service]:
        return [a.service for a in list(self._attached)]

    def claim(self, request: ChatRequest) -> None:
        """The run of this request is shown by another feed (any thread, before it is
        submitted): this one skips its updates."""
        self._claimed.add(id(request))

    def close(self) -> None:
        for att in list(self._attached):
            self.remove_service(att.service)

    @property
    def metrics(self) -> Metrics | None:
        """The one service's metrics (serving several models: None, each track has its
        model's)."""
        return self.service.metrics if self.service is not None else None

    @property
    def busy(self) -> bool:
        """Updates wait to be applied, or a run has not finished (GUI thread)."""
        return bool(self._queue or self._live)

    def sample(self) -> None:
        """A chart point now (the charts' timer calls it, so they scroll while idle)."""
        if self.metrics is not None:
            self.metrics.sample()

    def _on_update(self, upd: RunUpdate, att: _Attached) -> None:
        # Engine thread: deque.append is atomic, and the parser's state is read here because
        # this is the one moment it is consistent with the update's events.
        if id(upd.run.request) in self._claimed:
            if upd.kind in ("finish", "refused"):
                self._claimed.discard(id(upd.run.request))
            return
        if self.wanted is not None and not self.wanted(upd.run):
            return
        self._queue.append((upd, upd.run.parser.state, att))

    def poll(self, now: float | None = None) -> list[Track]:
        """Apply everything queued; returns the tracks that changed (GUI thread)."""
        touched: dict[str, Track] = {}
        q = self._queue
        while q:
            upd, state, att = q.popleft()
            run = upd.run
            live = self._live.get(run.id)
            if upd.kind == "start" or live is None:
                live = self._live[run.id] = (run, self._new_track(run, att))
                self.store.add(live[1])
            track = live[1]
            if upd.token is not None:
                track.add_tokens((upd.token,))
            if upd.events:
                track.add_events(upd.events)
            track.state = state
            # A request the template refused arrives finished: its one update ends it.
            if upd.kind in ("finish", "refused"):
                fin = run.finish
                track.finish(fin.reason if fin else "stop", fin.timings if fin else None,
                             fin.error if fin else None, run.result)
                track.prefix = fin.prefix if fin else None
                track.finish_reason = run.finish_reason if run.result else track.finish_reason
                del self._live[run.id]
            touched[track.id] = track
        for run, track in self._live.values():
            slot = run.job.slot if run.job is not None else -1
            if slot != track.slot:
                track.slot = slot  # granted a slot since the last frame
                track.version += 1
                touched[track.id] = track
        return list(touched.values())

    def _new_track(self, run: Run, att: _Attached) -> Track:
        req = run.request
        return Track(
            id=run.id,
            source=req.api,
            # Serving several models: the one that served it (a request may name an alias).
            model=att.name or req.model or att.service.engine.name,
            prompt=run.prompt,
            prompt_tokens=run.prompt_tokens,
            reading=run.reading,
            request=req,
            metrics=att.service.metrics,
            origin="live",
            home=None if att.recording is None else Home(att.recording, run.id),
            content_specials=run.marks.specials,
            special_escaped=run.marks.escaped,
            notes=run.notes,
            submitted=run.job.submitted_at if run.job and run.job.submitted_at
            else time.perf_counter(),
        )
