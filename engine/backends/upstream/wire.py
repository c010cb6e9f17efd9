"""The OpenAI-compatible wire, as engine/backends/upstream/engine.py reads and writes it: no I/O,
no threads.

Owns `UpstreamError` (what went wrong, with the HTTP status Prism answers), `UpstreamInfo` (what
a server says about itself), the URL and error-body helpers, `split_delta` (a streamed
completions delta as tokens, with its logprobs in either shape servers send) and `sse_data`
(the `data:` payloads of a server-sent event stream).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from engine.backends.base import Token


class UpstreamError(Exception):
    """The upstream did not answer as hoped. `status` is what Prism answers its own caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class UpstreamInfo:
    """What the upstream says about itself (any field may be unknown)."""

    model: str = ""
    n_ctx: int = 0
    chat_template: str = ""
    bos_token: str = ""
    eos_token: str = ""
    owned_by: str = ""
    # Every id its /v1/models lists (a llama.cpp router or a Prism catalog lists several).
    models: tuple[str, ...] = ()


def api_base(url: str) -> str:
    """The OpenAI base URL (ending in /v1) for what a user typed: `host:8000`, `.../v1/`."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def upstream_message(status: int, body: bytes) -> str:
    """The message inside an error body, whichever server's shape it has."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or f"HTTP {status}"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or data.get("message")
            if msg:
                return str(msg)
        elif isinstance(err, str):
            return err
        if isinstance(data.get("detail"), str | list):
            return json.dumps(data["detail"]) if isinstance(data["detail"], list) \
                else data["detail"]
    return text[:500]


def status_for(upstream_status: int) -> int:
    """What Prism answers when the upstream answered `upstream_status`: a client error stays
    that client error (it is about the request); the upstream's own failures, and its refusal
    of Prism's key, are a bad gateway."""
    if upstream_status in (401, 403):
        return 502
    if 400 <= upstream_status < 500:
        return upstream_status
    return 502


def _top(entry: Any) -> tuple[tuple[str, float], ...]:
    """Alternatives from one logprobs entry: {text: lp} (OpenAI completions) or
    [{"token", "logprob"}] (llama.cpp's chat-style)."""
    if isinstance(entry, dict):
        pairs = [(str(k), float(v)) for k, v in entry.items() if v is not None]
    elif isinstance(entry, list):
        pairs = [(str(e.get("token", "")), float(e.get("logprob", 0.0)))
                 for e in entry if isinstance(e, dict)]
    else:
        return ()
    return tuple(sorted(pairs, key=lambda p: -p[1]))


def split_delta(text: str, logprobs: Any, t: float) -> list[Token]:
    """One streamed delta as tokens: one per logprobs entry when they spell the text, else
    the whole delta as one token (with the first entry's alternatives, if any)."""
    entries: list[tuple[str, tuple]] = []
    if isinstance(logprobs, dict):
        if isinstance(logprobs.get("tokens"), list):  # OpenAI completions shape
            tops = logprobs.get("top_logprobs") or []
            entries = [(str(tok), _top(tops[i]) if i < len(tops) else ())
                       for i, tok in enumerate(logprobs["tokens"])]
        elif isinstance(logprobs.get("content"), list):  # llama.cpp's chat-style shape
            entries = [(str(e.get("token", "")), _top(e.get("top_logprobs")))
                       for e in logprobs["content"] if isinstance(e, dict)]
    if len(entries) > 1 and "".join(tok for tok, _ in entries) == text:
        return [Token(-1, tok, t, top) for tok, top in entries]
    return [Token(-1, text, t, entries[0][1] if entries else ())]


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent event stream (multi-line data joined)."""
    buf: list[str] = []
    async for line in lines:
        if not line:
            if buf:
                yield "\n".join(buf)
                buf = []
            continue
        if line.startswith("data:"):
            buf.append(line[5:].removeprefix(" "))
    if buf:
        yield "\n".join(buf)
