"""OpenAI legacy completions: POST /v1/completions, the raw model text.

Owns `CompletionBody`, `RawRun` and the route. The prompt goes to the engine as it is: no chat
template, no parser, no tool calls; what the model writes comes back as it is (stop strings
cut, as every server does). This is what vLLM, SGLang and llama.cpp's server offer, what
raw-mode clients use, and what lets one Prism be another's upstream
(engine/backends/upstream/engine.py).

Accepted: `prompt` (a string, or a list holding one), `stream` (+ `stream_options.
include_usage`), `max_tokens` (default 16, as OpenAI's; `null` means "until the context is
full"), `temperature`, `top_p`, `top_k`, `min_p`, `repeat_penalty`/`repetition_penalty`, `seed`,
`stop`, `logprobs` (0-20 alternatives per token, in OpenAI's completions shape); other servers'
extra fields (`skip_special_tokens`...) are ignored. Refused with a 400 naming the field:
`echo` (Prism does not return the prompt's tokens), `n`/`best_of` above 1, `suffix`, token-id
prompts, several prompts.

These requests skip the service (no template, no parser), so the window and the recordings do
not show them; the metrics count them (api "completions"). Runs on the asyncio loop's thread;
tokens arrive from the engine's thread through `call_soon_threadsafe`, as `Run.stream()` does.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import model_validator

from app.api import models, runs
from app.api.admission import Ticket
from app.api.convert import Lenient, read_body, sampling, stop_tuple
from app.api.errors import APIError, openai_error_body
from app.api.sse import data_line, dumps, sse_response
from app.api.state import AppState, get_state
from engine.backends.base import Finish, Job, Timings, Token
from engine.catalog import Lease
from engine.service import ContextOverflow, Service

router = APIRouter()
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this endpoint (vLLM and llama-cpp-python agree)
MAX_LOGPROBS = 20
_ids = itertools.count(1)
_DONE = object()


class StreamOptions(Lenient):
    include_usage: bool = False


class CompletionBody(Lenient):
    model: str = ""
    prompt: str | list
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: int | None = None
    echo: bool = False
    n: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    @model_validator(mode="after")
    def _refuse(self) -> CompletionBody:
        if self.echo:
            raise _bad("echo", "'echo' is not supported: Prism returns only the completion, "
                       "not the prompt's tokens; send echo: false (or leave it out)")
        for name in ("n", "best_of"):
            if getattr(self, name) not in (None, 1):
                raise _bad(name, f"Only {name}=1 is supported (one model, one completion)")
        if self.suffix:
            raise _bad("suffix", "'suffix' (fill-in-the-middle) is not supported")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise _bad("max_tokens", "'max_tokens' must be at least 1")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise _bad("logprobs", f"'logprobs' must be between 0 and {MAX_LOGPROBS}")
        return self

    @property
    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) == 1 and isinstance(self.prompt[0], str):
            return self.prompt[0]
        raise _bad("prompt", "'prompt' must be one string (token ids and several prompts are "
                   "not supported)")


def _bad(param: str, message: str) -> APIError:
    return APIError("invalid_request", message, param=param)


class RawRun:
    """One raw completion: the job, its tokens as they come, and how it ended. Has what
    `sse_response` and `runs.wait` use of a `Run` (id, done, cancel, stream, started, tokens,
    finish)."""

    def __init__(self, job: Job, prompt_tokens: int) -> None:
        self.id = f"cmpl-{next(_ids)}-{secrets.token_hex(3)}"
        self.created = time.time()
        self.job = job
        self.prompt_tokens = prompt_tokens
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self._done = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._first = self._loop.create_future()  # the first token, or the finish
        job.on_token = self._on_token
        job.on_finish = self._on_finish

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        self.job.cancel()

    async def stream(self) -> AsyncIterator[Token]:
        while (item := await self._queue.get()) is not _DONE:
            yield item

    async def started(self) -> None:
        """As `Run.started`: once the first token is in, or the job ended."""
        await asyncio.shield(self._first)  # one waiter's cancel must not cancel it for all

    def _started(self) -> None:
        if not self._first.done():
            self._first.set_result(None)

    @property
    def text(self) -> str:
        return "".join(tok.text for tok in self.tokens)

    # engine thread -----------------------------------------------------------------------

    def _on_token(self, tok: Token) -> None:
        self.tokens.append(tok)
        if len(self.tokens) == 1:
            self._loop.call_soon_threadsafe(self._started)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, tok)

    def _on_finish(self, fin: Finish) -> None:
        self.finish = fin
        self._done.set()
        self._loop.call_soon_threadsafe(self._started)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, _DONE)


def logprobs_of(tokens: list[Token], offset: int) -> dict[str, Any]:
    """OpenAI's completions logprobs for these tokens; a token's own logprob is known when it
    is among the alternatives the engine recorded (else null)."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                            "text_offset": []}
    for tok in tokens:
        top = dict(tok.top)
        out["tokens"].append(tok.text)
        out["token_logprobs"].append(top.get(tok.text))
        out["top_logprobs"].append(top)
        out["text_offset"].append(offset)
        offset += len(tok.text)
    return out


