"""The per-token pipeline: one request's tokens through its parser, to metrics and a recorder.

Owns `TokenPipeline`, the one place where "feed the parser, count the token and its anomalies,
record it" is written (docs/design.md, section 3 "Threads and owners" and section 5
"Engines, service, pipeline"). The run's event filters (engine/parse/filters.py: those its
`Reading` implies, such as `FirstCallOnly` for a request that allows one call per reply, and
any the app adds, such as the tap's `LeakWatch`) are composed here, in order, after the parser,
which knows no request policy, and before anything counts or keeps the events. The live
service, the window's playback and its re-parse all drive a request through one of these, so a
recording played back gives the events it gave live.

Threads: a pipeline is driven by one thread at a time, the one that delivers the tokens: the
engine thread for a live run (engine/service.py), the GUI thread for playback and re-parse
(inspector/). It holds no lock; the metrics and the recorder it reports to take their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from engine.backends.base import Finish, Token
from engine.chat.arguments import ArgumentCheck
from engine.metrics import Metrics
from engine.parse.events import (
    ANOMALY,
    GUIDED_TOKEN,
    IMPLICIT_REASONING_END,
    REASONING,
    REASONING_BUDGET,
    Event,
    ParseResult,
)
from engine.parse.filters import Chain, EventFilter
from engine.parse.parser import OutputParser
from engine.record.recording import Recorder

# How much reasoning an implicit end of thinking shows in its log line (metrics keeps 80).
_TAIL = 160


class TokenPipeline:
    """One request: `start()`, then `feed()` per token, `finish()` once, then `finished()`.

    `metrics` and `recorder` are optional (a re-parse reports to neither). `clock` stamps the
    anomalies and the start and finish when the caller gives no time: time.perf_counter for a
    live run, the playback's clock for a replay. `filters`: the run's event filters, applied
    in order after the parser (`Reading.filters()`); `add_filter` adds one later. `tools`: the
    request's declared tools (`Reading.tools`); with any, a complete call is checked against its
    tool's schema right after the parser, before any policy filter, so a call a policy drops is
    checked too (engine/chat/arguments.py: `invalid_arguments`, the call itself unchanged).
    """

    def __init__(
        self,
        id: str,
        parser: OutputParser,
        *,
        metrics: Metrics | None = None,
        recorder: Recorder | None = None,
        clock: Callable[[], float] = time.perf_counter,
        filters: Iterable[EventFilter] = (),
        tools: Iterable[dict] = (),
    ) -> None:
        self.id = id
        self.parser = parser
        self.metrics = metrics
        self.recorder = recorder
        self.clock = clock
        self.n_tokens = 0
        self.n_chars = 0  # output characters fed so far (a guided token's event sits there)
        # Tokens the model wrote inside its reasoning, as the parser assigned them (a token
        # read while the reasoning is open, or one that gave reasoning text); the reasoning
        # budget counts these (engine/chat/budget.py). Forced tokens are markup, not counted.
        self.reasoning_tokens = 0
        self._forcing = False  # the last token was forced (a close in progress)
        self._reasoning_tail = ""  # for the implicit-end log line: what preceded the call
        self._filters = Chain(filters)
        check = ArgumentCheck(tools)
        if check.checks:  # no tools, nothing to check: the per-token path stays filter-free
            self._filters.add(check, first=True)

    @property
    def state(self) -> str:
        return self.parser.state

    def add_filter(self, f: EventFilter, *, first: bool = False) -> None:
        """Add an event filter to this run, after the others, or with `first` right after the
        parser (one that must see what the parser found, before a policy drops any of it).
        Before the first token: events already delivered are not filtered again."""
        self._filters.add(f, first=first)

    def start(self, source: str, model: str, prompt_tokens: int, t: float | None = None) -> None:
        """Count the request as started (the recorder's request record is the caller's: it
        needs the whole request)."""
        if self.metrics is not None:
            self.metrics.request_started(self.id, source, model, prompt_tokens,
                                         t=self.clock() if t is None else t)

    def feed(self, tok: Token, t: float | None = None) -> list[Event]:
        """Parse one token, record it, and count it at `t` (default: its own time)."""
        evs = self._see(self.parser.feed(tok.text))
        self.n_chars += len(tok.text)
        if not tok.forced:
            if self.parser.state == REASONING or any(ev.kind == REASONING for ev in evs):
                self.reasoning_tokens += 1
        elif not self._forcing:
            # The reasoning budget's close begins: zero-width at this token's end, like a
            # guided token's mark (a fact about the run, not an anomaly).
            evs = [*evs, Event(REASONING_BUDGET,
                               f"closed after {self.reasoning_tokens} reasoning tokens",
                               (self.n_chars, self.n_chars))]
            if self.metrics is not None:
                self.metrics.reasoning_budget(self.id)
        self._forcing = tok.forced
        if tok.guided is not None:
            # Where the call guard made the model write this token: zero-width at its end, its
            # text what the model itself drew (not an anomaly: a fact about the run).
            evs = [*evs, Event(GUIDED_TOKEN, tok.guided, (self.n_chars, self.n_chars))]
            if self.metrics is not None:
                self.metrics.guided(self.id)
        if self.recorder is not None:
            self.recorder.token(self.id, self.n_tokens, tok)
        self.n_tokens += 1
        if self.metrics is not None:
            self.metrics.token(self.id, tok.t if t is None else t)
            self._report(evs)
        return evs

    def finish(self) -> list[Event]:
        """End of output: the events the parser held back, their anomalies counted."""
        evs = self._see(self.parser.finish())
        if self._filters:
            evs += self._filters.finish()
        if self.metrics is not None:
            self._report(evs)
        return evs

    def finished(self, fin: Finish, result: ParseResult | None, *,
                 finish_reason: str | None = None, t: float | None = None) -> None:
        """Count and record the end: `finish_reason` (default: the result's) is what the
        metrics log shows."""
        if self.metrics is not None:
            reason = finish_reason or (result.finish_reason if result else fin.reason)
            self.metrics.request_finished(self.id, reason, fin.timings,
                                          t=self.clock() if t is None else t)
        if self.recorder is not None:
            self.recorder.finish(self.id, fin, result)

    def _see(self, evs: list[Event]) -> list[Event]:
        if not evs or not self._filters:  # the common case costs one test per token
            return evs
        return self._filters.feed(evs)

    def _report(self, evs: list[Event]) -> None:
        metrics = self.metrics
        for ev in evs:
            if ev.kind == REASONING:
                self._reasoning_tail = (self._reasoning_tail + ev.text)[-_TAIL:]
            elif ev.kind == ANOMALY:
                # For an implicit end of thinking, the log line shows the reasoning before it.
                text = self._reasoning_tail if ev.anomaly == IMPLICIT_REASONING_END else ev.text
                metrics.anomaly(self.id, ev.anomaly or "", text, t=self.clock())
