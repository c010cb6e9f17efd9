"""`--upstream`'s embeddings: POST /v1/embeddings forwarded to the upstream's own.

Owns `forward(engine, body)`: the request body (already read and checked by the API layer) is
sent to `{base}/embeddings` with the upstream's key, and the upstream's JSON answer comes back
unchanged; anything else becomes an `UpstreamError` whose `status` is what Prism answers (the
mapping engine/backends/upstream/wire.py gives the completions path: the upstream's own 4xx with
its message, 502 for its failures, a refused key or a refused connection, 504 for a timeout).

Threads: the exchange runs on the UpstreamEngine's loop and thread ("prism-upstream", through
`UpstreamEngine.call`); `forward` returns a concurrent future, so the server's event loop awaits
it and never waits on the network itself.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import httpx

from engine.backends.upstream.engine import UpstreamEngine
from engine.backends.upstream.wire import UpstreamError, status_for, upstream_message


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = await client.post(url, json=body)
    except httpx.TimeoutException as e:
        raise UpstreamError(504, f"the upstream {url} timed out: {type(e).__name__}") from None
    except httpx.HTTPError as e:
        raise UpstreamError(502, f"the upstream {url} failed: {type(e).__name__}: {e}") from None
    if resp.status_code >= 400:
        message = upstream_message(resp.status_code, resp.content)
        raise UpstreamError(status_for(resp.status_code),
                            f"the upstream answered {resp.status_code}: {message}")
    try:
        data = resp.json()
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UpstreamError(502, f"the upstream {url} did not answer an OpenAI embedding list")
    return data


def forward(engine: UpstreamEngine, body: dict[str, Any]) -> concurrent.futures.Future:
    """POST `body` to the upstream's /v1/embeddings; the future's result is its JSON reply,
    or it raises UpstreamError."""
    return engine.call(_post, engine.base + "/embeddings", body)
