"""`--upstream` end to end: a Prism in front of another server, with the official SDKs.

- Upstream = another Prism serving a replay: every parser rule's case through raw mode gives
  what the same output gives served locally; the template comes from the upstream's /props.
- Upstream = the scripted upstream (tests/engine/backends/upstream/scripted_upstream.py): its
errors reach the
  caller in the caller's dialect, streamed or not, with their status while no token has
  come (a normal stream still starts at its first token), or as a final error event once
  streaming began (and the
  recording keeps what came); 429 past the in-flight limit; a client that leaves closes the
  upstream stream; /health follows the upstream's reachability.
- Upstream = llama-cpp-python's own server on the default model (`model` tests): a
  grammar-forced chat parses as on the local engine; cancel; the upstream killed mid-stream.
- The `prism serve --upstream` command line itself, in a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from app.upstream import upstream_pack
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.detect import preserved_tokens
from engine.record.reader import read_session
from engine.record.replay import ReplayEngine
from tests.app.conftest import TOOLS, Live, hang_up_mid_stream
from tests.app.test_openai import ASK, CASES, collect, comparable, expected, whole
from tests.engine.backends.upstream.scripted_upstream import (
    MODEL,
    Reply,
    ScriptedUpstream,
    Seen,
    chunk,
    free_port,
    stream_texts,
)
from tests.support import wait_healthy, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def front(serve_upstream) -> Callable[..., Live]:
    """front(url, pack=None, probe_s=5, timeout=600, **ServerConfig fields): Prism with an
    UpstreamEngine on `url`, wired as `prism serve --upstream` wires it."""

    def start(url: str, *, pack: str | None = None, probe_s: float = 5.0,
              timeout: float = 600.0, **config) -> Live:
        engine = UpstreamEngine(url, probe_s=probe_s, timeout=timeout)
        assert engine.ready.wait(10)
        args = argparse.Namespace(template=None, pack=pack, tap=False, family=None)
        chosen = upstream_pack(args, engine)
        engine.stops, engine.preserved = chosen.stop, preserved_tokens(chosen.family)
        config.setdefault("model_name", engine.name)
        return serve_upstream(engine, chosen, **config)

    return start


# --- upstream = another Prism ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rule_through_raw_mode_is_served_as_locally(serve, front, name):
    text = CASES[name]
    back = serve(text, model_name="back-model")
    local = collect(back.openai().chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, stream=True))
    live = front(back.url + "/v1")
    assert live.service.pack.family == "qwen-xml"  # detected from the template in /props
    client = live.openai()
    streamed = collect(client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                      stream=True))
    resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert comparable(streamed) == comparable(whole(resp)) == comparable(local) \
        == expected(text)


def test_models_list_the_upstream_model_and_anthropic_works(serve, front):
    back = serve("Thinking.\n</think>\n\nHi there.", model_name="back-model")
    live = front(back.url)
    models = live.openai().models.list().data
    assert [m.id for m in models] == ["back-model"]
    msg = live.anthropic().messages.create(model="x", max_tokens=50, messages=ASK)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[1].text == "Hi there."


def test_raw_completions_through_a_chain_of_prisms(serve, front):
    raw = "<think>\nhm\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>"
    back = serve(raw)
    middle = front(back.url)
    resp = middle.openai().completions.create(model="m", prompt="anything", max_tokens=100)
    assert resp.choices[0].text == raw  # raw in, raw out: no template, no parser, twice


def test_the_rendered_prompt_and_the_sampling_go_upstream(front):
    async def ok(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["Hm.", "\n</think>\n\n", "Yes."])

    with ScriptedUpstream(ok) as up:
        live = front(up.url, pack="qwen3-xml")
        resp = live.openai().chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, temperature=0.3, seed=7, max_tokens=99,
            stop=["STOP"])
    (sent,) = up.requests
    assert sent.body["prompt"] == live.last.prompt
    assert "<function>\n<name>get_weather</name>" in sent.body["prompt"]
    assert sent.body["prompt"].endswith("<|im_start|>assistant\n<think>\n")
    body = sent.body
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.3, 7, 99)
    # The request's stop strings, then the pack's end-of-turn marker (special tokens are kept,
    # so it may come as text).
    assert body["stop"] == ["STOP", "<|im_end|>"]
    # Qwen XML reads no special tokens (its tags are plain text): none to ask llama.cpp for.
    assert preserved_tokens("qwen-xml") == () and "preserved_tokens" not in body
    assert resp.choices[0].message.content == "Yes."


def test_which_template_renders(serve, tmp_path: Path):
    back = serve("x", model_name="back-model")
    engine = UpstreamEngine(back.url)
    try:
        assert engine.ready.wait(10)

        def pack(**kw):
            args = {"template": None, "pack": None, "tap": False, "family": None, **kw}
            return upstream_pack(argparse.Namespace(**args), engine)

        published = pack()  # the upstream's /props
        assert published.template == back.service.pack.template
        assert published.template_origin == f"GET {engine.root}/props"
        assert (published.name, published.family, published.gguf) == ("back-model",
                                                                        "qwen-xml", None)
        assert published.thinking is True and "<|im_end|>" in published.stop
        hermes = tmp_path / "hermes.jinja"
        hermes.write_text((ROOT / "resources/templates/qwen3_hermes.jinja").read_text())
        assert pack(template=hermes).family == "hermes-json"  # --template wins
        assert pack(pack="smollm2").name == "smollm2"  # --pack wins over /props
        assert pack(pack="smollm2").gguf is None  # the model is the upstream's
        assert pack(family="hermes-json").family_origin == "--family"
        with pytest.raises(SystemExit, match="cannot read --template"):
            pack(template=tmp_path / "missing.jinja")
    finally:
        engine.close()
    with ScriptedUpstream(scripted(500, "x")) as up:  # publishes no template
        engine = UpstreamEngine(up.url)
        try:
            assert engine.ready.wait(10)
            with pytest.raises(SystemExit, match="publishes no chat template"):
                upstream_pack(argparse.Namespace(template=None, pack=None, tap=False,
                                                 family=None), engine)
            tap = upstream_pack(argparse.Namespace(template=None, pack=None, tap=True,
                                                   family=None), engine)
            assert (tap.family, tap.template) == ("auto", "")
        finally:
            engine.close()


# --- upstream = the scripted one: the error table through the API -------------------------------


def scripted(status: int, message: str):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.json(status, {"error": {"message": message, "type": "x"}})
    return script


def test_an_upstream_4xx_is_the_callers_4xx_in_its_dialect(front):
    with ScriptedUpstream(scripted(400, "prompt is 9000 tokens, max 4096")) as up:
        live = front(up.url, pack="qwen3-xml")
        with pytest.raises(openai.BadRequestError) as oa:
            live.openai().chat.completions.create(model="m", messages=ASK)
        with pytest.raises(anthropic.BadRequestError) as an:
            live.anthropic().messages.create(model="m", max_tokens=10, messages=ASK)
    assert "prompt is 9000 tokens, max 4096" in oa.value.message
    assert an.value.body["type"] == "error"
    assert an.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is 9000 tokens" in an.value.body["error"]["message"]


def test_an_upstream_500_is_a_bad_gateway(front):
    with ScriptedUpstream(scripted(500, "CUDA error: an illegal memory access")) as up:
        live = front(up.url, pack="qwen3-xml")
        with pytest.raises(openai.InternalServerError) as err:
            live.openai().chat.completions.create(model="m", messages=ASK)
    assert err.value.status_code == 502
    assert "CUDA error: an illegal memory access" in err.value.message


def test_a_streamed_request_the_upstream_refuses_is_the_callers_4xx_on_every_api(front):
    # The upstream's answer comes after the job was queued, before any token: the streaming
    # routes hold their status line until then (app/api/sse.py), so it is still the 4xx.
    with ScriptedUpstream(scripted(400, "prompt is 9000 tokens, max 4096")) as up:
        live = front(up.url, pack="qwen3-xml")
        oa = live.openai()
        with pytest.raises(openai.BadRequestError) as chat:
            for _ in oa.chat.completions.create(model="m", messages=ASK, stream=True):
                pass
        with pytest.raises(openai.BadRequestError) as resp:
            for _ in oa.responses.create(model="m", input="Weather?", stream=True):
                pass
        with pytest.raises(openai.BadRequestError) as raw:
            for _ in oa.completions.create(model="m", prompt="Weather?", stream=True):
                pass
        with pytest.raises(anthropic.BadRequestError) as msg, live.anthropic().messages.stream(
                model="m", max_tokens=10, messages=ASK) as stream:
            for _ in stream:
                pass
    for err in (chat, resp, raw):
        assert "prompt is 9000 tokens, max 4096" in err.value.message
        assert err.value.body["type"] == "invalid_request_error"
    assert msg.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is 9000 tokens" in msg.value.body["error"]["message"]
    assert len(up.requests) == 4


def test_a_streamed_upstream_failure_before_any_token_is_a_502(front):
    with ScriptedUpstream(scripted(500, "CUDA error: out of memory")) as up:
        live = front(up.url, pack="qwen3-xml")
        with pytest.raises(openai.InternalServerError) as err:
            for _ in live.openai().chat.completions.create(model="m", messages=ASK,
                                                           stream=True):
                pass
    assert err.value.status_code == 502 and "CUDA error: out of memory" in err.value.message


def test_a_streamed_reply_starts_at_its_first_token_not_at_its_end(front):
    release = threading.Event()

    async def hold(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event(chunk("Thinking"))
        while not release.is_set():
            await asyncio.sleep(0.02)
        await reply.event(chunk(" done.", "stop"))
        await reply.event("[DONE]")
        await reply.end_stream()

    with ScriptedUpstream(hold) as up:
        live = front(up.url, pack="qwen3-xml")
        body = {"model": "m", "messages": ASK, "stream": True}
        try:
            with live.http().stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200  # while the upstream still holds its reply
                lines = resp.iter_lines()
                first = next(line for line in lines if "Thinking" in line)
                assert not release.is_set()  # it came before the upstream finished
                release.set()
                rest = "".join(lines)
        finally:
            release.set()
    assert json.loads(first[6:])["choices"][0]["delta"]["reasoning_content"] == "Thinking"
    assert " done." in rest and rest.endswith("data: [DONE]")


def test_refused_and_timeout(front):
    live = front(f"http://127.0.0.1:{free_port()}/v1", pack="qwen3-xml")
    with pytest.raises(openai.InternalServerError) as refused:
        live.openai().chat.completions.create(model="m", messages=ASK)
    assert refused.value.status_code == 502
    assert "could not reach the upstream" in refused.value.message

    async def slow(req: Seen, reply: Reply) -> None:
        await asyncio.sleep(3)

    with ScriptedUpstream(slow) as up:
        live = front(up.url, pack="qwen3-xml", timeout=0.5)
        with pytest.raises(openai.APIStatusError) as late:
            live.openai().chat.completions.create(model="m", messages=ASK)
    assert late.value.status_code == 504 and "timed out" in late.value.message


def test_a_cut_stream_ends_with_an_error_event_and_the_recording_keeps_it(front):
    async def cut(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        for piece in ("Short", " plan.", "\n</think>\n\n", "The answer", " is"):
            await reply.event(chunk(piece))
        reply.cut()

    with ScriptedUpstream(cut) as up:
        live = front(up.url, pack="qwen3-xml")
        body = {"model": "m", "messages": ASK, "stream": True}
        with live.http().stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            events = [json.loads(line[6:]) for line in resp.iter_lines()
                      if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e.get("choices")]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Short plan."
    assert "".join(d.get("content", "") for d in deltas) == "The answer is"
    assert "cut the stream" in events[-1]["error"]["message"]
    assert events[-1]["error"]["type"] == "upstream_error"
    live.state.service.recorder.close()
    session = read_session(live.state.service.recorder.path)
    (req,) = session.requests
    assert req.text == "Short plan.\n</think>\n\nThe answer is"
    assert req.outcome[0] == "error" and "cut the stream" in (req.outcome[1] or "")
    header, request = (json.loads(line) for line in
                       live.state.service.recorder.path.read_text().splitlines()[:2])
    for rec in (header, request):  # the session, and each request, say where and how
        assert rec["upstream"] == up.url and rec["ttft_includes_network"] is True
    replay = ReplayEngine([live.state.service.recorder.path])  # and it replays as any other
    assert replay.outputs == ["Short plan.\n</think>\n\nThe answer is"]
    replay.close()


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages", {"model": "m", "max_tokens": 50, "messages": ASK, "stream": True}),
    ("/v1/responses", {"model": "m", "input": "Weather?", "stream": True}),
])
def test_a_cut_stream_in_the_other_apis_ends_with_their_error_event(front, path, body):
    async def cut(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        for piece in ("Plan.", "\n</think>\n\n", "Partial answer"):
            await reply.event(chunk(piece))
        reply.cut()

    with ScriptedUpstream(cut) as up:
        live = front(up.url, pack="qwen3-xml")
        with live.http().stream("POST", path, json=body) as resp:
            assert resp.status_code == 200
            events = [json.loads(line[6:]) for line in resp.iter_lines()
                      if line.startswith("data: {")]
    text = "".join(e.get("delta", {}).get("text", "") if path == "/v1/messages"
                   else e.get("delta", "") if e.get("type") == "response.output_text.delta"
                   else "" for e in events)
    assert text == "Partial answer"  # what streamed before the cut reached the caller
    last = events[-1]
    if path == "/v1/messages":
        assert last["type"] == "error" and last["error"]["type"] == "api_error"
        assert "cut the stream" in last["error"]["message"]
    else:  # Responses: response.failed, carrying the error
        assert last["type"] == "response.failed"
        assert "cut the stream" in json.dumps(last["response"]["error"])


def test_past_the_inflight_limit_429(front):
    release = threading.Event()

    async def hold(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event(chunk("wait"))
        while not release.is_set():
            await asyncio.sleep(0.02)
        await reply.event(chunk("", "stop"))
        await reply.event("[DONE]")
        await reply.end_stream()

    with ScriptedUpstream(hold) as up:
        live = front(up.url, pack="qwen3-xml", max_queue=1)
        first = live.openai().chat.completions.create(model="m", messages=ASK, stream=True)
        next(iter(first))
        with pytest.raises(openai.RateLimitError) as err:
            live.openai().chat.completions.create(model="m", messages=ASK)
        release.set()
        first.close()
    assert err.value.response.headers["retry-after"]


def test_a_client_that_leaves_closes_the_upstream_stream(front):
    async def long(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["word "] * 500, delay=0.02)

    with ScriptedUpstream(long) as up:
        live = front(up.url, pack="qwen3-xml")
        hang_up_mid_stream(live, up, ASK)
    assert live.last.finish is not None and live.last.finish.reason == "cancelled"


def test_health_follows_the_upstream(front):
    async def ok(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["x"])

    up = ScriptedUpstream(ok).__enter__()
    live = front(up.url, pack="qwen3-xml", probe_s=0.1)
    http = live.http()
    assert http.get("/health").status_code == 200
    assert http.get("/v1/models").json()["data"][0]["id"] == MODEL
    up.__exit__(None, None, None)
    wait_until(lambda: http.get("/health").status_code != 200, 5, 0.05,
               "/health to see the upstream gone")
    resp = http.get("/health")
    assert resp.status_code == 503
    assert "unreachable" in resp.json()["error"]["message"]


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("tap", [False, True])
def test_prism_serve_upstream_command_line(serve, tmp_path: Path, tap: bool):
    back = serve("Plan.\n</think>\n\nFrom the back.", model_name="back-model")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--upstream", back.url, "--port", str(port),
         "--no-record", "--log-level", "warning", *(["--tap"] if tap else [])],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as http:
            wait_healthy(http, proc)
            assert http.get("/v1/models").json()["data"][0]["id"] == "back-model"
            reply = http.post("/v1/chat/completions", json={"messages": ASK}).json()
        msg = reply["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"]) == ("Plan.", "From the back.")
        if tap:  # the back's own reply, relayed: its id names the back's run
            assert reply["id"] == f"chatcmpl-{back.last.id}"
        else:  # raw mode: the back served a completion (no chat run there)
            assert back.runs == [] and reply["id"].startswith("chatcmpl-req-")
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def test_tap_needs_an_upstream():
    res = subprocess.run([sys.executable, "-m", "app", "serve", "--tap"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "--tap forwards to an upstream" in res.stderr

