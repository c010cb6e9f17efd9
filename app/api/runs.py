"""From a converted request to a finished run: queue limit, submit, wait, and the run's figures.

Owns `submit` (admitted through app/api/admission.py: 429 with Retry-After past
`ServerConfig.max_queue`, counted from the moment the request is accepted; context overflow and
template refusals become 400s; local paths out of every error: app/api/redact.py), `wait` (a
non-streamed request: wait for the run while watching for the client to go away, and cancel the
job if it does), and the numbers every API reports from a
finished run: `usage_numbers`, `llama_timings`, `stop_sequence`, `run_error`; `started` (a
streamed request: wait for the first token, as `wait` does for the end). And what the
client is answered from: `reply_stream`, `reply_events`, `reply_result`. A request that declared
no tools (or `tool_choice: "none"`) gets a call the model wrote anyway as text in the channel it
stood in (its reading's `calls_as_text`: engine/parse/filters.py, `CallsAsText`), so Open
WebUI's background tasks never receive calls they cannot handle; the run itself, the inspector
and the recording keep the call, counted as `unknown_tool` (issue 11, item 6). One rule for
every API, streamed or not. A forced reply (`ForcedCallsOnly`) never gets a call the length
limit cut off as text.

Runs on the asyncio loop's thread, except `Service.submit` itself: rendering the template and
tokenizing the prompt run in a worker thread (`asyncio.to_thread`), since a hostile template or
megabytes of special tokens would otherwise freeze every endpoint, /health included (issue 10,
items 1 and 7). The hop costs tens of microseconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from fastapi import Request

from app.api import models
from app.api.admission import submit_run
from app.api.errors import APIError, from_exception, kind_for_status
from app.api.redact import client_error
from app.api.state import AppState
from engine.chat.request import ChatRequest
from engine.parse.events import (
    ANOMALY,
    CONTENT,
    REASONING,
    UNFINISHED_CALL,
    Event,
    ParseResult,
    result_of,
)
from engine.parse.filters import Chain, through
from engine.service import Run


class ClientGone(Exception):
    """The client disconnected before a non-streamed reply was ready (its job is cancelled)."""


def capped(state: AppState, request: ChatRequest) -> ChatRequest:
    """The request with --max-tokens applied: the default when it sets no limit, the cap when
    it asks for more (a follow-up without max_tokens once ran 3,725 tokens; issue 9, item 7)."""
    cap = state.config.max_tokens
    if cap is None or (request.max_tokens is not None and request.max_tokens <= cap):
        return request
    return dataclasses.replace(request, max_tokens=cap)


async def submit(state: AppState, request: ChatRequest) -> Run:
    """Admit the request (app/api/admission.py: 429 past --max-queue, counted from now),
    find its model's service (app/api/models.py: with a catalog, waiting while it loads),
    then render and queue it in a worker thread."""
    request = capped(state, request)
    ticket = state.admission.admit(state)
    try:
        lease = await models.lease_for(state, request.model)
    except BaseException:
        ticket.release()
        raise
    service = models.service_of(state, lease)
    work = asyncio.ensure_future(asyncio.to_thread(submit_run, ticket, service, request))
    if lease is not None:  # the run, once started, keeps its model resident until it ends
        work.add_done_callback(lambda _: lease.release())
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        # The route was cancelled (shutdown, client gone) while the worker still renders:
        # the job it is about to queue must not run for nobody (the worker hands its ticket
        # over or releases it either way).
        work.add_done_callback(_cancel_submitted)
        raise
    except Exception as e:  # ContextOverflow, TemplateError -> 400; the rest -> 500
        raise client_error(from_exception(e)) from e


def _cancel_submitted(work: asyncio.Future) -> None:
    if not work.cancelled() and work.exception() is None:
        work.result().cancel()


class ForcedCallsOnly:
    """A forced reply (tool_choice "required" or a named function) is calls and nothing else:
    a call the length limit cut off is dropped, where the parser gives its raw text back to the
    channel it stood in (design rule 7) and a client would get that markup as `content`. Its
    `unfinished_call` anomaly passes through; `dropped` says one was dropped (the reply then
    ends "length", not "tool_calls"). Holds nothing back."""

    def __init__(self) -> None:
        self.dropped = False
        self._failed_at: int | None = None  # where the unfinished call's text will stand

    def feed(self, events: list[Event]) -> list[Event]:
        out = []
        for ev in events:
            if ev.kind == ANOMALY and ev.anomaly == UNFINISHED_CALL:
                self._failed_at = ev.span[0]
            elif (ev.kind in (CONTENT, REASONING) and self._failed_at is not None
                  and ev.span[0] == self._failed_at):
                self.dropped = True
                self._failed_at = None
                continue
            else:
                self._failed_at = None
            out.append(ev)
        return out

    def finish(self) -> list[Event]:
        return []


def reply_filters(run: Run) -> list:
    """New filters for what the client is answered from (the run keeps its own events)."""
    filters = run.reading.reply_filters()
    if run.request.tool_choice in ("required", "function"):
        filters.append(ForcedCallsOnly())
    return filters


async def reply_stream(run: Run) -> AsyncIterator[Event]:
    """The run's events as the client is answered from them, as they come."""
    view = Chain(reply_filters(run))
    if not view:
        async for ev in run.stream():
            yield ev
        return
    async for ev in run.stream():
        for out in view.feed((ev,)):
            yield out
    for out in view.finish():
        yield out


