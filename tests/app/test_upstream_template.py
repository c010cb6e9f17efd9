"""`prism serve --upstream URL --template FILE`: the template gets the BOS/EOS text of the model
(issue 19, item 6). From the upstream's `/props` when it reports them (llama.cpp's server does),
else from `--bos-token` / `--eos-token` (llama-cpp-python's server has no /props); the flags win
over both /props and a `--pack`'s own tokens, and a template that writes a token nobody gave is
warned about at start-up.

The upstream is a tiny fake llama.cpp server (`/v1/models`, `/props`, a streamed
`/v1/completions` that keeps the prompts it was sent), or the scripted upstream of
tests/engine/backends/upstream/scripted_upstream.py, which has no /props.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.config import add_engine_arguments
from app.upstream import upstream_pack
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import Message
from tests.app.conftest import Live
from tests.engine.backends.upstream.scripted_upstream import (
    MODEL,
    Reply,
    ScriptedUpstream,
    Seen,
    chunk,
    stream_texts,
)
from tests.support import LIBRARY

TEMPLATES = LIBRARY
LLAMA3 = "meta-llama-Llama-3.1-8B-Instruct.jinja"
BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"
# A template that writes both tokens, like 32 of the 71 in llama.cpp's library.
BOTH = ("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def do_GET(self) -> None:  # http.server's naming
        props = self.server.props  # type: ignore[attr-defined]
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/props" and props is not None:
            self._json(200, props)
        else:
            self._json(404, {"error": {"message": "Not Found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        self.server.prompts.append(body.get("prompt"))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for event in (chunk("Hi."), chunk("", "stop"), "[DONE]"):
            text = event if isinstance(event, str) else json.dumps(event)
            self.wfile.write(f"data: {text}\n\n".encode())

    def _json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_llama_server() -> Iterator:
    """fake_llama_server(props): a fake llama.cpp server's /v1 URL; `props` is what /props
    answers (None: 404, as llama-cpp-python's server). `.prompts`: the prompts it was sent."""
    servers: list[ThreadingHTTPServer] = []

    def start(props: dict | None):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.props, server.prompts = props, []  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_port}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"template": None, "pack": None, "tap": False, "family": None,
                                 "bos_token": None, "eos_token": None, **kw})


def engine_on(url: str) -> UpstreamEngine:
    engine = UpstreamEngine(url)
    assert engine.ready.wait(10)
    return engine


def llama_props(**extra: object) -> dict:
    return {"default_generation_settings": {"n_ctx": 8192}, "bos_token": BOS, "eos_token": EOS,
            **extra}


def test_the_flags_are_on_the_command_line():
    parser = argparse.ArgumentParser(prog="prism")
    add_engine_arguments(parser)
    parsed = parser.parse_args(["--upstream", "http://x/v1", "--template", "t.jinja",
                                "--bos-token", "<s>", "--eos-token", "</s>"])
    assert (parsed.bos_token, parsed.eos_token) == ("<s>", "</s>")
    assert parser.parse_args(["--upstream", "u"]).bos_token is None


def test_template_file_gets_the_tokens_from_props(fake_llama_server, tmp_path, caplog):
    _, url = fake_llama_server(llama_props())
    template = tmp_path / "both.jinja"
    template.write_text(BOTH, encoding="utf-8")
    engine = engine_on(url)
    try:
        with caplog.at_level(logging.WARNING, logger="prism"):
            pack = upstream_pack(args(template=template), engine)
        assert (pack.bos_token, pack.eos_token) == (BOS, EOS)
        assert EOS in pack.stop
        assert not [r for r in caplog.records if "reports none" in r.getMessage()]
        rendered = pack.chat_template().render([Message("user", "hi")])
        assert rendered == f"{BOS}<user>hi{EOS}<assistant>"
        # The flags win over /props.
        flagged = upstream_pack(args(template=template, bos_token="<s>", eos_token="</s>"),
                                engine)
        assert (flagged.bos_token, flagged.eos_token) == ("<s>", "</s>")
        # The template /props publishes gets them too, and so does a --pack (its own first).
        published = engine_on(fake_llama_server(llama_props(chat_template=BOTH))[1])
        try:
            assert upstream_pack(args(), published).bos_token == BOS
        finally:
            published.close()
        own = resolve_pack("smollm2", require_model=False)
        smol = upstream_pack(args(pack="smollm2"), engine)
        assert (smol.bos_token, smol.eos_token) == (own.bos_token, own.eos_token) != (BOS, EOS)
        flagged = upstream_pack(args(pack="smollm2", eos_token="<end>"), engine)
        assert flagged.eos_token == "<end>" and "<end>" in flagged.stop
    finally:
        engine.close()


def test_without_props_the_flags_give_the_tokens_and_none_is_warned_about(tmp_path, caplog):
    async def never(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["x"])

    template = tmp_path / "both.jinja"
    template.write_text(BOTH, encoding="utf-8")
    with ScriptedUpstream(never) as up:  # 404 on /props, like llama-cpp-python's server
        engine = engine_on(up.url)
        try:
            with caplog.at_level(logging.WARNING, logger="prism"):
                bare = upstream_pack(args(template=template), engine)
            assert (bare.bos_token, bare.eos_token) == ("", "")
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "writes bos_token" in said and "--bos-token" in said
            assert "writes eos_token" in said and "--eos-token" in said
            given = upstream_pack(args(template=template, bos_token=BOS, eos_token=EOS), engine)
            assert given.chat_template().render([Message("user", "hi")]) == \
                f"{BOS}<user>hi{EOS}<assistant>"
            assert EOS in given.stop
        finally:
            engine.close()


@pytest.mark.skipif(not TEMPLATES.is_dir(), reason=f"{TEMPLATES} (real templates) is missing")
def test_the_prompt_sent_upstream_starts_with_the_models_bos(fake_llama_server, serve_upstream,
                                                             tmp_path):
    """End to end, as `prism serve --upstream URL --template FILE` wires it: Llama 3.1's
    template, BOS and EOS from /props, the rendered prompt in the completions request."""
    server, url = fake_llama_server(llama_props())
    template = tmp_path / LLAMA3
    template.write_text((TEMPLATES / LLAMA3).read_text(encoding="utf-8"), encoding="utf-8")
    engine = engine_on(url)
    pack = upstream_pack(args(template=template), engine)
    engine.stops = pack.stop
    live: Live = serve_upstream(engine, pack, model_name=engine.name)
    resp = live.openai().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert resp.choices[0].message.content == "Hi."
    (prompt,) = server.prompts
    assert prompt.startswith(BOS + "<|start_header_id|>system<|end_header_id|>")
    assert prompt.endswith("hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
