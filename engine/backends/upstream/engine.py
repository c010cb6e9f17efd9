"""UpstreamEngine: a remote server's `/v1/completions` behind the Engine protocol.

Prism renders the prompt; vLLM, SGLang, llama.cpp's server, llama-cpp-python's server, Ollama
or another Prism generates it; Prism parses what comes back (docs/design.md, section 5). The
engine owns one daemon thread ("prism-upstream") running its own asyncio loop and one
`httpx.AsyncClient`. Every job is a task on that loop, so jobs are *not* queued behind each
other (the upstream batches); the API layer limits how many are in flight. `on_token` and
`on_finish` are called on the engine's thread, as with the other engines; `submit`, `tokenize`,
`queue_depth`, `state` and `close` may be called from any thread and never block on the network,
so the HTTP server's event loop never waits for the upstream.

Per job: `POST {base}/completions` with the rendered prompt, `stream: true`, the sampling
parameters, stop strings (the request's and the pack's end-of-turn markers), `logprobs` when
top-k alternatives are asked for, and the knobs that keep special tokens in the text where the
server has one: `skip_special_tokens: false` and `spaces_between_special_tokens: false` (vLLM;
SGLang reads the first), `preserved_tokens` (llama.cpp's server: the family's special tokens,
kept as text). Servers ignore the fields they do not know.
Each streamed delta is one `Token`, or one per entry of its logprobs when those split it; token
ids are -1 (OpenAI's completions stream carries none). Reading and writing that wire (error
bodies, deltas, SSE) is engine/backends/upstream/wire.py's.

Errors end the job with reason "error" and `Finish.status`, the HTTP status Prism should answer
with: the upstream's own 4xx (its message kept), 502 for a refused connection, a 5xx or a stream
cut mid-way, 504 for a timeout. Tokens already delivered stay delivered: the caller has them,
and so has the recording. Cancel (any thread) cancels the job's task within `CANCEL_POLL_S`,
which closes the upstream connection, so the upstream stops generating too.

Two figures are estimates until the upstream answers: `tokenize` counts UTF-8 bytes / 4 (a
low guess on purpose, so a prompt is never refused here that the upstream would take; the
upstream enforces its real context and its count replaces ours in the usage), and `n_ctx` is
the context the upstream reports (vLLM's `max_model_len`, llama.cpp's `/props`), else 1<<20.
A job whose `max_tokens` fills the rest of that context is sent with `max_tokens: null`
("until the context is full" on vLLM, llama.cpp and llama-cpp-python).

Reachability: the thread probes `GET {base}/models` at start and every `PROBE_S` seconds while
no job is in flight (a job's own answer, or failure to connect, tells the rest); `load_error`
holds why the last attempt failed (None when it answered), and `/health` reports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.backends.base import Finish, Job, Timings
from engine.backends.upstream.wire import (
    UpstreamError,
    UpstreamInfo,
    api_base,
    split_delta,
    sse_data,
    status_for,
    upstream_message,
)
from engine.chat.request import ChatRequest

log = logging.getLogger("prism")

CANCEL_POLL_S = 0.02
PROBE_S = 5.0
UNKNOWN_CTX = 1 << 20
# Sent with every request: ask the server to keep special tokens in the text (vLLM, SGLang).
KEEP_SPECIAL = {"skip_special_tokens": False, "spaces_between_special_tokens": False}


@dataclass
class _Progress:
    """What one job has produced so far (engine thread only)."""

    start: float
    t_first: float = 0.0
    n_out: int = 0
    usage: dict = field(default_factory=dict)
    stop_sequence: str | None = None


class UpstreamEngine:
    """The Engine protocol over a remote OpenAI-compatible completions endpoint."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        probe_s: float = PROBE_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base = api_base(url)
        self.root = self.base.removesuffix("/v1")
        self.api_key = api_key
        self.model = model or ""
        self.name = self.model or "upstream"
        self.n_ctx = UNKNOWN_CTX
        self.info = UpstreamInfo()
        # Set from the pack once it is known (app/upstream.py): its end-of-turn strings, sent
        # as stop strings too (with special tokens kept, they may come as text), and the
        # special tokens its family reads (llama.cpp's server keeps exactly these as text).
        self.stops: tuple[str, ...] = ()
        self.preserved: tuple[str, ...] = ()
        self.special_texts: tuple[str, ...] = ()  # no vocabulary here (Engine.special_texts)
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._probe_s = probe_s
        self._transport = transport
        self._lock = threading.Lock()
        self._inflight: set[Job] = set()
        self._relays = 0  # `call`s running (the engine loop's thread only)
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._client: httpx.AsyncClient | None = None
        self._thread = threading.Thread(target=self._run, name="prism-upstream", daemon=True)
        self._thread.start()

    # -- any thread ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if self._closed:
            return "closed"
        if not self.ready.is_set():
            return "loading"
        if self._inflight:
            return "generating"
        return "error" if self.load_error else "idle"

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("engine is closed")
            if not job.submitted_at:
                job.submitted_at = time.perf_counter()
            self._inflight.add(job)
        asyncio.run_coroutine_threadsafe(self._serve(job), self._loop)

    def prepare(self, job: Job, request: ChatRequest) -> tuple[str, str] | None:
        return None  # the upstream generates: parsed as the pack says (Engine.prepare)

    def tokenize(self, text: str) -> list[int]:
        # An estimate (see the module docstring); the ids mean nothing, only the count.
        return [0] * ((len(text.encode("utf-8")) + 3) // 4)

    def queue_depth(self) -> int:
        """Requests in flight at the upstream (none wait here)."""
        return len(self._inflight)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel every job in flight (each gets on_finish("cancelled")), then stop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            jobs = list(self._inflight)
        for job in jobs:
            job.cancel()
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def call(self, coro_fn: Callable[..., Coroutine], *args: Any) -> concurrent.futures.Future:
        """Run `coro_fn(client, *args)` on the engine's loop with its HTTP client (the
        pass-through mode, app/api/tap.py, relays on this loop too); cancelling the returned
        future cancels it."""
        async def counted() -> Any:
            self._relays += 1
            try:
                return await coro_fn(self._client, *args)
            finally:
                self._relays -= 1

        return asyncio.run_coroutine_threadsafe(counted(), self._loop)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    # -- engine thread ---------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._client = httpx.AsyncClient(timeout=self._timeout, transport=self._transport,
                                         headers=self.headers())
        probe = self._loop.create_task(self._probe_loop())
        try:
            self._loop.run_forever()
        finally:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(probe)
            self._loop.close()

    async def _shutdown(self) -> None:
        # Let the cancelled jobs finish their on_finish before the loop stops.
        for _ in range(int(2.0 / CANCEL_POLL_S)):
            if not self._inflight:
                break
            await asyncio.sleep(CANCEL_POLL_S)
        assert self._client is not None
        await self._client.aclose()
        self._loop.stop()

    async def _probe_loop(self) -> None:
        while not self._closed:
            # Only while idle: a stream in flight already tells whether the upstream answers,
            # and llama-cpp-python's server interrupts a running completion whenever another
            # request (even GET /v1/models) comes in.
            if not self._inflight and not self._relays:
                await self.discover()
            self.ready.set()
            await asyncio.sleep(self._probe_s)

    async def discover(self) -> UpstreamInfo:
        """Ask the upstream who it is: `GET /v1/models`, then llama.cpp's `GET /props` for
        the chat template and context (404 elsewhere, which is fine)."""
        assert self._client is not None
        try:
            resp = await self._client.get(self.base + "/models", timeout=5.0)
        except httpx.HTTPError as e:
            self.load_error = f"upstream {self.base} unreachable: {type(e).__name__}: {e}"
            return self.info
        if resp.status_code >= 400:
            self.load_error = (f"upstream {self.base}/models answered {resp.status_code}: "
                               f"{upstream_message(resp.status_code, resp.content)}")
            return self.info
        try:
            listed = resp.json().get("data") or []
        except (ValueError, AttributeError):
            self.load_error = (f"upstream {self.base}/models did not answer an OpenAI model "
                               "list: is this the server's /v1 URL?")
            return self.info
        self.load_error = None
        if self.info.model:  # asked once: a model list does not change under a server
            return self.info
        cards = [c for c in listed if isinstance(c, dict)]
        card = next((c for c in cards if c.get("id") == self.model), cards[0] if cards else {})
        n_ctx = card.get("max_model_len") or card.get("context_length") or 0
        props: dict = {}
        chosen = self.model or str(card.get("id") or "")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            # A router (llama.cpp's, a Prism catalog: several models listed) answers for the
            # model named, not the first one it lists.
            several = chosen and len(cards) > 1
            r = await self._client.get(self.root + "/props",
                                       params={"model": chosen} if several else None,
                                       timeout=5.0)
            if r.status_code == 200 and isinstance(r.json(), dict):
                props = r.json()
        gen = props.get("default_generation_settings") or {}
        n_ctx = n_ctx or gen.get("n_ctx") or 0
        self.info = UpstreamInfo(
            model=self.model or str(card.get("id") or ""), n_ctx=int(n_ctx or 0),
            chat_template=str(props.get("chat_template") or ""),
            bos_token=str(props.get("bos_token") or ""),
            eos_token=str(props.get("eos_token") or ""),
            owned_by=str(card.get("owned_by") or ""),
            models=tuple(str(c["id"]) for c in cards if c.get("id")),
        )
        self.model = self.info.model
        self.name = self.model or self.name
        if self.info.n_ctx > 0:
            self.n_ctx = self.info.n_ctx
        return self.info

    def body(self, job: Job) -> dict[str, Any]:
        """The completions request for a job."""
        s = job.sampling
        open_ended = job.max_tokens is None or job.max_tokens >= self.n_ctx - len(job.prompt_ids)
        body: dict[str, Any] = {
            "model": self.model or "default",
            "prompt": job.prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": None if open_ended else job.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "min_p": s.min_p,
            "repetition_penalty": s.repeat_penalty,  # vLLM, SGLang
            "repeat_penalty": s.repeat_penalty,  # llama.cpp, llama-cpp-python
            **KEEP_SPECIAL,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if stops := list(dict.fromkeys(job.stop + self.stops)):
            body["stop"] = stops
        if self.preserved:
            body["preserved_tokens"] = list(self.preserved)
        if job.top_logprobs > 0:
            body["logprobs"] = job.top_logprobs
        if job.grammar:
            body["grammar"] = job.grammar  # llama.cpp and llama-cpp-python (GBNF)
        return body

    async def _serve(self, job: Job) -> None:
        prog = _Progress(start=time.perf_counter())
        task = asyncio.current_task()
        assert task is not None
        watch = self._loop.create_task(self._watch(job, task))
        reason, error, status = "stop", None, None
        try:
            if job.cancelled.is_set():
                raise asyncio.CancelledError
            reason = await self._stream(job, prog)
        except asyncio.CancelledError:
            reason = "cancelled"
        except UpstreamError as e:
            reason, error, status = "error", e.message, e.status
        except httpx.TimeoutException as e:
            reason, status = "error", 504
            error = f"the upstream {self.base} timed out ({type(e).__name__})"
        except httpx.ConnectError as e:
            reason, status = "error", 502
            error = f"could not reach the upstream {self.base}: {e}"
            self.load_error = error
        except httpx.HTTPError as e:  # RemoteProtocolError, ReadError: the stream was cut
            reason, status = "error", 502
            error = (f"the upstream {self.base} cut the stream after {prog.n_out} tokens: "
                     f"{type(e).__name__}: {e}")
        except Exception as e:  # a consumer's on_token, or a reply we cannot read
            reason, status = "error", 502
            error = f"{type(e).__name__}: {e}"
            log.warning("[prism] upstream job failed: %s", error)
        finally:
            watch.cancel()
        with self._lock:
            self._inflight.discard(job)
        self._finish(job, prog, reason, error, status)

    async def _watch(self, job: Job, task: asyncio.Task) -> None:
        # Job.cancel() only sets a threading.Event; polling it here is what lets a cancel from
        # any thread close the upstream stream, even while no token arrives (a long prefill).
        while not job.cancelled.is_set():
            await asyncio.sleep(CANCEL_POLL_S)
        task.cancel()

    async def _stream(self, job: Job, prog: _Progress) -> str:
        assert self._client is not None
        reason = "stop"
        async with self._client.stream("POST", self.base + "/completions",
                                       json=self.body(job)) as resp:
            if resp.status_code >= 400:
                raw = await resp.aread()
                raise UpstreamError(
                    status_for(resp.status_code),
                    f"the upstream answered {resp.status_code}: "
                    f"{upstream_message(resp.status_code, raw)}",
                )
            self.load_error = None
            done = ended = False
            async for data in sse_data(resp.aiter_lines()):
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk or chunk.get("object") == "error":
                    raise UpstreamError(502, "the upstream failed mid-stream: "
                                        + upstream_message(502, data.encode()))
                if isinstance(chunk.get("usage"), dict):
                    prog.usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    self._on_choice(job, prog, choice)
                    if choice.get("finish_reason"):
                        ended = True
                        reason = "length" if choice["finish_reason"] == "length" else "stop"
            # Some servers close right after the chunk that says how it ended; without that
            # chunk or [DONE], the stream was cut.
            if not (done or ended):
                raise httpx.RemoteProtocolError("the stream ended without a finish_reason")
        return reason

    def _on_choice(self, job: Job, prog: _Progress, choice: dict) -> None:
        stop = choice.get("stop_reason", choice.get("matched_stop"))
        if isinstance(stop, str) and stop in job.stop:  # not the pack's own end-of-turn
            prog.stop_sequence = stop
        text = choice.get("text") or ""
        if not text:
            return
        now = time.perf_counter()
        prog.t_first = prog.t_first or now
        for tok in split_delta(text, choice.get("logprobs"), now):
            prog.n_out += 1
            job.on_token(tok)

    def _finish(self, job: Job, prog: _Progress, reason: str, error: str | None,
                status: int | None) -> None:
        end = time.perf_counter()
        t_first = prog.t_first or end
        submitted = job.submitted_at or prog.start
        usage = prog.usage
        timings = Timings(
            queue_ms=(prog.start - submitted) * 1000.0,
            # Network, the upstream's own queue and its prefill: all that precedes token one.
            prompt_ms=(t_first - prog.start) * 1000.0,
            ttft_ms=(t_first - submitted) * 1000.0,
            decode_ms=(end - t_first) * 1000.0 if prog.n_out else 0.0,
            prompt_tokens=int(usage.get("prompt_tokens") or len(job.prompt_ids)),
            cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                              or 0),
            output_tokens=int(usage.get("completion_tokens") or prog.n_out),
        )
        try:
            job.on_finish(Finish(reason, timings, error,
                                 prog.stop_sequence if reason == "stop" else None,
                                 status=status))
        except Exception:
            log.exception("[prism] on_finish callback failed")
