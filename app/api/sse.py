"""Server-sent events: encoding, and a streaming response that cancels its job when it ends early.

Owns `dumps`, `data_line`, `event_lines` and `sse_response`. A stream body is an async
generator written by an API module; `sse_response` wraps it so that however the body stops
(finished, client gone, server shutting down) the run is cancelled if it is still going: the
engine stops at its next token instead of generating for nobody.

How a disconnect reaches us: uvicorn (ASGI spec 2.3) makes Starlette's StreamingResponse listen
for `http.disconnect` while it streams, and cancel the body when it comes, even if no token is
being written at the time (a long prompt decode). Under spec 2.4 the next write fails instead.
Either way the body's `finally` below runs. Runs on the asyncio loop's thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from fastapi.responses import StreamingResponse

from app.api.errors import APIError, from_exception
from engine.service import Run

log = logging.getLogger("prism")

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a reverse proxy must not buffer the stream
}

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps(obj: object) -> str:
    """Compact JSON, non-ASCII kept as is (smaller, and what llama.cpp sends)."""
    return _encode(obj)


def data_line(obj: object) -> str:
    return f"data: {_encode(obj)}\n\n"


def event_lines(event: str, obj: object) -> str:
    return f"event: {event}\ndata: {_encode(obj)}\n\n"


def sse_response(
    run: Run, body: AsyncGenerator[str, None], error_event: Callable[[APIError], str]
) -> StreamingResponse:
    """Stream `body`; a failure inside it (a bug, not a client) ends the stream with
    `error_event(error)`, the API's final error event, since the status line is sent."""

    async def guarded() -> AsyncIterator[str]:
        try:
            async for chunk in body:
                yield chunk
        except Exception as e:
            log.exception("[prism] stream of %s failed", run.id)
            yield error_event(from_exception(e))
        finally:
            if not run.done:
                run.cancel()
            await body.aclose()

    return StreamingResponse(guarded(), media_type="text/event-stream", headers=SSE_HEADERS)
