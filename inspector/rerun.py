"""A rerun in the window: requests sent again to another engine, each in a track of its own,
linked to its original. Qt-free.

Owns `EngineChoice` (which engine, as `prism rerun` names it: a GGUF file, a built-in pack, an
upstream URL; or, in a window serving several models, one of its models), `RerunPlan`
(what is sent: one request from the list, or a whole recording, and each original as a
compare side), `side_of_track` (a request the window holds as a compare
`Side`) and `RerunFeed`, the `TrackSource` one rerun's requests stream through. The rerun itself
is `prism rerun`'s loop (app/rerun.py), run by app/gui.py on a thread of its own; the window
(widgets/main_window.py) asks for it from its *Re-run on…* action and polls the feed like the
live one.

Threads: the feed is made on the GUI thread, which alone polls it. The rerun's thread calls
`attach` (once the other engine's service is built: a model loads, an upstream is asked), then
per request `expect` (before sending it) and `sent`, and `say`, `done` or `fail`; each of these
only assigns an attribute or a dict entry. A run's updates reach the feed through its
`LiveFeed`'s deque, on the engine thread, as every live request's do. `cancel` (GUI thread)
asks the loop to stop and cancels the request in flight.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from engine.chat.request import ChatRequest
from engine.metrics import Metrics
from engine.record.compare import Comparison, Side, compare, side_of
from engine.record.reader import is_recording, load_recording
from engine.record.recording import RecordedRequest, request_to_dict
from engine.service import Run, Service
from inspector.recall import recorded, recorded_side
from inspector.tracks import LiveFeed, Track, TrackStore

# `prism rerun`'s --model, --pack, --upstream; and a model of the window's own catalog.
KINDS = ("model", "pack", "upstream", "catalog")
SOURCE = "rerun"  # the Source column of a rerun's requests


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine a rerun goes to. kind: "model" (value: a GGUF file), "pack" (a built-in
    pack's name), "upstream" (a server's OpenAI base URL) or "catalog" (the id of a model the
    window serves: no engine of its own is built); `max_tokens` caps each reply (a
    recorded request that asked for fewer keeps its own); `n_ctx` sets the context (None: as
    `prism rerun` picks it)."""

    kind: str
    value: str
    max_tokens: int | None = None
    n_ctx: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"an engine is one of {', '.join(KINDS)}, not {self.kind!r}")
        if not self.value.strip():
            raise ValueError(f"say which {self.kind} to re-run on")

    def argv(self) -> list[str]:
        """The `prism rerun` options that name this engine (a catalog's model has none: it
        is the window's own)."""
        if self.kind == "catalog":
            raise ValueError(f"the model {self.value!r} is the window's: no engine to build")
        out = [f"--{self.kind}", self.value]
        if self.max_tokens:
            out += ["--max-tokens", str(self.max_tokens)]
        if self.n_ctx:
            out += ["--n-ctx", str(self.n_ctx)]
        return out

    def describe(self) -> str:
        name = Path(self.value).name if self.kind == "model" else self.value
        return f"{self.kind} {name}"


def side_of_track(track: Track, label: str = "") -> Side:
    """A request from the request list as a compare side: its tokens and its parse (the
    recorded one while a played request has not finished). A row whose document was let go is
    read from its recording, as File → Compare recordings reads it."""
    if track.released:
        side = recorded_side(track, label)
        if side is not None:
            return side
    if track.result is not None:
        result = track.result.to_dict()
    else:
        result = dict(track.recorded_result or {})
    return Side(label=label or track.id, tokens=tuple(track.tokens), result=result,
                finish=track.finish_reason or track.status, error=track.error, id=track.id)


@dataclass(frozen=True, slots=True)
class RerunPlan:
    """What a rerun sends: `requests` as recorded (a live request as the record it would
    have), each one's original as a compare side by its id, and the recording re-run whole
    (`rerun_of`, "" for a request picked from the list). `label` names it in the window."""

    requests: tuple[RecordedRequest, ...]
    originals: dict[str, Side] = field(default_factory=dict)
    rerun_of: str = ""
    label: str = ""

    @classmethod
    def of_track(cls, track: Track) -> RerunPlan:
        """The request a track shows, live or played; ValueError when it holds none (a plain
        text output, or a row let go whose recording no longer holds it)."""
        request, prompt = track.request, track.prompt
        if track.released and track.home is not None:  # let go: as its recording has it
            held = recorded(track.home)
            if held is not None:
                request, prompt = held.request or None, held.prompt
        if request is None:
            raise ValueError(f"{track.id} holds no request to send again (a model output "
                             "from a text file, or a row let go whose recording is gone)")
        rec = RecordedRequest(id=track.id, request=request_to_dict(request),
                              prompt=prompt, reading=track.reading, api=track.source)
        return cls((rec,), {track.id: side_of_track(track, f"was:{track.id}")},
                   label=track.id)

    @classmethod
    def of_recording(cls, path: str | Path) -> RerunPlan:
        """Every request of a recording (a damaged one: those before the damage)."""
        if not is_recording(path):
            raise ValueError(f"{Path(path).name} is a model output, not a recording: it "
                             "holds no request to send again")
        session = load_recording(path)
        if not session.requests:
            raise ValueError(f"{Path(path).name} records no request")
        return cls(session.requests,
                   {r.id: side_of(r, f"was:{r.id}") for r in session.requests},
                   rerun_of=str(Path(path).resolve()), label=Path(path).name)


