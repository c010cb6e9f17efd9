"""The FastAPI app and the uvicorn server around it.

Owns `create_app(state)` (every router, the request guard, the error handlers,
/health and /props), `make_server` and `serve` (uvicorn in the *current* asyncio loop, so the
GUI runs it inside its qasync loop and the CLI inside asyncio.run), and `ServerThread` (the
same server in a thread with its own loop, for tests and benchmarks). No Qt here.

Every request first passes `app.api.guard.Guard` (Host, Origin/CORS, API key, Content-Type,
body size).

Threads: the routes run on the loop's thread; the engine's callbacks reach them through
`Run.stream()` (call_soon_threadsafe).
"""

from __future__ import annotations

import asyncio
import copy
import socket
import threading
import time
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app import telemetry
from app.api import anthropic, completions, errors, models, openai, responses, runs, tap
from app.api import metrics as metrics_api
from app.api.embeddings import router as embeddings_router
from app.api.errors import APIError, error_response
from app.api.guard import Guard
from app.api.listen import HeaderTimeoutH11
from app.api.state import AppState, get_state
from engine.chat.request import Sampling

DEFAULT = Sampling()  # what a request that sets no sampler gets, as /props reports it


def version() -> str:
    try:
        return metadata.version("prism-inspector")
    except metadata.PackageNotFoundError:
        return "0"


def create_app(state: AppState) -> FastAPI:
    exporter = None
    if state.service is not None:  # a catalog's models are read per request (metrics.py)
        exporter = metrics_api.PrometheusExporter(
            state.service, model=state.model_id, preparing=lambda: state.admission.preparing)
        exporter.observe()
    elif state.catalog is not None:  # histograms by model; snapshots are read per scrape
        exporter = metrics_api.CatalogExporter(state.catalog)
        exporter.observe()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if exporter is not None:
            exporter.close()

    app = FastAPI(title="Prism", version=version(), lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.prism = state
    app.state.prometheus = exporter
    app.state.started = time.time()
    errors.install(app)
    # A client that left before its non-streamed reply: its job is cancelled, nobody reads.
    app.add_exception_handler(
        runs.ClientGone, lambda request, exc: JSONResponse({}, status_code=499))
    # --tap: first, so its chat routes take the place of Prism's own
    if state.service is not None and isinstance(state.service.engine, tap.TapEngine):
        app.include_router(tap.router)
    for module in (openai, anthropic, responses, completions, metrics_api, models):
        app.include_router(module.router)
    app.add_api_route("/health", health, methods=["GET"])
    app.include_router(embeddings_router)  # POST /v1/embeddings
    app.add_api_route("/v1/health", health, methods=["GET"])
    app.add_api_route("/props", props, methods=["GET"])
    app.add_middleware(Guard, state=state)
    # a caller's traceparent, when traced
    telemetry.install(app, state.service if state.service is not None else state.catalog)
    return app


async def health(request: Request):
    state = get_state(request)
    if state.catalog is not None:  # the server answers; each model's state is in /models
        return {"status": "ok"}
    engine = state.service.engine
    if state.loading or not engine.ready.is_set():
        return _unavailable(request, "Loading model")
    if engine.load_error:
        return _unavailable(request, f"The model failed to load: {engine.load_error}")
    return {"status": "ok"}


def _unavailable(request: Request, message: str) -> JSONResponse:
    resp = error_response(request.url.path, APIError("unavailable", message))
    resp.headers["Retry-After"] = "1"
    return resp


async def props(request: Request):
    """llama.cpp server's /props, for clients that read the context size and template; with
    a catalog, of the model `?model=ID` names (llama.cpp's router: loaded for the answer)."""
    state = get_state(request)
    lease = await models.lease_for(state, request.query_params.get("model", ""))
    try:
        return _props(state, models.service_of(state, lease),
                      lease.model if lease is not None else state.model_id)
    finally:
        if lease is not None:
            lease.release()


def _props(state: AppState, svc, model_id: str) -> dict:
    engine, pack = svc.engine, svc.pack
    return {
        "default_generation_settings": {
            "n_ctx": engine.n_ctx,
            "model": model_id,
            "params": {"n_predict": state.config.max_tokens or -1,
                       "temperature": DEFAULT.temperature,
                       "top_k": DEFAULT.top_k, "top_p": DEFAULT.top_p, "min_p": DEFAULT.min_p,
                       "repeat_penalty": DEFAULT.repeat_penalty},
        },
        # llama-server's clients size their concurrency by it (--parallel here).
        "total_slots": svc.metrics.slots()[1] if svc.metrics is not None else 1,
        "model_path": Path(pack.gguf).name if pack.gguf else "",  # never the user's dirs
        "model_alias": model_id,
        "chat_template": pack.template,
        "bos_token": pack.bos_token,
        "eos_token": pack.eos_token,
        "modalities": {"vision": False, "audio": False},
        # A replay without the model's own vocabulary reports estimated prompt counts; a client
        # that compacts by usage.prompt_tokens should know (issue 24, item 2).
        "token_counts": "estimate" if getattr(engine, "counts_estimated", False) else "exact",
        "build_info": f"prism {version()}",
    }


# --- running it -------------------------------------------------------------------------------


def _log_config() -> dict:
    """uvicorn's logging set-up, with the access lines on stderr too (uvicorn puts them on
    stdout): a terminal running `prism serve` shows every line in one stream."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def make_server(state: AppState, host: str | None = None, port: int | None = None,
                log_level: str = "info") -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(state),
        host=host or state.config.host,
        port=state.config.port if port is None else port,
        log_level=log_level,
        log_config=_log_config(),
        http=HeaderTimeoutH11,  # h11 plus a deadline for request heads (listen.py)
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    return uvicorn.Server(config)


async def serve(state: AppState, host: str | None = None, port: int | None = None,
                log_level: str = "info") -> None:
    """Serve in the running loop until the server is told to exit (SIGINT/SIGTERM when this
    is the main thread; `server.should_exit = True` with `make_server`)."""
    await make_server(state, host, port, log_level).serve()


class ServerThread:
    """The server on its own thread and loop, bound to an already open socket (port 0 picks a
    free port, with no race between choosing and binding). For tests and benchmarks."""

    def __init__(self, state: AppState, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = make_server(state, host, self.port, log_level)
        self.thread = threading.Thread(target=self._run, name="prism-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self, timeout: float = 10.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
