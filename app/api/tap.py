"""`prism serve --upstream URL --tap`: pass-through mode, to audit a remote server's own parsing.

Owns `TapEngine`, `Relay` and the routes that replace Prism's own for POST /v1/chat/completions,
/v1/messages and /v1/responses when the service's engine is a `TapEngine` (app/upstream.py
makes one for `--tap`; the window's server gets the same routes). Each request goes to the same
path on the upstream byte for byte (headers too, less hop-by-hop ones; the upstream key, when
Prism has one, replaces the caller's), and the upstream's answer comes back byte for byte, status
and headers included, as it streams. Meanwhile Prism reads that answer (app/api/tap_readers.py),
rebuilds the raw output in the pack's syntax, and feeds it through an ordinary run of the
service: the window shows the upstream's reasoning, content and calls in its panes, the recorder
keeps the request and the output, the metrics count it, and `upstream_leak` anomalies mark what
the upstream's parser let through (a call or a think tag left in its text).

Threads: the routes run on the server's loop; the upstream HTTP runs on the UpstreamEngine's own
loop and thread (`UpstreamEngine.call`), and its chunks come back through
`call_soon_threadsafe`, so a slow upstream never blocks the server's loop. The run's tokens are
delivered on the server's loop (the per-token pipeline runs on the thread that delivers the
token: docs/design.md, section 3).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.api import anthropic, openai, responses
from app.api.convert import validate
from app.api.errors import APIError
from app.api.state import AppState, get_state
from app.api.tap_readers import READERS, LeakWatch, Reader, Synth
from engine.backends.base import Finish, Job, Timings, Token
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.request import ChatRequest
from engine.service import Run

log = logging.getLogger("prism")
router = APIRouter()
# Not forwarded either way: they describe one connection, not the message.
HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "te", "trailer",
                 "upgrade", "proxy-authorization", "proxy-authenticate", "content-length",
                 "accept-encoding", "content-encoding"})
AUTH = frozenset({"authorization", "x-api-key"})


class TapEngine:
    """The Engine protocol in pass-through mode: the UpstreamEngine's, except that a job
    submitted inside `claim()` goes nowhere (the tap route feeds it from the upstream's
    answer). Everything else, the GUI's Compose and POST /v1/completions, is raw mode."""

    def __init__(self, upstream: UpstreamEngine) -> None:
        self.upstream = upstream
        self._claims = threading.local()
        self.taps = 0  # tap requests in flight (the server loop's thread only)

    name = property(lambda self: self.upstream.name)
    n_ctx = property(lambda self: self.upstream.n_ctx)
    ready = property(lambda self: self.upstream.ready)
    load_error = property(lambda self: self.upstream.load_error)
    base = property(lambda self: self.upstream.base)
    special_texts = property(lambda self: self.upstream.special_texts)

    @property
    def state(self) -> str:
        return "generating" if self.taps else self.upstream.state

    def submit(self, job: Job) -> None:
        claimed = getattr(self._claims, "jobs", None)
        if claimed is not None:
            claimed.append(job)
        else:
            self.upstream.submit(job)

    @contextlib.contextmanager
    def claim(self) -> Iterator[list[Job]]:
        """Jobs submitted on this thread inside the block are the caller's to feed."""
        self._claims.jobs = claimed = []
        try:
            yield claimed
        finally:
            self._claims.jobs = None

    def prepare(self, job: Job, request: ChatRequest) -> tuple[str, str] | None:
        return self.upstream.prepare(job, request)

    def tokenize(self, text: str) -> list[int]:
        return self.upstream.tokenize(text)

    def queue_depth(self) -> int:
        return self.upstream.queue_depth() + self.taps

    def close(self, timeout: float = 10.0) -> None:
        self.upstream.close(timeout)


class UpstreamCut(ConnectionError):
    """Raised inside a relayed body when the upstream's stream broke: the server then drops
    the caller's connection the same way, rather than ending the reply as if it were whole."""


class Relay:
    """One forwarded request. The HTTP exchange runs on the upstream engine's loop; `get()`
    (on the caller's loop) returns ("head", status, headers), ("data", bytes)..., then ("end",)
    or ("error", exception)."""

    def __init__(self, upstream: UpstreamEngine, url: str, body: bytes,
                 headers: dict[str, str]) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._future = upstream.call(self._pump, url, body, headers)

    async def _pump(self, client: httpx.AsyncClient, url: str, body: bytes,
                    headers: dict[str, str]) -> None:
        try:
            async with client.stream("POST", url, content=body, headers=headers) as resp:
                self._put(("head", resp.status_code, resp.headers))
                async for data in resp.aiter_raw():
                    self._put(("data", data))
            self._put(("end",))
        except httpx.HTTPError as e:
            self._put(("error", e))

    def _put(self, item: tuple) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def get(self) -> tuple:
        return await self._queue.get()

    def cancel(self) -> None:
        self._future.cancel()  # cancels the task on the engine's loop: the connection closes