def reply_events(run: Run) -> list[Event]:
    """The finished run's events as the client is answered from them."""
    filters = reply_filters(run)
    return through(filters, run.events) if filters else run.events


def reply_result(run: Run) -> ParseResult:
    """The finished run's result as the client sees it (`finish_reason` "tool_calls" only when
    a call reaches the client; "length" for a forced reply whose last call was cut off)."""
    res = run.result
    assert res is not None
    filters = reply_filters(run)
    if not filters:
        return res
    reason = run.finish.reason if run.finish else "stop"
    out = result_of(through(filters, run.events), reason)
    if reason == "length" and any(getattr(f, "dropped", False) for f in filters):
        out = dataclasses.replace(out, finish_reason="length")  # cut, whatever completed
    return out


async def _drain(run: Run) -> None:
    async for _ in run.stream():
        pass


async def _disconnected(request: Request) -> None:
    # The body has been read, so the next ASGI message is the disconnect (or, with some
    # servers, an empty body message: skip those).
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait(request: Request, run: Run) -> Run:
    """Wait until the run is finished; raise ClientGone (job cancelled) if the client left."""
    done = asyncio.ensure_future(_drain(run))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not done.done():
            run.cancel()
            done.cancel()
    if not run.done:
        raise ClientGone(run.id)
    return run


async def started(request: Request, run) -> None:
    """Wait for a streamed run's first token or its end (`Run.started`, or a RawRun's);
    raise ClientGone (job cancelled) if the client left first, during a long prompt say."""
    first = asyncio.ensure_future(run.started())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({first, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not first.done():
            run.cancel()
            first.cancel()
    if first.cancelled():
        raise ClientGone(run.id)


async def finished(request: Request, run: Run) -> Run:
    """Wait for a non-streamed run to end. Raises ClientGone if the client left (the server
    answers 499 to nobody) and the run's own APIError if it did not end normally."""
    await wait(request, run)
    err = run_error(run)
    if err is not None:
        raise err
    return run


def run_error(run) -> APIError | None:
    """The error a finished run (a `Run`, or a completions `RawRun`) stands for, if it did not
    end normally; the engine's message with local paths taken out (app/api/redact.py)."""
    fin = run.finish
    if fin is None or fin.reason in ("stop", "length"):
        return None
    if fin.reason == "cancelled":
        return APIError("unavailable", "the request was cancelled before it finished")
    if fin.status:  # an upstream's answer (backends/upstream/engine.py): its status, its message
        return client_error(APIError(kind_for_status(fin.status),
                                     fin.error or f"HTTP {fin.status}"))
    return client_error(APIError("server", f"generation failed: {fin.error or 'unknown error'}"))


def usage_numbers(run: Run) -> tuple[int, int, int]:
    """(prompt tokens, of which cached, output tokens), the engine's own counts."""
    t = run.timings
    return (t.prompt_tokens or run.prompt_tokens, t.cached_tokens, t.output_tokens)


def llama_timings(run: Run) -> dict:
    """llama.cpp server's `timings` object."""
    t = run.timings
    prompt, cached, out = usage_numbers(run)
    prompt_n = max(0, prompt - cached)
    return {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": t.prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n * 1000.0 / t.prompt_ms if t.prompt_ms > 0 else 0.0,
        "predicted_n": out,
        "predicted_ms": t.decode_ms,
        "predicted_per_token_ms": t.decode_ms / out if out else 0.0,
        "predicted_per_second": t.tokens_per_s,
        "queue_ms": t.queue_ms,
        "ttft_ms": t.ttft_ms,
    }


def stop_sequence(run: Run) -> str | None:
    """The stop string the engine stopped on (`Finish.stop_sequence`, which every engine
    reports), or None when the run ended otherwise."""
    fin = run.finish
    if fin is None or fin.reason != "stop":
        return None
    return fin.stop_sequence or None


def reasoning_tokens(run: Run) -> int:
    """Output tokens that began inside the reasoning (the events' spans tile the output, and
    the tokens' texts concatenate to it)."""
    spans = [ev.span for ev in run.events if ev.kind == REASONING and ev.span[1] > ev.span[0]]
    n = i = pos = 0
    for tok in run.tokens if spans else ():
        start = pos
        pos += len(tok.text)
        if not tok.text:
            continue
        while i < len(spans) and spans[i][1] <= start:
            i += 1
        if i == len(spans):
            break
        if spans[i][0] <= start:
            n += 1
    return n
