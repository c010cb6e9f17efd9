"""The OpenAI Embeddings API: POST /v1/embeddings.

Owns the request body (`input`: a string, a list of strings, one token array, a list of token
arrays; `encoding_format` float or base64; `dimensions`; `model`; `user`), its checks, and the
reply: `{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage": {"prompt_tokens", "total_tokens"}}`. base64 is the vector's float32 values,
little-endian, as OpenAI sends them (the official SDKs ask for it by default and decode it).

Where the vectors come from (with a model catalog, the model the request's `model` names, loaded
on demand as for a chat, app/api/models.py): the local model's `Embedder`
(engine/backends/llama/embed.py, the service's `embedder`: mean pooling over the model's own
hidden states, on its worker thread), or, under `--upstream` (and `--tap`), the upstream's
/v1/embeddings (engine/backends/upstream/embeddings.py), whose answer is passed through. A
server with neither (a replay, or `--no-embeddings`) says so in a 400. `dimensions` is accepted
only when it equals the model's own size: Prism does not shorten vectors (a Matryoshka cut is
only meaningful for models trained for it). An input over what the model embeds at once is
refused naming its index and both counts.

Embedding requests do not go through `--max-queue` admission: they never wait for a generation
slot; the embedder's own small queue answers 429 when full.

Runs on the asyncio loop's thread; it only awaits futures (the embedder's worker, the upstream
engine's loop) and renders large replies in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import StrictInt, StrictStr

from app.api.convert import Lenient, validate
from app.api.errors import APIError, kind_for_status
from app.api.models import lease_for, service_of
from app.api.state import AppState, get_state
from app.api.tap import TapEngine
from app.api.validate import parse_json
from engine.backends.llama.embed import (
    EmbedBusy,
    Embedded,
    EmbedUnavailable,
    InputInvalid,
    InputTooLong,
)
from engine.backends.upstream.embeddings import forward
from engine.backends.upstream.engine import UpstreamEngine
from engine.backends.upstream.wire import UpstreamError
from engine.service import Service

router = APIRouter()
MAX_INPUTS = 2048  # OpenAI's limit of inputs per request


class EmbeddingsBody(Lenient):
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    model: str = ""
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: str | None = None


def inputs_of(body: EmbeddingsBody) -> list[str | list[int]]:
    """The inputs, one per vector: a list of ints is one token array, not several inputs."""
    given = body.input
    if isinstance(given, str):
        return [given]
    if not given:
        raise APIError("invalid_request", "'input' must not be empty", param="input")
    if isinstance(given[0], int):
        return [list(given)]  # type: ignore[arg-type]
    if len(given) > MAX_INPUTS:
        raise APIError("invalid_request", f"'input' has {len(given)} items; at most "
                       f"{MAX_INPUTS} may be embedded in one request", param="input")
    return list(given)  # type: ignore[arg-type]


def encode(vector: tuple[float, ...], fmt: str) -> list[float] | str:
    if fmt == "float":
        return list(vector)
    # float32, little-endian whatever this machine's order ('<' fixes it).
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def reply(result: Embedded, model: str, fmt: str) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": encode(v, fmt)}
            for i, v in enumerate(result.vectors)]
    usage = {"prompt_tokens": result.n_tokens, "total_tokens": result.n_tokens}
    return json.dumps({"object": "list", "data": data, "model": model, "usage": usage},
                      separators=(",", ":")).encode("utf-8")


def upstream_of(service: Service) -> UpstreamEngine | None:
    engine = service.engine
    if isinstance(engine, TapEngine):
        return engine.upstream
    return engine if isinstance(engine, UpstreamEngine) else None


@router.post("/v1/embeddings")
async def embeddings(request: Request):
    state = get_state(request)
    data = parse_json(await request.body())
    body = validate(EmbeddingsBody, data)
    inputs = inputs_of(body)
    if body.dimensions is not None and body.dimensions < 1:
        raise APIError("invalid_request", "'dimensions' must be at least 1", param="dimensions")
    # With a catalog the request's `model` picks the catalog entry (loaded on demand, and
    # held by the lease so it is not evicted while it embeds); without one, the one service.
    lease = await lease_for(state, body.model)
    try:
        service = service_of(state, lease)
        upstream = upstream_of(service)
        if upstream is not None:
            return await pass_through(state, upstream, data)
        model = lease.model if lease is not None else state.reply_model(body.model)
        return await embed(service, model, inputs, body)
    finally:
        if lease is not None:
            lease.release()


async def embed(service: Service, model: str, inputs: list[str | list[int]],
                body: EmbeddingsBody) -> Response:
    embedder = getattr(service, "embedder", None)
    if embedder is None:
        why = ("it was started with --no-embeddings"
               if getattr(service.engine, "model_path", None) is not None
               else "it has no model to embed with (it replays recorded outputs)")
        raise APIError("invalid_request", f"The model '{model}' cannot create embeddings on "
                       f"this server: {why}", param="model", code="embeddings_unsupported")
    if body.dimensions is not None and body.dimensions != embedder.dimensions:
        raise APIError("invalid_request", f"'dimensions' {body.dimensions} is not supported: "
                       f"the model '{model}' gives vectors of {embedder.dimensions} dimensions, "
                       "and Prism does not shorten them", param="dimensions",
                       code="unsupported_dimensions")
    try:
        result = await asyncio.wrap_future(embedder.submit(inputs))
    except InputTooLong as e:
        raise APIError("invalid_request", f"{e} (the embedding context, --embed-ctx)",
                       param="input", code="context_length_exceeded") from None
    except InputInvalid as e:
        raise APIError("invalid_request", str(e), param="input") from None
    except EmbedBusy as e:
        raise APIError("rate_limit", f"Too many embedding requests: {e}",
                       headers={"Retry-After": "1"}) from None
    except EmbedUnavailable as e:
        raise APIError("invalid_request", f"The model '{model}' cannot create embeddings: {e}",
                       param="model", code="embeddings_unsupported") from None
    # A large reply (2,048 vectors of a thousand floats) takes a while to write out: not here.
    content = await asyncio.to_thread(reply, result, model, body.encoding_format)
    return Response(content, media_type="application/json")


async def pass_through(state: AppState, upstream: UpstreamEngine, data: dict[str, Any]):
    """The upstream's answer, unchanged. A request naming Prism's own model (or none) names
    the upstream's instead; any other name goes as it is (an upstream serving several models:
    Ollama's nomic-embed-text, say)."""
    named = data.get("model") or ""
    target = upstream.model or upstream.info.model
    if target and named in ("", state.model_id):
        data = {**data, "model": target}
    try:
        answer = await asyncio.wrap_future(forward(upstream, data))
    except UpstreamError as e:
        raise APIError(kind_for_status(e.status), e.message,
                       code="upstream_error" if e.status >= 500 else None) from None
    content = await asyncio.to_thread(json.dumps, answer, separators=(",", ":"))
    return Response(content, media_type="application/json")

