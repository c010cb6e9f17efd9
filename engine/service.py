"""The service: one request in, one stream of parser events out, recorded and measured.

Owns `Service` and `Run`. `Service.submit()` (any thread) renders the prompt with the pack's
chat template, checks the context, and queues a job on the engine; the parser starts as the
rendered prompt says, unless the engine replays a recorded output (`Engine.prepare`), which is
parsed as it was when recorded. The engine thread then calls back per token: the token goes
through the run's own per-token pipeline (engine/pipeline.py: its parser and event filters,
the recorder, the metrics), and the resulting events are fanned out to the run's consumers (a
blocking iterator, an asyncio queue, the GUI's listeners). So every consumer sees the same
events, and a non-streamed reply is built from exactly what a streamed one sent. How the output
is read (the parser's settings and the request's policy: `Reading`, engine/parse/reading.py) is
decided once here, per request, and recorded with it, so replay, playback and re-parse read it
the same way. At a finish, a long prompt mostly recomputed although a longer prefix was cached
gets a log line saying where it left the cache (engine/record/forensics.py, issue 20). See
docs/design.md, section 5 "Engines, service, pipeline".

Threads: `submit`/`cancel`/iteration from any thread; token and finish callbacks on the engine
thread; listeners are called on the engine thread and must only enqueue (the GUI drains its
queue on a timer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import queue
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from engine.backends.base import Engine, Finish, Job, Timings, Token
from engine.backends.llama.vocab import PromptTooLong
from engine.chat import special
from engine.chat.budget import RunBudget, budget_of, close_text
from engine.chat.detect import start_state
from engine.chat.packs import Pack
from engine.chat.request import ChatRequest, one_call_only
from engine.chat.template import ChatTemplate, TemplateError
from engine.grammar import tools as tool_grammar
from engine.metrics import Metrics
from engine.parse.events import SPECIAL_TOKEN_IN_CONTENT, Event, ParseResult, result_of
from engine.parse.reading import Reading
from engine.pipeline import TokenPipeline
from engine.record import forensics
from engine.record.recording import Recorder

log = logging.getLogger("prism")
TOOLS_IGNORED = "tools_ignored"  # a Run note: the template did not show the request's tools
SLOW_RENDER_MS = 100.0
_DONE = object()
_ids = itertools.count(1)


def request_reading(request: ChatRequest, start: str, family: str) -> Reading:
    """How a request's output is read: from where `start` says (the rendered prompt, or the
    recording a replay plays), in `family`'s syntax, under the request's tools and policy."""
    return Reading(
        start=start,
        family=family,
        tools=tuple(request.tools),
        # A request declares its tools, even none: a call then is `unknown_tool` (issue 11).
        tools_declared=True,
        stream_tools=request.stream_tools,
        one_call=one_call_only(request),
        # None declared, or tool_choice "none" (which drops them): calls reach the client as
        # text (app/api/runs.py).
        calls_as_text=not request.tools,
    )


class ContextOverflow(ValueError):
    """The rendered prompt (plus max_tokens, where a route does not clamp it) does not fit the
    model's context. The wording is OpenAI's, which clients map to their context-length error.

    Without `max_tokens` the prompt alone is too long: the chat routes clamp max_tokens to what
    remains (issue 9, item 5), so naming it (Claude Code asks for 64000) would blame the wrong
    number. `at_least`: `prompt_tokens` is engine/backends/llama/vocab.py's lower bound, not a full
    count."""

    def __init__(self, n_ctx: int, prompt_tokens: int, max_tokens: int | None = None, *,
                 at_least: bool = False) -> None:
        self.n_ctx, self.prompt_tokens, self.max_tokens = n_ctx, prompt_tokens, max_tokens
        head = f"This model's maximum context length is {n_ctx} tokens. However, "
        if max_tokens is None:
            n = f"at least {prompt_tokens}" if at_least else str(prompt_tokens)
            text = (f"your messages resulted in {n} tokens. Please reduce the length of the "
                    "messages.")
        else:
            text = (f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion.")
        super().__init__(head + text)


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

    def __init__(self, service: Service, request: ChatRequest, prompt: str, reading: Reading,
                 prompt_tokens: int) -> None:
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
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self.result: ParseResult | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._queues: list[Callable[[object], None]] = []
        self._waking: list[Callable[[], None]] = []  # started() waiters
        self.job: Job | None = None
        # What was wrong with the request itself, for the inspector: "tools_ignored" when the
        # pack's template does not show the request's tools to the model (issue 9, item 4).
        self.notes: tuple[str, ...] = ()
        # Special tokens that came from message content, not the template (engine/chat/special.py).
        self.marks: special.PromptMarks = special.NONE

    # consumers ------------------------------------------------------------------------------

    def _attach(self, put: Callable[[object], None]) -> None:
        with self._lock:
            for ev in self.events:
                put(ev)
            if self._done.is_set():
                put(_DONE)
            else:
                self._queues.append(put)

    def __iter__(self) -> Iterator[Event]:
        q: queue.SimpleQueue = queue.SimpleQueue()
        self._attach(q.put)
        while (item := q.get()) is not _DONE:
            yield item

    async def stream(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        self._attach(lambda item: loop.call_soon_threadsafe(q.put_nowait, item))
        while (item := await q.get()) is not _DONE:
            yield item

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
        with self._lock:
            self.events.extend(evs)
            for put in self._queues:
                for ev in evs:
                    put(ev)

    def _close(self) -> None:
        with self._lock:
            self._done.set()
            self._wake()
            for put in self._queues:
                put(_DONE)
            self._queues.clear()


class Service:
    """Renders, submits, parses, records and measures. One per engine."""

    def __init__(self, engine: Engine, pack: Pack, *, metrics: Metrics | None = None,
                 recorder: Recorder | None = None) -> None:
        self.engine = engine
        self.pack = pack
        self.template = ChatTemplate(pack.template, bos_token=pack.bos_token,
                                     eos_token=pack.eos_token, dialect=pack.dialect,
                                     tool_source=pack.tool_template)
        self.metrics = metrics
        self.recorder = recorder
        self.escape_special = False  # --escape-special: message content tokenized as text
        self.guard_calls = True  # --no-guard-calls: calls under tool_choice auto unguarded
        self.reasoning_budget: int | None = None  # --reasoning-budget: a request's default
        self._budget_warned = False
        self.embedder = None  # the model's Embedder (engine/backends/llama/embed.py), if any
        # What the engine's tokenizer takes beyond the text (engine/backends/llama/vocab.py's:
        # llama.cpp only).
        params = inspect.signature(engine.tokenize).parameters
        self._tokenize_limit = "limit" in params
        self._tokenize_plain = "plain" in params
        self._listeners: list[Callable[[RunUpdate], None]] = []

    def add_listener(self, fn: Callable[[RunUpdate], None]) -> None:
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[RunUpdate], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _notify(self, upd: RunUpdate) -> None:
        for fn in list(self._listeners):
            fn(upd)

    def render(self, request: ChatRequest) -> str:
        thinking = tool_grammar.request_thinking(request, self.pack.thinking)
        if budget_of(request, self.reasoning_budget) == 0:  # no reasoning: thinking off
            thinking = False
        t0 = time.perf_counter()
        prompt = self.template.render(
            request.messages,
            tools=request.tools,
            add_generation_prompt=request.add_generation_prompt,
            enable_thinking=thinking,
            continue_final=request.continue_final,
        )
        ms = (time.perf_counter() - t0) * 1000
        if ms > SLOW_RENDER_MS:  # a template that loops, or a huge history (issue 10, item 7)
            log.warning("[prism] the chat template took %.0f ms to render %d messages "
                        "(%d characters)", ms, len(request.messages), len(prompt))
        return prompt

    def mark_specials(self, request: ChatRequest, prompt: str) -> special.PromptMarks:
        """The special tokens the messages brought into `prompt`; with `escape_special`
        (--escape-special) their spans are tokenized as plain text."""
        return special.mark(
            prompt, request.messages,
            lambda msgs: self.render(dataclasses.replace(request, messages=msgs)),
            self.engine.special_texts, escape=self.escape_special and self._tokenize_plain)

    def _prompt_ids(self, prompt: str, marks: special.PromptMarks, n_ctx: int) -> list[int]:
        """The prompt's tokens; an engine that takes a `limit` (engine/backends/llama/vocab.py)
        refuses a prompt that cannot fit before tokenizing all of it (issue 10, item 1)."""
        kw: dict = {"plain": marks.spans} if marks.escaped else {}
        if self._tokenize_limit:
            kw["limit"] = n_ctx
        try:
            return self.engine.tokenize(prompt, **kw)
        except PromptTooLong as e:
            raise ContextOverflow(n_ctx, e.at_least, at_least=True) from None

    def count_tokens(self, request: ChatRequest) -> int:
        return len(self.engine.tokenize(self.render(request)))

    def submit(self, request: ChatRequest) -> Run:
        """Render and queue a request; raises TemplateError or ContextOverflow (before any
        work is queued, so the caller can answer with a clean error). A template's refusal is
        recorded first (`_refused`)."""
        try:
            prompt = self.render(request)
            marks = self.mark_specials(request, prompt)
        except TemplateError as e:
            self._refused(request, e)
            raise
        n_ctx = self.engine.n_ctx
        ids = self._prompt_ids(prompt, marks, n_ctx)
        n_prompt = len(ids)
        if n_prompt >= n_ctx:  # only a prompt that does not fit is refused
            raise ContextOverflow(n_ctx, n_prompt)
        # What remains of the context caps the reply (it ends with "length" there), whatever
        # max_tokens asked: Claude Code sends 32000 or 64000 (issue 9, item 5).
        max_tokens = min(request.max_tokens or n_ctx, n_ctx - n_prompt)
        job = Job(
            prompt=prompt, prompt_ids=tuple(ids), max_tokens=max_tokens,
            sampling=request.sampling, stop=request.stop,
            top_logprobs=request.top_logprobs,
            submitted_at=time.perf_counter(),
        )
        # A replayed output is parsed as it was when recorded (engine/record/replay.py), a new one
        # as the pack's template and dialect say.
        start, dialect = (self.engine.prepare(job, request)
                          or (start_state(prompt, self.pack.dialect), ""))
        run = Run(self, request, prompt, request_reading(request, start,
                                                         dialect or self.pack.dialect), n_prompt)
        run.marks = marks
        if request.tools and not self.template.renders_tools:
            run.notes = (TOOLS_IGNORED,)
            log.warning("[prism] %s: the chat template of pack %s does not show tools, so the "
                        "model cannot call any of the %d it was given (use a pack whose "
                        "template renders `tools`)", run.id, self.pack.name, len(request.tools))
        job.grammar = tool_grammar.request_grammar(request, self.pack.dialect, run.start_state,
                                                   self.engine)
        if getattr(self.engine, "guards_calls", False):  # an engine that samples (llama.cpp)
            job.guard = tool_grammar.request_guard(request, dialect or self.pack.dialect,
                                                   run.parser, self.engine, self.guard_calls)
        budget = budget_of(request, self.reasoning_budget)
        if budget is not None:
            job.budget = self._budget(run, budget, dialect or self.pack.dialect)
        job.on_token = lambda tok: self._on_token(run, tok)
        job.on_finish = lambda fin: self._on_finish(run, fin)
        run.job = job
        if self.recorder is not None:
            self.recorder.request(run.id, request, prompt, reading=run.reading, api=request.api,
                                  t0=job.submitted_at, marks=marks)
        # Counted only once nothing about the request can fail any more: a request the
        # recorder refused must not stay "running" in the metrics (issue 10, item 5).
        run.pipeline.start(request.api, self.engine.name, n_prompt)
        if marks.n_specials and not marks.escaped:
            first = " ".join(marks.texts(prompt))
            log.warning("[prism] %s: %d special tokens in message content were read as "
                        "control tokens (first: %s); --escape-special keeps them as text",
                        run.id, marks.n_specials, first)
            if self.metrics is not None:
                self.metrics.anomaly(run.id, SPECIAL_TOKEN_IN_CONTENT, first)
        self._notify(RunUpdate(run, "start"))
        self.engine.submit(job)
        return run

    def _budget(self, run: Run, tokens: int, dialect: str) -> RunBudget | None:
        """The run's reasoning budget (engine/chat/budget.py), or None: a family without
        reasoning markers has nothing to close, and an engine that does not sample (a replay,
        an upstream's completions) cannot force the close: said once, in the log."""
        close = close_text(dialect)
        if not close:
            return None
        if not getattr(self.engine, "guards_calls", False):  # the engines that sample
            if not self._budget_warned:
                self._budget_warned = True
                log.warning("[prism] the reasoning budget is not enforced by the %s engine: "
                            "only an engine that samples can close the reasoning",
                            self.engine.name)
            return None
        return RunBudget(tokens, close, run.pipeline)

    def _refused(self, request: ChatRequest, exc: TemplateError) -> None:
        """The chat template refused the request (its `raise_exception`, or a render that
        failed): recorded all the same, a request record and an "error" finish marked
        refused by the template (engine/record/recording.py), so the recording, `prism stats`
        and the window say so (verdict "refused by the template"), and listeners get a
        "refused" update. The metrics count requests that started: not this one. The
        request's id goes with the exception (`request_id`), for a caller that names it."""
        run = Run(self, request, "", request_reading(request, "content", self.pack.dialect), 0)
        run.finish = Finish("error", Timings(), error=str(exc))
        run.result = result_of((), "error")
        exc.request_id = run.id  # type: ignore[attr-defined]
        if self.recorder is not None:
            self.recorder.refused(run.id, request, str(exc), reading=run.reading,
                                  api=request.api, result=run.result)
        run._close()
        self._notify(RunUpdate(run, "refused"))

    # engine thread ------------------------------------------------------------------------

    def _on_token(self, run: Run, tok: Token) -> None:
        run.tokens.append(tok)
        if len(run.tokens) == 1:
            with run._lock:
                run._wake()
        evs = run.pipeline.feed(tok)
        if evs:
            run._publish(evs)
        if self._listeners:
            self._notify(RunUpdate(run, "events", tuple(evs), tok))

    def _on_finish(self, run: Run, fin: Finish) -> None:
        evs = run.pipeline.finish()
        if evs:
            run._publish(evs)
        run.result = result_of(run.events, fin.reason)
        run.finish = fin
        # The metrics count the finish the client gets: a request that declares no tools is
        # answered with any call as text (app/api/runs.py), so it ends "stop", not "tool_calls".
        # The recording keeps the parse as it was: the inspector shows the call.
        run.pipeline.finished(fin, run.result,
                              finish_reason=fin.reason if run.reading.calls_as_text else None)
        if forensics.needs_report(fin.timings, fin.prefix):
            self._log_cache_miss(run, fin)
        self._notify(RunUpdate(run, "events", tuple(evs)))
        self._notify(RunUpdate(run, "finish"))
        run._close()

    def _log_cache_miss(self, run: Run, fin: Finish) -> None:
        """Say where a long prompt left a longer cached prefix than was reused (issue 20:
        a reordered reminder, a timestamp in the system prompt). Rare, so the exact place is
        worth one more render here (engine/record/forensics.py); a failure to find it must
        never stop the engine thread."""
        try:
            prefix = fin.prefix
            assert prefix is not None  # needs_report checked it
            request = run.request
            place = forensics.locate(
                run.prompt, request.messages, forensics.prompt_offset(run.prompt, prefix),
                lambda msgs: self.render(dataclasses.replace(request, messages=msgs)))
            log.warning("%s", forensics.miss_line(run.id, fin.timings, prefix, place))
        except Exception:
            log.exception("[prism] %s: could not place the cache miss", run.id)
