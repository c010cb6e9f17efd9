"""Server-sent events: encoding, and a streaming response that cancels its job when it ends early.

Owns `dumps`, `data_line`, `event_lines` and `sse_response`. A stream body is an async
generator written by an API module; `sse_response` wraps it so that however the body stops
(finished, client gone, server shutting down) the run is cancelled if it is still going: the
engine stops at its next token instead of generating for nobody.

How a disconnect reaches us: uvicorn (ASGI spec 2.3) makes Starlette's StreamingResponse listen
for `http.disconnect` while it streams, and cancel the body when it comes, even if no token is
being written at the time (a long prompt decode). Under spec 2.4 the next write fails instead.
Either way the body's `finally` below runs.

The status line waits for the run's first token (or its end; issue 24, item 2): a run the
engine or the upstream refused before writing anything (an upstream's 4xx, a grammar llama.cpp
cannot parse, a prompt the engine finds too long) is then answered with the API's error body
and status, as a non-streamed request is, not with a 200 whose stream holds only an error
event. A normal reply is not held past its first token; while the prompt is read the client
waits for headers instead of for its first chunk, and one that leaves meanwhile cancels the
job (`runs.started`). Runs on the asyncio loop's thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from app.api import runs
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


async def sse_response(
    request: Request, run: Run, body: AsyncGenerator[str, None],
    error_event: Callable[[APIError], str],
) -> StreamingResponse:
    """Stream `body` once the run has its first token; a run that ended before writing any
    is answered with its error instead, if it ended in one (raised: the API's error body and
    status). A failure inside the body (a bug, not a client) ends the stream with
    `error_event(error)`, the API's final error event, since the status line is sent."""
    try:
        await runs.started(request, run)  # ClientGone if the client left first
        err = runs.run_error(run) if run.done and not run.tokens else None
    except BaseException:
        await body.aclose()
        raise
    if err is not None:
        await body.aclose()
        raise err

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