def to_request(path: str, data: dict):
    """The ChatRequest a body stands for, in its API's own terms."""
    if path == "/v1/chat/completions":
        return openai.to_chat_request(validate(openai.ChatBody, data))
    if path == "/v1/messages":
        return anthropic.to_chat_request(validate(anthropic.MessagesBody, data))
    return responses.to_chat_request(validate(responses.ResponsesBody, data))[0]


class Tapped:
    """The run a forwarded request is shown and recorded as, fed from the upstream's answer.
    Requests Prism cannot read as its API (the upstream will say why) are forwarded without."""

    def __init__(self, state: AppState, engine: TapEngine, path: str,
                 request: ChatRequest | None) -> None:
        self.run: Run | None = None
        self.job: Job | None = None
        self.reader: Reader | None = None
        self.start = time.perf_counter()
        self.t_first = 0.0
        self.n_out = 0
        self.error: str | None = None  # why no run (the request could not be read as one)
        self.stream = False  # set from the upstream's answer (an SSE stream or one body)
        if request is None:
            return
        try:
            with engine.claim() as claimed:
                run = state.service.submit(request)
        except Exception as e:  # a template that refuses the conversation, say
            self.error = f"{type(e).__name__}: {e}"
            return
        synth = Synth(state.service.pack.family, run.start_state)
        run.pipeline.add_filter(LeakWatch(synth), first=True)  # before any token is fed
        self.run, self.job = run, claimed[0]
        self.reader = READERS[path](synth)

    @classmethod
    async def open(cls, state: AppState, engine: TapEngine, path: str, raw: bytes) -> Tapped:
        """Read the body as its API's request and start its run. Rendering and tokenizing
        run in a worker thread, as for Prism's own routes (app/api/runs.py)."""
        try:
            request = to_request(path, json.loads(raw))
        except (APIError, ValueError, TypeError, AttributeError):
            request = None  # not readable as its API's request: forwarded all the same
        return await asyncio.to_thread(cls, state, engine, path, request)

    @property
    def cancelled(self) -> bool:
        return self.job is not None and self.job.cancelled.is_set()

    def flush(self) -> None:
        if self.job is None or self.reader is None:
            return
        piece = self.reader.synth.pieces()
        if piece:
            now = time.perf_counter()
            self.t_first = self.t_first or now
            self.n_out += 1
            self.job.on_token(Token(-1, piece, now))

    def read(self, events: list[dict]) -> None:
        """Feed streamed events to the run. Whatever goes wrong here must not disturb what is
        relayed: the run ends with the error and reads no more."""
        try:
            for obj in events:
                if self.reader is None:
                    return
                self.reader.event(obj)
                self.flush()
        except Exception as e:
            log.exception("[prism] --tap: reading the upstream's answer failed")
            self.reader = None
            self.end("error", f"reading the upstream's answer failed: {type(e).__name__}: {e}")

    def end(self, reason: str, error: str | None = None, status: int | None = None) -> None:
        """Finish the run (once). Never raises: the relay to the caller must not break."""
        if self.job is None:
            return
        job, self.job = self.job, None
        try:
            if self.reader is not None:
                self.reader.end()
                piece = self.reader.synth.pieces()
                if piece:
                    self.n_out += 1
                    job.on_token(Token(-1, piece, time.perf_counter()))
            end = time.perf_counter()
            t_first = self.t_first or end
            job.on_finish(Finish(reason, Timings(
                prompt_ms=(t_first - self.start) * 1000.0,
                ttft_ms=(t_first - self.start) * 1000.0,
                decode_ms=(end - t_first) * 1000.0 if self.n_out else 0.0,
                prompt_tokens=self.run.prompt_tokens if self.run else 0,
                output_tokens=self.n_out,
            ), error, status=status))
        except Exception:
            log.exception("[prism] --tap: finishing the run failed")


