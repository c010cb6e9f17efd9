"""Live servers for the app/api tests: uvicorn on 127.0.0.1 (a free port) in a thread, over a
ReplayEngine playing given model outputs through a built-in pack, with the official SDKs as
clients. No model is needed (the `model` tests bring their own engine)."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from app.api.server import ServerThread
from app.api.state import AppState, ServerConfig
from app.api.tap import TapEngine
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import Pack
from engine.metrics import Metrics
from engine.parse.events import result_of
from engine.parse.parser import OutputParser
from engine.record.recording import Recorder
from engine.service import Run, RunUpdate, Service
from tests.support import (
    recorded_failures,  # noqa: F401 - the API tests import it from here
    wait_until,
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather by city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Web search",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}
TOOLS = [WEATHER, SEARCH]
DATA = Path(__file__).parent / "data"


def captured(client: str) -> dict:
    """A real client's first request, captured on the wire (tests/app/data/client_*.json:
    {"method", "path", "headers", "body"}; copied from /work/shared/clients)."""
    return json.loads((DATA / f"client_{client}.json").read_text(encoding="utf-8"))


def sdk_kwargs(method, body: dict, **override) -> dict:
    """A captured body as an official SDK method's arguments: the fields the SDK has a
    parameter for as themselves, the rest as `extra_body` (as the client sent them)."""
    body = {**body, **override}
    params = inspect.signature(method).parameters
    known = {k: v for k, v in body.items() if k in params and k != "extra_body"}
    extra = {k: v for k, v in body.items() if k not in known}
    return {**known, "extra_body": extra} if extra else known


def xml_call(name: str, **params) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def oracle(text: str, *, start: str = "reasoning", family: str = "qwen-xml", tools=(),
           reason: str = "stop"):
    """What the parser makes of a whole output: the expected result of every family."""
    p = OutputParser(start=start, family=family, tools=tuple(tools), stream_tools=True)
    events = p.feed(text) + p.finish()
    return result_of(events, reason)


@dataclass
class Live:
    """One running server and what the tests look at."""

    thread: ServerThread
    state: AppState
    runs: list[Run] = field(default_factory=list)
    clients: list = field(default_factory=list)  # closed at teardown (no unclosed sockets)

    @property
    def url(self) -> str:
        return self.thread.url

    @property
    def service(self) -> Service:
        return self.state.service

    def openai(self, **kw) -> openai.OpenAI:
        kw.setdefault("api_key", "unused")
        return self._keep(openai.OpenAI(base_url=self.url + "/v1", max_retries=0, timeout=20,
                                        **kw))

    def anthropic(self, **kw) -> anthropic.Anthropic:
        kw.setdefault("api_key", "unused")
        return self._keep(anthropic.Anthropic(base_url=self.url, max_retries=0, timeout=20,
                                              **kw))

    def http(self, **kw) -> httpx.Client:
        return self._keep(httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 20), **kw))

    def _keep(self, client):
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()

    @property
    def last(self) -> Run:
        return self.runs[-1]


def start_live(service: Service, **config) -> Live:
    """`service` served by a ServerThread on a free port (`ServerConfig(**config)`), the runs
    it starts collected in `Live.runs`."""
    state = AppState(service=service, config=ServerConfig(**config))
    live = Live(ServerThread(state).start(), state)
    lock = threading.Lock()

    def on_update(upd: RunUpdate) -> None:
        if upd.kind == "start":
            with lock:
                live.runs.append(upd.run)

    service.add_listener(on_update)
    return live


def hang_up_mid_stream(live: Live, upstream, messages: list[dict], after: int = 3) -> None:
    """Stream a chat from `live`, leave after `after` + 1 chunks, and wait until the upstream
    (tests/engine/backends/upstream/scripted_upstream.py) saw Prism hang up: exactly once."""
    stream = live.openai().chat.completions.create(model="m", messages=messages, stream=True)
    for i, _ in enumerate(stream):
        if i == after:
            break
    stream.close()
    wait_until(lambda: upstream.hangups, 5, 0.02, "the upstream to see Prism hang up")
    assert upstream.hangups == 1


@pytest.fixture
def serve(replay_service) -> Callable[..., Live]:
    """serve(*outputs, pack="qwen3-xml", speed=0.0, n_ctx=..., **ServerConfig fields)."""
    started: list[Live] = []

    def start(*outputs: str | Path, pack: str = "qwen3-xml", speed: float = 0.0,
              n_ctx: int = 1 << 20, **config) -> Live:
        service = replay_service(*outputs, pack=pack, speed=speed, n_ctx=n_ctx, record=True)
        live = start_live(service, **config)
        started.append(live)
        return live

    yield start
    for live in started:
        live.close()
        live.service.engine.close()  # before the server stops: no request waits on it then
        live.thread.stop()


@pytest.fixture
def serve_upstream(tmp_path: Path) -> Callable[..., Live]:
    """serve_upstream(engine, pack, **ServerConfig fields): an upstream engine (raw mode or
    --tap) behind a Service with metrics and a recorder (a session file in tmp_path naming the
    upstream), as `prism serve --upstream` wires it. Clients, engine, server and recorder are
    closed at teardown, in that order."""
    started: list[tuple[Live, UpstreamEngine | TapEngine, Recorder]] = []

    def start(engine: UpstreamEngine | TapEngine, pack: Pack, **config) -> Live:
        recorder = Recorder(tmp_path / f"upstream{len(started)}.jsonl", model=engine.name,
                            pack=pack.name, upstream=engine.base)
        service = Service(engine, pack, metrics=Metrics(engine), recorder=recorder)
        live = start_live(service, **config)
        started.append((live, engine, recorder))
        return live

    yield start
    for live, engine, recorder in started:
        live.close()
        engine.close()
        live.thread.stop()
        recorder.close()