async def submit(state: AppState, body: CompletionBody) -> RawRun:
    """Admit the request (app/api/admission.py: 429 past --max-queue, counted from now),
    tokenize its prompt in a worker thread and queue its job."""
    ticket = state.admission.admit(state)
    lease = None
    try:
        lease = await models.lease_for(state, body.model)
        return await _queue(state, models.service_of(state, lease), body, ticket, lease)
    except BaseException:
        if lease is not None:  # its job never reached the engine
            lease.release()
        raise
    finally:
        ticket.release()  # refused or cancelled before its job was queued (else a no-op)


async def _queue(state: AppState, service: Service, body: CompletionBody, ticket: Ticket,
                 lease: Lease | None) -> RawRun:
    engine = service.engine
    prompt = body.text
    ids = await asyncio.to_thread(engine.tokenize, prompt)
    n_ctx, n_prompt = engine.n_ctx, len(ids)
    if n_prompt >= n_ctx or (body.max_tokens and n_prompt + body.max_tokens > n_ctx):
        err = ContextOverflow(n_ctx, n_prompt, body.max_tokens)
        raise APIError("invalid_request", str(err), param="prompt",
                       code="context_length_exceeded")
    job = Job(
        prompt=prompt, prompt_ids=tuple(ids),
        max_tokens=body.max_tokens or max(1, n_ctx - n_prompt),
        sampling=sampling(body.temperature, body.top_p, body.top_k, body.min_p,
                          body.repeat_penalty if body.repeat_penalty is not None
                          else body.repetition_penalty, body.seed),
        stop=stop_tuple(body.stop), top_logprobs=body.logprobs or 0,
        submitted_at=time.perf_counter(),
    )
    run = RawRun(job, n_prompt)
    metrics = service.metrics
    if metrics is not None:
        on_token, on_finish = job.on_token, job.on_finish

        def counted_token(tok: Token) -> None:
            metrics.token(run.id, tok.t)
            on_token(tok)

        def counted_finish(fin: Finish) -> None:
            metrics.request_finished(run.id, fin.reason, fin.timings)
            on_finish(fin)

        job.on_token, job.on_finish = counted_token, counted_finish
        metrics.request_started(run.id, "completions", engine.name, n_prompt)
    if lease is not None:  # the model stays resident until the job ends
        lease.bind(job)
    with ticket.handing():  # counted by the engine's queue from here on
        engine.submit(job)
    return run


def usage(run: RawRun) -> dict:
    t = run.finish.timings if run.finish else Timings()
    prompt = t.prompt_tokens or run.prompt_tokens
    out = t.output_tokens or len(run.tokens)
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


def finish_reason(run: RawRun) -> str:
    return "length" if run.finish is not None and run.finish.reason == "length" else "stop"


@router.post("/v1/completions")
async def completions(request: Request):
    state = get_state(request)
    body = await read_body(request, CompletionBody)
    run = await submit(state, body)
    model = state.reply_model(body.model)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await sse_response(request, run,
                                  stream(run, model, body.logprobs, include_usage), error_event)
    await runs.wait(request, run)
    err = runs.run_error(run)
    if err is not None:
        raise err
    tokens = [tok for tok in run.tokens if tok.text]
    return JSONResponse({
        "id": run.id, "object": "text_completion", "created": int(run.created),
        "model": model,
        "choices": [{"index": 0, "text": run.text,
                     "logprobs": logprobs_of(tokens, 0) if body.logprobs else None,
                     "finish_reason": finish_reason(run)}],
        "usage": usage(run),
    })


def error_event(err: APIError) -> str:
    return data_line(openai_error_body(err)) + "data: [DONE]\n\n"


async def stream(run: RawRun, model: str, logprobs: int | None,
                 include_usage: bool) -> AsyncIterator[str]:
    head = {"id": run.id, "object": "text_completion", "created": int(run.created),
            "model": model}
    prefix = "data: " + dumps(head)[:-1] + ',"choices":[{"index":0,"text":'
    offset = 0
    async for tok in run.stream():
        if not tok.text:
            continue
        lp = dumps(logprobs_of([tok], offset)) if logprobs else "null"
        offset += len(tok.text)
        yield prefix + dumps(tok.text) + ',"logprobs":' + lp + ',"finish_reason":null}]}\n\n'
    err = runs.run_error(run)
    if err is not None:
        yield error_event(err)
        return
    yield data_line({**head, "choices": [{"index": 0, "text": "", "logprobs": None,
                                          "finish_reason": finish_reason(run)}]})
    if include_usage:
        yield data_line({**head, "choices": [], "usage": usage(run)})
    yield "data: [DONE]\n\n"
