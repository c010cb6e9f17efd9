"""Event filters: what a request's policy makes of the parser's events, after the parser.

Owns the one filter protocol (`EventFilter`), `Chain` (filters composed in order) and
`through` (a whole event list through fresh filters), and the two filters a request's reading
implies (engine/parse/reading.py): `FirstCallOnly`, one call per reply, applied to the run's own
events by the token pipeline (engine/pipeline.py); and `CallsAsText`, what a client that
declared no tools is answered from (app/api/runs.py), applied to its reply only. The parser
knows no request policy on purpose: it says what the model wrote, a filter says what the
request lets through, so a filter never changes what the parser found, only what is delivered.

A filter is fed the events in order, a list at a time (what one `OutputParser.feed` returned),
and `finish()` once at the end of output; feeding an empty list gives an empty list. One
instance per reply. Pure Python, no I/O, not thread-safe: a filter runs on the thread that
feeds its parser (the engine thread live, the GUI thread in playback and re-parse, the asyncio
loop for a client's reply).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from engine.parse.events import (
    ANOMALY,
    CONTENT,
    EXTRA_TOOL_CALL,
    MARKUP,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    Event,
)


class EventFilter(Protocol):
    """Events in, the events to deliver out. `feed` takes them in order, a list at a time;
    `finish` (once, at the end of output) gives what the filter still held back."""

    def feed(self, events: Sequence[Event]) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class Chain:
    """Filters applied one after the other (an `EventFilter` itself). An empty chain passes
    events through unchanged; the pipeline and the client's reply each hold one."""

    def __init__(self, filters: Iterable[EventFilter] = ()) -> None:
        self.filters: list[EventFilter] = list(filters)

    def __len__(self) -> int:
        return len(self.filters)

    def add(self, f: EventFilter, *, first: bool = False) -> None:
        """Add a filter after the others, or with `first` before them (right after the parser:
        for a filter that must see what the parser found, not what a policy left of it)."""
        if first:
            self.filters.insert(0, f)
        else:
            self.filters.append(f)

    def feed(self, events: Sequence[Event]) -> list[Event]:
        out = list(events)
        for f in self.filters:
            if not out:
                break  # nothing in gives nothing out: the filters after need no call
            out = f.feed(out)
        return out

    def finish(self) -> list[Event]:
        # What a filter lets go at the end still goes through the filters after it, before
        # their own end.
        out: list[Event] = []
        for f in self.filters:
            out = (f.feed(out) if out else []) + f.finish()
        return out


def through(filters: Iterable[EventFilter], events: Iterable[Event]) -> list[Event]:
    """A whole event list (one reply's) through `filters`, finished."""
    chain = Chain(filters)
    return chain.feed(list(events)) + chain.finish()


class CallsAsText:
    """The events a client that declared no tools receives (the server's decision; the parser
    and the inspector still see the call). Each complete call becomes text in the channel it
    stood in: its raw text, with the newlines after it that the call's tag took; the streamed
    `tool_start` / `tool_args` are dropped (a call that then failed already comes back as text).
    Anomalies pass through, so `unknown_tool` is still counted. Holds nothing back."""

    def __init__(self) -> None:
        self._after: str | None = None  # the channel of the call just turned into text

    def feed(self, events: Sequence[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            k = ev.kind
            if k in (TOOL_START, TOOL_ARGS):
                continue
            if k == TOOL_CALL and ev.call is not None:
                call, end = ev.call, ev.span[1]
                self._after = call.origin
                out.append(Event(call.origin, call.raw, (end - len(call.raw), end)))
                continue
            if k == MARKUP and self._after == CONTENT and not ev.text.strip("\n"):
                out.append(Event(CONTENT, ev.text, ev.span))
                continue
            self._after = None
            out.append(ev)
        return out

    def finish(self) -> list[Event]:
        return []


class FirstCallOnly:
    """The events of a reply to a request that allows one call (`ChatRequest.parallel_calls`
    False): the first complete call is delivered and every later one is dropped, as vLLM
    truncates to the first call. Until a call completes, events pass unchanged; after it, a
    later call's streamed `tool_start` / `tool_args` are held back, and when the call completes
    it becomes one `extra_tool_call` anomaly whose span covers the whole call and whose text is
    the call as written. A later call that fails comes back as text, as it would unstreamed.
    Nothing that passed is retracted, and spans still tile the output. Applied by the token
    pipeline (engine/pipeline.py), so the run's events, its result, the metrics and the
    recording all see the one call, and by re-parse, so "as shown" is what was shown."""

    def __init__(self) -> None:
        self._delivered = False  # a call completed: later ones are extra
        self._held: int | None = None  # where the held-back call's span starts

    def feed(self, events: Sequence[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            out += self._one(ev)
        return out

    def finish(self) -> list[Event]:
        # A held-back call that never completed came back from the parser's own finish, as
        # text or an anomaly; nothing is left here.
        return []

    def _one(self, ev: Event) -> list[Event]:
        k = ev.kind
        if not self._delivered:
            self._delivered = k == TOOL_CALL and ev.call is not None
            return [ev]
        if k in (TOOL_START, TOOL_ARGS):
            if self._held is None:
                self._held = ev.span[0]
            return []
        h = self._held
        if k == ANOMALY and ev.span[0] == ev.span[1]:
            # The later call's own anomalies (unknown_tool, unfinished_call...) still count;
            # they stand where the held-back call begins.
            if h is None:
                return [ev]
            return [Event(ANOMALY, ev.text, (h, h), None, ev.anomaly, ev.index, ev.call_id)]
        self._held = None
        start = ev.span[0] if h is None else h
        if k == TOOL_CALL and ev.call is not None:
            return [Event(ANOMALY, ev.call.raw, (start, ev.span[1]), None, EXTRA_TOOL_CALL,
                          ev.index, ev.call_id)]
        if h is None:
            return [ev]
        # A held-back call that failed: its text covers the span of what was held back.
        return [Event(k, ev.text, (h, ev.span[1]), ev.call, ev.anomaly, ev.index, ev.call_id)]