class RerunFeed:
    """One rerun's requests as tracks of their own (Source "rerun"), each linked to its
    original (`Track.counterpart`). A `TrackSource` to the window; see the module docstring
    for who calls what."""

    label = "rerun"

    def __init__(self, plan: RerunPlan, store: TrackStore, choice: EngineChoice) -> None:
        self.plan = plan
        self.store = store
        self.choice = choice
        self.message = f"re-run of {plan.label} on {choice.describe()}: starting the engine…"
        self.error: str | None = None
        self.finished = False  # the rerun's thread is done (or failed)
        self.tracks: list[Track] = []  # the rerun's tracks, in the order they arrived
        # Each run by id where no recording holds it (the window does not record): the
        # store lets old tracks' documents go, so their compare sides come from the runs. A
        # recorded rerun's are read back from its recording instead.
        self._runs: dict[str, Run] | None = None
        self.current: Run | None = None  # the request in flight
        self._feed: LiveFeed | None = None
        self._stop = threading.Event()
        # Announced requests by identity until their first update makes a track: a run keeps
        # the request it was given, so its track's `request` is that object.
        self._expected: dict[int, tuple[ChatRequest, str]] = {}
        # Every announced request by identity, held so that no other request takes its id.
        self._mine: dict[int, ChatRequest] = {}

    # -- the rerun's thread ----------------------------------------------------------------

    def attach(self, service: Service, shared: bool = False) -> None:
        """The other engine's service is built: its runs' updates come here from now on.
        `shared`: a service the window serves too (a model of its catalog): only the runs of
        the requests announced by `expect` come here."""
        self._feed = LiveFeed(service, self.store)
        if shared:
            self._feed.wanted = lambda run: id(run.request) in self._mine
        if service.recorder is None:
            self._runs = {}
        self.message = f"re-run of {self.plan.label} on {service.engine.name}"

    def expect(self, original: RecordedRequest, request: ChatRequest) -> None:
        self._mine[id(request)] = request
        self._expected[id(request)] = (request, original.id)

    def sent(self, run: Run) -> None:
        self.current = run
        if self._runs is not None:
            self._runs[run.id] = run

    def stopped(self) -> bool:
        return self._stop.is_set()

    def say(self, line: str) -> None:
        self.message = line

    def done(self, line: str) -> None:
        self.message, self.finished = line, True

    def fail(self, why: str) -> None:
        self.message = self.error = why
        self.finished = True

    # -- the GUI thread --------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop after the request in flight, which is cancelled now."""
        self._stop.set()
        run = self.current
        if run is not None:
            run.cancel()

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()

    @property
    def metrics(self) -> Metrics | None:
        return self._feed.metrics if self._feed is not None else None

    def sample(self) -> None:
        if self._feed is not None:
            self._feed.sample()

    def poll(self, now: float | None = None) -> list[Track]:
        if self._feed is None:
            return []
        changed = self._feed.poll(now)
        for track in changed:
            if not (track.counterpart or track.source == SOURCE):
                _request, original = self._expected.pop(id(track.request), (None, ""))
                track.counterpart = original
                track.source = SOURCE
                self.tracks.append(track)
        return changed

    @property
    def complete(self) -> bool:
        """The rerun's thread is done and every one of its requests has ended here."""
        return self.finished and (self._feed is None or not self._feed.busy)

    def original(self, track: Track) -> Side | None:
        """The original `track` re-ran, when it is one of this rerun's."""
        return self.plan.originals.get(track.counterpart) if track in self.tracks else None

    def side(self, track: Track) -> Side:
        """One of this rerun's tracks as a compare side (read back from its recording once
        the window let its document go)."""
        label = f"now:{track.id}"
        run = self._runs.get(track.id) if self._runs is not None else None
        if run is None or run.result is None or not track.released:
            return side_of_track(track, label)
        fin = run.finish
        return Side(label=label, tokens=tuple(run.tokens), result=run.result.to_dict(),
                    finish=track.finish_reason or track.status,
                    error=fin.error if fin else None, id=run.id)

    def pairs(self) -> list[Comparison]:
        """Each request against its original, the most changed first."""
        out = [compare(self.plan.originals[t.counterpart], self.side(t))
               for t in self.tracks if t.counterpart in self.plan.originals]
        return sorted(out, key=lambda c: -c.change)
