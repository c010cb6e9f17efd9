"""Which model serves a request, and the model routes: /v1/models and llama.cpp's router API.

Owns `lease_for` (the one way every route finds its service: without a catalog, the one
service; with one, a `Lease` on the model the request's `model` names, waiting while it loads,
at most `--load-timeout`, then a 503 with Retry-After; an unknown name is a 404 naming the
ids there are), `model_cards` and the router endpoints as llama.cpp documents them:
`GET /models` (and `/v1/models`: every model with `status: {"value": ...}`), `POST
/models/load`, `POST /models/unload` (`{"model": id}` → `{"success": true}`) and `GET
/models/sse` (one `model_status` event per change). Open WebUI's llama.cpp provider reads
`status.value` and calls these.

Runs on the asyncio loop's thread; it never waits on a load itself: the catalog's loader
thread (engine/catalog.py) calls back, and the waiting request is woken through
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.api.errors import APIError
from app.api.redact import without_paths
from app.api.state import AppState, get_state
from engine.catalog import Catalog, CatalogEvent, Lease, ModelFailed, ModelStatus, UnknownModel
from engine.service import Service

router = APIRouter()


def default_model(catalog: Catalog) -> str:
    """What a request naming no model gets: the model used last that is resident, else the
    first listed."""
    loaded = [s for s in catalog.statuses() if s.state == "loaded"]
    if loaded:
        return max(loaded, key=lambda s: s.last_used).id
    return catalog.ids[0]


def _unknown(e: UnknownModel) -> APIError:
    return APIError("not_found", f"The model '{e.name}' does not exist; this server has "
                    f"{', '.join(repr(n) for n in e.names)}", param="model",
                    code="model_not_found")


def _failed(model: str, why: str) -> APIError:
    return APIError("unavailable", f"The model '{model}' failed to load: {without_paths(why)}",
                    code="model_load_failed", headers={"Retry-After": "30"})


def resolve(catalog: Catalog, name: str) -> str:
    try:
        return catalog.resolve(name or default_model(catalog))
    except UnknownModel as e:
        raise _unknown(e) from None


async def lease_for(state: AppState, name: str) -> Lease | None:
    """The lease on the model `name` names (None without a catalog: `state.service` serves
    every request). Waits while the model loads or another model makes room for it."""
    catalog = state.catalog
    if catalog is None:
        return None
    model = resolve(catalog, name)
    try:
        if (lease := catalog.lease(model)) is not None:
            return lease
    except ModelFailed as e:
        raise _failed(model, str(e)) from None
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def on_event(ev: CatalogEvent) -> None:  # the loader thread
        loop.call_soon_threadsafe(changed.set)

    catalog.add_listener(on_event)
    catalog.want(model)
    deadline = loop.time() + state.config.load_timeout
    try:
        while True:
            changed.clear()
            try:
                if (lease := catalog.lease(model)) is not None:
                    return lease
            except ModelFailed as e:
                raise _failed(model, str(e)) from None
            left = deadline - loop.time()
            if left <= 0:
                raise APIError("unavailable", f"The model '{model}' is not loaded yet (waited "
                               f"{state.config.load_timeout:g} s); retry later",
                               code="model_loading", headers={"Retry-After": "5"})
            # Woken by the model's events; a slow tick covers a model draining to idle.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 0.5))
    finally:
        catalog.unwant(model)
        catalog.remove_listener(on_event)


def service_of(state: AppState, lease: Lease | None) -> Service:
    return lease.service if lease is not None else state.service  # type: ignore[return-value]


# --- listing ---------------------------------------------------------------------------------


def status_json(s: ModelStatus) -> dict:
    out: dict = {"value": s.state}
    if s.state == "failed":
        out.update(failed=True, message=without_paths(s.error))
    return out


def catalog_card(s: ModelStatus, created: int) -> dict:
    return {
        "id": s.id,
        "object": "model",
        "created": created,
        "owned_by": "prism",
        "aliases": list(s.aliases),
        "status": status_json(s),
        "size": s.size,
        "memory": s.memory,
        "context_length": s.n_ctx,
        "pinned": s.pinned,
        "meta": {"n_ctx": s.n_ctx, "size": s.size, "busy": s.busy, "loads": s.loads},
    }


def model_cards(request: Request) -> list[dict]:
    state = get_state(request)
    created = int(request.app.state.started)
    if state.catalog is None:
        from app.api.openai import model_card

        card = model_card(request)
        card["status"] = {"value": "loaded"}
        listed = getattr(getattr(state.service.engine, "info", None), "models", ())
        if len(listed) > 1:  # --upstream at a router: what else it serves (by its own id)
            card["meta"]["upstream_models"] = list(listed)
        return [card]
    return [catalog_card(s, created) for s in state.catalog.statuses()]


@router.get("/models")
async def list_models(request: Request):
    return {"object": "list", "data": model_cards(request)}


async def _model_of(request: Request) -> tuple[Catalog, str]:
    state = get_state(request)
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        raise APIError("invalid_request", "the body must be JSON: {\"model\": ID}") from None
    name = body.get("model") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise APIError("invalid_request", "'model' is required", param="model")
    if state.catalog is None:
        raise APIError("invalid_request", "this server serves one model; start it with "
                       "--models-dir or several --model to load and unload models")
    return state.catalog, resolve(state.catalog, name)


@router.post("/models/load")
async def load(request: Request):
    catalog, model = await _model_of(request)
    catalog.load(model)
    return {"success": True}


@router.post("/models/unload")
async def unload(request: Request):
    catalog, model = await _model_of(request)
    catalog.unload(model)
    return {"success": True}


@router.get("/models/sse")
async def events(request: Request):
    """One `model_status` event per change of state, as llama.cpp's router sends them."""
    catalog = get_state(request).catalog
    if catalog is None:
        raise APIError("not_found", "this server serves one model: no model events")
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[CatalogEvent] = asyncio.Queue()

    def on_event(ev: CatalogEvent) -> None:  # the loader thread
        loop.call_soon_threadsafe(queue.put_nowait, ev)

    catalog.add_listener(on_event)

    async def lines() -> AsyncIterator[str]:
        try:
            yield ": prism model events\n\n"
            while True:
                ev = await queue.get()
                data: dict = {"status": ev.status.state}
                if ev.status.state == "failed":
                    data["message"] = without_paths(ev.status.error)
                if ev.reason:
                    data["reason"] = ev.reason
                yield "data: " + json.dumps({"model": ev.model, "event": "model_status",
                                             "data": data}) + "\n\n"
        finally:
            catalog.remove_listener(on_event)

    return StreamingResponse(lines(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})
