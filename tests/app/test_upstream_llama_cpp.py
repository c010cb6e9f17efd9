"""`--upstream` against a real server: llama-cpp-python's own (`python -m llama_cpp.server`, its
server extras are dev dependencies) on the default model, started on a free loopback port.

A grammar-forced chat through Prism in front of it parses exactly as on Prism's local engine
(same GGUF, greedy); a client that leaves cancels the job; an upstream killed mid-stream ends the
stream with an error event, and what came before it is kept (reply and recording).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from app.api.server import ServerThread
from app.api.state import AppState, ServerConfig
from app.upstream import upstream_pack
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import resolve_pack
from engine.metrics import Metrics
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.service import Service
from tests.app.conftest import Live
from tests.engine.backends.upstream.scripted_upstream import free_port
from tests.support import ServerProcess

pytestmark = pytest.mark.model

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                           "days": {"type": "integer", "enum": [3]}},
          "required": ["city", "days"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Weather in Paris for three days, as JSON."}]


class LlamaCppServer(ServerProcess):
    """`python -m llama_cpp.server` on the default model, on a free loopback port."""

    name = "llama_cpp.server"

    def __init__(self, gguf: Path, log: Path, *extra: str) -> None:
        port = free_port()
        super().__init__([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
                          "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024",
                          "--n_threads", "1", *extra], port, log, "/v1/models",
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def upstream(default_model, tmp_path_factory):
    server = LlamaCppServer(default_model, tmp_path_factory.mktemp("llama_cpp") / "server.log")
    yield server
    server.stop()


def start_front(url: str, tmp_path: Path) -> tuple[Live, UpstreamEngine, Recorder]:
    engine = UpstreamEngine(url)
    assert engine.ready.wait(10) and engine.load_error is None
    # llama-cpp-python's server publishes no template (no /props): the pack gives it.
    pack = upstream_pack(argparse.Namespace(template=None, pack="smollm2", tap=False,
                                            family=None), engine)
    recorder = Recorder(tmp_path / "front.jsonl", model=engine.name, pack=pack.name,
                        upstream=engine.base)
    service = Service(engine, pack, metrics=Metrics(engine), recorder=recorder)
    live = Live(ServerThread(AppState(service=service, config=ServerConfig())).start(),
                AppState(service=service))
    service.add_listener(lambda u: live.runs.append(u.run) if u.kind == "start" else None)
    return live, engine, recorder


@pytest.fixture
def front(upstream, tmp_path):
    live, engine, recorder = start_front(upstream.url, tmp_path)
    yield live
    live.close()
    engine.close()
    live.thread.stop()
    recorder.close()


def json_chat(url: str) -> dict:
    body = {"model": "m", "messages": ASK, "temperature": 0, "seed": 1, "max_tokens": 40,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "w", "schema": SCHEMA}}}
    with httpx.Client(timeout=120) as http:
        resp = http.post(url + "/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_grammar_forced_output_parses_as_on_the_local_engine(front, default_model):
    from engine.backends.llama.engine import LlamaEngine

    remote = json_chat(front.url)
    pack = resolve_pack("smollm2")
    engine = LlamaEngine(default_model, n_ctx=1024, n_threads=1)
    service = Service(engine, pack, metrics=Metrics(engine))
    with ServerThread(AppState(service=service)) as local_server:
        local = json_chat(local_server.url)
    engine.close()
    r, lo = remote["choices"][0], local["choices"][0]
    assert r["message"] == lo["message"]
    assert r["finish_reason"] == lo["finish_reason"] == "stop"
    assert json.loads(r["message"]["content"]) in ({"city": "Paris", "days": 3},
                                                    {"city": "Rome", "days": 3})
    # One streamed delta per token: the same count. (llama-cpp-python's stream carries no
    # usage, so the prompt count is Prism's estimate, UTF-8 bytes / 4.)
    assert remote["usage"]["completion_tokens"] == local["usage"]["completion_tokens"]
    prompt = front.last.prompt
    assert remote["usage"]["prompt_tokens"] == (len(prompt.encode()) + 3) // 4


def test_a_client_that_leaves_cancels_the_upstream_job(front):
    client = front.openai()
    stream = client.chat.completions.create(model="m", messages=ASK, max_tokens=300,
                                            temperature=0, stream=True)
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen >= 3:
            break
    stream.close()
    run = front.last
    assert run.wait(30) is not None
    assert run.finish is not None and run.finish.reason == "cancelled"
    assert len(run.tokens) < 300


def test_an_upstream_killed_mid_stream(default_model, tmp_path):
    server = LlamaCppServer(default_model, tmp_path / "server.log")
    live, engine, recorder = start_front(server.url, tmp_path)
    try:
        body = {"model": "m", "messages": ASK, "max_tokens": 300, "temperature": 0,
                "stream": True}
        events = []
        with live.http(timeout=60).stream("POST", "/v1/chat/completions", json=body) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
                    content = [e for e in events if e.get("choices")
                               and e["choices"][0]["delta"].get("content")]
                    if len(content) == 3 and server.proc.poll() is None:
                        server.kill()
        streamed = "".join(e["choices"][0]["delta"].get("content") or ""
                           for e in events if e.get("choices"))
        assert len(streamed) > 0
        assert events[-1]["error"]["type"] == "upstream_error"
        assert "upstream" in events[-1]["error"]["message"]
        recorder.close()
        (req,) = read_session(recorder.path).requests
        assert req.outcome[0] == "error"
        assert req.text.startswith(streamed)  # nothing streamed is lost
    finally:
        live.close()
        engine.close()
        live.thread.stop()
        recorder.close()
        server.stop()


def test_tap_in_front_of_llama_cpp_server(upstream, tmp_path):
    from app.api.tap import TapEngine

    engine = TapEngine(UpstreamEngine(upstream.url))
    assert engine.ready.wait(10)
    service = Service(engine, resolve_pack("smollm2", require_model=False),
                      metrics=Metrics(engine))
    runs = []
    service.add_listener(lambda u: runs.append(u.run) if u.kind == "start" else None)
    body = {"model": "m", "messages": ASK, "max_tokens": 16, "temperature": 0, "stream": True}
    try:
        with ServerThread(AppState(service=service)) as server, \
                httpx.Client(timeout=120) as http:
            through = http.post(server.url + "/v1/chat/completions", json=body)
    finally:
        engine.close()
    assert through.status_code == 200
    events = [json.loads(line[6:]) for line in through.text.splitlines()
              if line.startswith("data: {")]
    content = "".join(e["choices"][0]["delta"].get("content") or ""
                      for e in events if e.get("choices"))
    assert content  # llama_cpp.server's own answer, relayed (its SSE lines end in CRLF)
    (run,) = runs
    assert run.wait(10) is not None
    assert run.result.content == content.strip("\n")  # the window shows what it answered
    assert run.result.anomalies.get("upstream_leak", 0) == 0


def test_each_streamed_token_carries_the_upstreams_logprobs(upstream):
    import threading

    from engine.backends.base import Job
    from engine.chat.request import Sampling

    engine = UpstreamEngine(upstream.url)
    tokens, done = [], threading.Event()
    job = Job(prompt="<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n",
              max_tokens=5, top_logprobs=3, sampling=Sampling(temperature=0),
              on_token=tokens.append, on_finish=lambda fin: done.set())
    try:
        assert engine.ready.wait(10)
        engine.submit(job)
        assert done.wait(60)
    finally:
        engine.close()
    assert len(tokens) == 5
    for tok in tokens:
        assert len(tok.top) == 3
        assert tok.top[0][0] == tok.text  # greedy: the likeliest was chosen
        assert [lp for _, lp in tok.top] == sorted((lp for _, lp in tok.top), reverse=True)
