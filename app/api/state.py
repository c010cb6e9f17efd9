"""What every API route reads: the service it talks to and the server's settings.

Owns `ServerConfig` and `AppState` (with the model id every route reports, and the `--max-queue`
count every route admits requests through: app/api/admission.py). Created by
`app.config` (the CLI or the GUI), stored on `app.state.prism` by
`app.api.server.create_app`, read by the route modules through `get_state(request)`. Runs on
the asyncio loop's thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from app.api.admission import Admission
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


@dataclass
class AppState:
    service: Service
    config: ServerConfig = field(default_factory=ServerConfig)
    loading: bool = False  # /health answers 503 while True
    admission: Admission = field(default_factory=Admission, repr=False)

    @property
    def model_id(self) -> str:
        """The model id /v1/models, /props and /metrics report: --model-name, else the
        pack's name, else the engine's."""
        return self.config.model_name or self.service.pack.name or self.service.engine.name

    def reply_model(self, requested: str) -> str:
        """The `model` a reply names: the one the client asked for (any name is served by
        the one model), else `model_id`."""
        return requested or self.model_id


def get_state(request: Request) -> AppState:
    return request.app.state.prism
