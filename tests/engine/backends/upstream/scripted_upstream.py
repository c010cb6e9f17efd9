"""A tiny scripted upstream for the error table: raw HTTP/1.1 on a loopback socket, so a test can
answer exactly what a real server would in its worst moments (refuse, 4xx, 500, stall, cut the
stream mid-way) and see what Prism sent and whether Prism hung up.

`ScriptedUpstream(script)` answers `GET /v1/models` (and 404 to `/props`) itself and hands
every other request to `script(request, reply)`, a coroutine on the server's own loop and
thread. `reply` writes a JSON answer, or an SSE stream chunk by chunk; `request.body` is the
parsed JSON. `requests` keeps those requests; `hangups` counts the streams the client closed
before they ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

MODEL = "scripted-model"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict = field(default_factory=dict)
    raw: bytes = b""


class Reply:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                          f"content-length: {len(data)}\r\nconnection: close\r\n\r\n".encode()
                          + data)
        await self.writer.drain()

    async def start_stream(self, headers: str = "") -> None:
        """`headers`: extra header lines, each ending in CRLF."""
        self.writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                          + headers.encode() +
                          b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        await self.writer.drain()

    async def event(self, payload: object) -> None:
        """One `data:` event as one HTTP chunk."""
        text = payload if isinstance(payload, str) else json.dumps(payload)
        await self.send(f"data: {text}\n\n".encode())

    async def send(self, data: bytes) -> None:
        """Any bytes, as one HTTP chunk."""
        self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await self.writer.drain()

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()

    def cut(self) -> None:
        """Drop the connection mid-stream, without the final chunk."""
        self.writer.transport.abort()


def chunk(text: str, finish: str | None = None, **extra) -> dict:
    return {"id": "cmpl-x", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                         **extra}]}


async def stream_texts(reply: Reply, texts: list[str], finish: str = "stop",
                       delay: float = 0.0) -> None:
    await reply.start_stream()
    for text in texts:
        if delay:
            await asyncio.sleep(delay)
        await reply.event(chunk(text))
    await reply.event(chunk("", finish))
    await reply.event("[DONE]")
    await reply.end_stream()


Script = Callable[[Seen, Reply], Awaitable[None]]


class ScriptedUpstream:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[Seen] = []
        self.hangups = 0
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedUpstream:
        self.thread.start()
        self._started.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, sock=self.sock))
        self._started.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        seen = Seen(method, path, headers, json.loads(raw) if raw else {}, raw)
        reply = Reply(reader, writer)
        try:
            if path == "/v1/models":
                await reply.json(200, {"object": "list", "data": [
                    {"id": MODEL, "object": "model", "owned_by": "scripted",
                     "max_model_len": 4096}]})
            elif path == "/props":  # not llama.cpp's server: no template to publish
                await reply.json(404, {"error": {"message": "Not Found"}})
            else:
                self.requests.append(seen)
                await self.script(seen, reply)
        except (ConnectionError, RuntimeError):
            self.hangups += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
