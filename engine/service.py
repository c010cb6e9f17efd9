"""The service: one request in, one stream of parser events out, recorded and measured.

Owns `Service` (`Run` is engine/run.py's, re-exported). `Service.submit()` (any thread) renders
the prompt with the pack's chat template, checks the context, and queues a job on the engine;
the parser starts as the rendered prompt says, unless the engine replays a recorded output
(`Engine.prepare`), which is parsed as it was when recorded. The engine thread then calls back
per token: the token goes through the run's own per-token pipeline (engine/pipeline.py: its
parser and event filters, the recorder, the metrics), and the resulting events are fanned out
to the run's consumers (a blocking iterator, an asyncio queue, the GUI's listeners). So every
consumer sees the same events, and a non-streamed reply is built from exactly what a streamed
one sent. All of that runs beside the engine thread, on the hand-off's (engine/handoff.py), in
the tokens' order; the engine thread only puts each token there, and its finish follows them
there and is waited for, so when the engine's `on_finish` returns the run is done. A run whose
engine reads its parser between two tokens (the call guard asks whether a call opened, the
reasoning budget how much reasoning there is) is parsed on the engine thread instead. How the
output is read (the parser's settings and the request's policy: `Reading`,
engine/parse/reading.py) is decided once here, per request, and recorded with it, so replay,
playback and re-parse read it the same way. At a finish, a long prompt mostly recomputed
although a longer prefix was cached gets a log line saying where it left the cache
(engine/record/forensics.py, issue 20). See docs/design.md, section 5 "Engines, service,
pipeline".

Threads: `submit`/`cancel`/iteration from any thread; token and finish callbacks on the engine
thread; the pipeline, the finish's bookkeeping and the listeners on the hand-off's thread
("prism-pipeline"; the engine thread for a guarded or budgeted run), one token at a time;
listeners must only enqueue (the GUI drains its queue on a timer).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import time
from collections.abc import Callable

from engine.backends.base import Engine, Finish, Job, Timings, Token
from engine.backends.llama.vocab import PromptTooLong
from engine.chat import special
from engine.chat.budget import RunBudget, budget_of, close_text
from engine.chat.detect import start_state
from engine.chat.packs import Pack
from engine.chat.request import ChatRequest, one_call_only
from engine.chat.template import ChatTemplate, TemplateError
from engine.grammar import tools as tool_grammar
from engine.handoff import HANDOFF
from engine.metrics import Metrics
from engine.parse.events import SPECIAL_TOKEN_IN_CONTENT, result_of
from engine.parse.reading import Reading
from engine.record import forensics
from engine.record.recording import Recorder
from engine.run import Run, RunUpdate

__all__ = ["ContextOverflow", "Run", "RunUpdate", "Service", "request_reading"]

log = logging.getLogger("prism")
TOOLS_IGNORED = "tools_ignored"  # a Run note: the template did not show the request's tools
SLOW_RENDER_MS = 100.0


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


class Service:
    """Renders, submits, parses, records and measures. One per engine."""

    def __init__(self, engine: Engine, pack: Pack, *, metrics: Metrics | None = None,
                 recorder: Recorder | None = None) -> None:
        self.engine = engine
        self.pack = pack
        self.template = ChatTemplate(pack.template, bos_token=pack.bos_token,
                                     eos_token=pack.eos_token, family=pack.family,
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
        # as the pack's template and family say.
        start, family = (self.engine.prepare(job, request)
                          or (start_state(prompt, self.pack.family), ""))
        run = Run(self, request, prompt, request_reading(request, start,
                                                         family or self.pack.family), n_prompt)
        run.marks = marks
        if request.tools and not self.template.renders_tools:
            run.notes = (TOOLS_IGNORED,)
            log.warning("[prism] %s: the chat template of pack %s does not show tools, so the "
                        "model cannot call any of the %d it was given (use a pack whose "
                        "template renders `tools`)", run.id, self.pack.name, len(request.tools))
        job.grammar = tool_grammar.request_grammar(request, self.pack.family, run.start_state,
                                                   self.engine)
        if getattr(self.engine, "guards_calls", False):  # an engine that samples (llama.cpp)
            job.guard = tool_grammar.request_guard(request, family or self.pack.family,
                                                   run.parser, self.engine, self.guard_calls)
        budget = budget_of(request, self.reasoning_budget)
        if budget is not None:
            job.budget = self._budget(run, budget, family or self.pack.family)
        run.inline = job.guard is not None or job.budget is not None
        if run.inline:
            job.on_token = functools.partial(self._on_token, run)
        else:  # the engine thread only puts the token on the hand-off's queue
            job.on_token = functools.partial(HANDOFF.put, functools.partial(self._handed, run))
        job.on_finish = functools.partial(self._on_finish, run)
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

    def _budget(self, run: Run, tokens: int, family: str) -> RunBudget | None:
        """The run's reasoning budget (engine/chat/budget.py), or None: a family without
        reasoning markers has nothing to close, and an engine that does not sample (a replay,
        an upstream's completions) cannot force the close: said once, in the log."""
        close = close_text(family)
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
        run = Run(self, request, "", request_reading(request, "content", self.pack.family), 0)
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
        """An inline run's token, on the engine thread: what it raises ends the job."""
        self._deliver(run, tok)
        run._flush()

    def _handed(self, run: Run, tok: Token) -> Callable[[], None] | None:
        """A token on the hand-off's thread; its consumers are woken at the flush returned.
        What the pipeline or a listener raises ends the job "error", as it would inline: it
        is cancelled, and its finish says why."""
        if run._failed is not None:
            return None
        try:
            self._deliver(run, tok)
        except Exception as e:
            run._failed = f"{type(e).__name__}: {e}"
            log.warning("[prism] %s: the token pipeline failed: %s", run.id, run._failed)
            run.cancel()
        return run._flush

    def _deliver(self, run: Run, tok: Token) -> None:
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
        """The job ended (on the engine thread, or the one that cancelled a waiting job). A
        handed-off run is finished on the hand-off's thread, after its tokens, and this
        returns once it is: the run is done, recorded and measured when the engine goes on."""
        if run.inline or HANDOFF.on_thread():
            self._finished(run, fin)
        else:
            HANDOFF.put(functools.partial(self._finished, run), fin)
            HANDOFF.drain()

    def _finished(self, run: Run, fin: Finish) -> None:
        if run._failed is not None:
            fin = dataclasses.replace(fin, reason="error", error=run._failed)
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
