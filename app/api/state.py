"""What every API route reads: the service it talks to and the server's settings.

Owns `ServerConfig` and `AppState` (with the model id every route reports, the `--max-queue`
count every route admits requests through: app/api/admission.py, and, serving several models,
the catalog: engine/catalog.py; app/api/models.py finds a request's service in it). Created by
`app.config` (the CLI or the GUI), stored on `app.state.prism` by
`app.api.server.create_app`, read by the route modules through `get_state(request)`. Runs on
the asyncio loop's thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from app.api.admission import Admission
from engine.catalog import Catalog
from engine.service import Service


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8421
    api_key: str | None = None
    reasoning_field: str = "reasoning_content"  # reasoning_content | reasoning | both
    # Past this many waiting requests (accepted, not yet being served): 429 with Retry-After
    max_queue: int = 16
    max_body_bytes: int = 8 * 1024 * 1024
    model_name: str = ""  # the name /v1/models reports; any name is served by it
    max_tokens: int | None = None  # --max-tokens: cap and default of every reply's length
    allowed_hosts: tuple[str, ...] = ()  # Host names served besides the bound address
    cors_origins: tuple[str, ...] = ()  # web origins allowed to call (CORS); none by default
    load_timeout: float = 300.0  # --load-timeout: how long a request waits for its model


@dataclass
class AppState:
    service: Service | None  # the one model's; None when a catalog serves several
    config: ServerConfig = field(default_factory=ServerConfig)
    loading: bool = False  # /health answers 503 while True
    admission: Admission = field(default_factory=Admission, repr=False)
    catalog: Catalog | None = None  # --models-dir, several --model: a service per model

    @property
    def model_id(self) -> str:
        """The model id /v1/models, /props and /metrics report: --model-name, else the
        pack's name, else the engine's; with a catalog, its first model's id."""
        if self.service is None:
            return self.catalog.ids[0] if self.catalog is not None else ""
        return self.config.model_name or self.service.pack.name or self.service.engine.name

    def services(self) -> list[Service]:
        """The services that may be running requests now (the resident models')."""
        if self.catalog is not None:
            return [svc for _, svc in self.catalog.services()]
        return [self.service] if self.service is not None else []

    def reply_model(self, requested: str) -> str:
        """The `model` a reply names: the one the client asked for (any name is served by
        the one model), else `model_id`."""
        return requested or self.model_id


def get_state(request: Request) -> AppState:
    return request.app.state.prism
