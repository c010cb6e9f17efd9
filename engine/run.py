"""A run: one request's life as its consumers see it, and the updates its listeners get.

Owns `Run` (its prompt, its reading, its per-token pipeline, its events and tokens as they
come, its result; a blocking iterator and an asyncio stream over its events) and `RunUpdate`
(what a service's listeners receive). engine/service.py makes and drives runs; they are
re-exported there. Events reach the consumers in lists, one per `_flush` (the hand-off's
wake-up, engine/handoff.py), so an asyncio consumer is woken once per batch, not once per
event, and iterates them in order.

Threads: iteration, `started`, `wait`, `cancel` from any thread; `_publish`, `_flush` and
`_close` on the thread that delivers the run's tokens (engine/service.py says which), under
the run's lock where a consumer could look.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.backends.base import Finish, Job, Timings, Token
from engine.chat import special
from engine.chat.request import ChatRequest
from engine.parse.events import Event, ParseResult
from engine.parse.reading import Reading
from engine.pipeline import TokenPipeline

_DONE = object()
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """What listeners receive: a run started (events empty), produced events, or finished."""

    run: Run
    kind: str  # "start" | "events" | "finish" | "refused" (by the template: no start, no job)
    events: tuple[Event, ...] = ()
    token: Token | None = None


class Run:
    """One request's life: its prompt, its events as they come, and its final result.

    Consume with `for ev in run` (blocking, any thread) or `async for ev in run.stream()`;
    either way, each consumer must be attached before the job starts (submit does it for
    the built-in iterator; `stream()` replays events already produced, so late attachment
    loses nothing).
    """

    def __init__(self, service: Any, request: ChatRequest, prompt: str, reading: Reading,
                 prompt_tokens: int) -> None:
        # `service`: its Service (engine/service.py, the layer above): metrics and recorder.
        self.id = f"req-{next(_ids)}-{secrets.token_hex(3)}"
        self.request = request
        self.prompt = prompt
        self.reading = reading  # how its output is read, recorded with it
        self.start_state = reading.start
        self.prompt_tokens = prompt_tokens
        self.created = time.time()
        self.parser = reading.parser()
        self.pipeline = TokenPipeline(self.id, self.parser, metrics=service.metrics,
                                      recorder=service.recorder, filters=reading.filters(),
                                      tools=reading.tools)
        self.events: list[Event] = []
        self._sent = 0  # of `events`, those its consumers were given (`_flush`)
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self.result: ParseResult | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._queues: list[Callable[[object], None]] = []
        self._waking: list[Callable[[], None]] = []  # started() waiters
        self.job: Job | None = None
        # Parsed on the engine thread, token by token: its engine reads the parser between
        # two tokens (a call guard, a reasoning budget). Else on the hand-off's thread.
        self.inline = False
        self._failed: str | None = None  # what a pipeline step raised (the job was cancelled)
        # What was wrong with the request itself, for the inspector: "tools_ignored" when the
        # pack's template does not show the request's tools to the model (issue 9, item 4).
        self.notes: tuple[str, ...] = ()
        # Special tokens that came from message content, not the template (engine/chat/special.py).
        self.marks: special.PromptMarks = special.NONE

    # consumers ------------------------------------------------------------------------------

    def _attach(self, put: Callable[[object], None]) -> None:
        # A consumer is given lists of events (one per wake-up), then _DONE.
        with self._lock:
            if self._sent:
                put(self.events[:self._sent])
            if self._done.is_set():
                put(_DONE)
            else:
                self._queues.append(put)

    def __iter__(self) -> Iterator[Event]:
        q: queue.SimpleQueue = queue.SimpleQueue()
        self._attach(q.put)
        while (item := q.get()) is not _DONE:
            yield from item

    async def stream(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        self._attach(lambda item: loop.call_soon_threadsafe(q.put_nowait, item))
        while (item := await q.get()) is not _DONE:
            for ev in item:
                yield ev

    async def started(self) -> None:
        """Return once the run has its first token or has finished: the streaming routes
        hold their status line until then, so a run refused with nothing written is the
        API's 4xx, not a 200 that ends in an error event (app/api/sse.py)."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(lambda: woken.done() or woken.set_result(None))

        with self._lock:
            if self.tokens or self._done.is_set():
                return
            self._waking.append(wake)
        await woken

    def _wake(self) -> None:
        # Under the lock, after the first token is in `tokens` (or the run is done), so a
        # waiter either sees it or is woken: started() checks under the same lock.
        for wake in self._waking:
            wake()
        self._waking.clear()

    def wait(self, timeout: float | None = None) -> ParseResult | None:
        self._done.wait(timeout)
        return self.result

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    @property
    def finish_reason(self) -> str:
        """"tool_calls" when a call completed, else the engine's reason."""
        if self.result is None:
            return "running"
        return self.result.finish_reason

    @property
    def timings(self) -> Timings:
        return self.finish.timings if self.finish else Timings()

    # engine-thread side -----------------------------------------------------------------

    def _publish(self, evs: list[Event]) -> None:
        """Keep `evs`; its consumers get them at the next `_flush`."""
        with self._lock:
            self.events.extend(evs)

    def _flush(self) -> None:
        """Give the consumers the events kept since the last flush, as one list each: one
        wake-up of an asyncio consumer, however many events (the hand-off flushes once per
        wake-up of its own)."""
        with self._lock:
            if self._sent < len(self.events):
                new = self.events[self._sent:]
                self._sent = len(self.events)
                for put in self._queues:
                    put(new)

    def _close(self) -> None:
        self._flush()
        with self._lock:
            self._done.set()
            self._wake()
            for put in self._queues:
                put(_DONE)
            self._queues.clear()