class SSESplitter:
    """Bytes in, the JSON objects of complete `data:` events out ([DONE] and non-JSON skipped)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buf = ""

    def feed(self, data: bytes) -> list[dict]:
        self._buf += self._decoder.decode(data).replace("\r\n", "\n")
        *blocks, self._buf = self._buf.split("\n\n")
        out = []
        for block in blocks:
            payload = "\n".join(ln[5:].removeprefix(" ") for ln in block.split("\n")
                                if ln.startswith("data:"))
            if payload and payload != "[DONE]":
                with contextlib.suppress(ValueError):
                    obj = json.loads(payload)
                    if isinstance(obj, dict):
                        out.append(obj)
        return out


def forward_headers(request: Request, state: AppState, upstream: UpstreamEngine,
                    path: str) -> dict[str, str]:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
    if upstream.api_key or state.config.api_key:
        # The caller's key is Prism's (or the upstream key replaces it): never pass it on.
        headers = {k: v for k, v in headers.items() if k.lower() not in AUTH}
    if upstream.api_key and path == "/v1/messages":
        headers["x-api-key"] = upstream.api_key  # Anthropic-style servers read this one
    headers["accept-encoding"] = "identity"  # so Prism can read what it relays
    return headers


async def tap(request: Request):
    state = get_state(request)
    engine = state.service.engine
    assert isinstance(engine, TapEngine)
    path = request.url.path
    # Counted from now (app/api/admission.py), as `taps` once forwarded: in flight either way.
    ticket = state.admission.admit(state, "in flight at the upstream")
    try:
        raw = await request.body()
        url = (engine.upstream.root + path
               + (f"?{request.url.query}" if request.url.query else ""))
        # Forwarded first: the run is opened (its template rendered) while the upstream works.
        relay = Relay(engine.upstream, url, raw,
                      forward_headers(request, state, engine.upstream, path))
        with ticket.handing():
            engine.taps += 1
    finally:
        ticket.release()  # the caller left while its body was read (else a no-op)
    tapped = None
    try:
        tapped = await Tapped.open(state, engine, path, raw)
        first = await relay.get()
    except BaseException:  # the caller left (or the server stops) before the answer began
        engine.taps -= 1
        relay.cancel()
        if tapped is not None:
            tapped.end("cancelled")
        raise
    if first[0] == "error":
        engine.taps -= 1
        err = first[1]
        timeout = isinstance(err, httpx.TimeoutException)
        message = (f"the upstream {engine.upstream.base} "
                   f"{'timed out' if timeout else 'could not be reached'}: {err}")
        tapped.end("error", message, 504 if timeout else 502)
        raise APIError("gateway_timeout" if timeout else "bad_gateway", message)
    _, status, up_headers = first
    # Read as the upstream answered, whatever was asked: some servers ignore `stream`.
    tapped.stream = "text/event-stream" in up_headers.get("content-type", "")
    # uvicorn writes its own Date and Server: the upstream's would be second copies.
    headers = {k: v for k, v in up_headers.items()
               if k.lower() not in HOP and k.lower() not in ("date", "server")}
    return StreamingResponse(relay_body(engine, relay, tapped, status), status_code=status,
                             headers=headers)


async def relay_body(engine: TapEngine, relay: Relay, tapped: Tapped,
                     status: int) -> AsyncIterator[bytes]:
    sse = SSESplitter()
    whole = bytearray()
    ended = False
    try:
        while True:
            item = await relay.get()
            if item[0] == "end":
                break
            if item[0] == "error":  # cut mid-way: so is the caller's, as the upstream did it
                tapped.end("error", f"the upstream cut the stream: {item[1]}", 502)
                ended = True
                raise UpstreamCut(str(item[1]))
            data = item[1]
            yield data  # first to the caller, unchanged; then read
            if tapped.reader is not None and tapped.stream and status < 400:
                tapped.read(sse.feed(data))
            else:
                whole += data  # a whole JSON answer, or an error body
            if tapped.cancelled:
                break
        if status >= 400:
            tapped.end("error", f"the upstream answered {status}: "
                       f"{whole.decode('utf-8', 'replace')[:500]}", status)
        elif tapped.reader is not None:
            reader = tapped.reader
            if not tapped.stream:
                try:
                    reader.whole(json.loads(bytes(whole)))
                except Exception as e:  # not the JSON its API answers: shown as an error
                    reader.error = f"unreadable answer: {type(e).__name__}: {e}"
            tapped.end("error" if reader.error else reader.reason, reader.error,
                       502 if reader.error else None)
        ended = True
    finally:
        engine.taps -= 1
        if not ended:  # the caller left (or the run was stopped): the upstream stops too
            relay.cancel()
            tapped.end("cancelled")


for _path in READERS:
    router.add_api_route(_path, tap, methods=["POST"])
