"""Refusals Prism knows of before the first token are the API's 4xx, streamed or not (issue 24,
item 1): a replay miss, a context overflow and an invalid body, on chat completions, Messages,
Responses and /v1/completions, each leaving a log line that names the reason. And one the
engine finds only once the request is queued (item 2): a grammar llama.cpp cannot parse, on
the real engine, where a stream's status line waits for its first token (app/api/sse.py).

The servers are built from `prism serve`'s own arguments (app/serve.py, app/config.py), so the
flags under test are the real ones; the requests are real clients' (tests/app/data/client_*.json,
copied from ../shared/clients) sent with the official SDKs.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from app import serve as serve_verb
from app.config import build_service
from tests.app.conftest import Live, captured, sdk_kwargs, start_live

HERMES_CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
QWEN_CALL = ("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n"
             "</tool_call>")


@pytest.fixture
def prism_serve(tmp_path: Path) -> Iterator[Callable[..., Live]]:
    """prism_serve(*argv): the service `prism serve ARGV` builds, served on a free port, with
    its recording in tmp_path."""
    started: list[Live] = []

    def start(*argv: str) -> Live:
        p = argparse.ArgumentParser()
        serve_verb.add_arguments(p)
        args = p.parse_args([*argv, "--record-to", str(tmp_path / f"s{len(started)}.jsonl")])
        live = start_live(build_service(args))
        started.append(live)
        return live

    yield start
    for live in started:
        live.close()
        live.service.engine.close()
        live.thread.stop()
        live.service.recorder.close()


def output(tmp_path: Path, text: str, name: str = "out.txt") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def refusal_logged(caplog, status: int, words: str) -> None:
    lines = [r.getMessage() for r in caplog.records if r.name == "prism"]
    assert any(f" {status} " in line and words in line for line in lines), lines


def test_opencodes_streamed_title_request_is_a_400_with_tools_only(prism_serve, tmp_path,
                                                                    caplog):
    caplog.set_level(logging.WARNING, logger="prism")
    live = prism_serve("--replay", output(tmp_path, QWEN_CALL), "--replay-tools-only")
    chat = live.openai().chat.completions
    title = captured("opencode_title")["body"]
    with pytest.raises(openai.BadRequestError) as err:
        chat.create(**sdk_kwargs(chat.create, title))
    assert title["stream"] is True and err.value.status_code == 400
    assert err.value.code == "replay_no_match" and "--replay-tools-only" in err.value.message
    refusal_logged(caplog, 400, "replay (--replay-tools-only)")
    assert live.runs == []  # refused before any run started: nothing half-done to clean up
    # its first turn, which declares tools, still gets the call, whole
    first = captured("opencode")["body"]
    calls = [tc for chunk in chat.create(**sdk_kwargs(chat.create, first))
             for choice in chunk.choices for tc in choice.delta.tool_calls or ()]
    assert calls[0].function.name == "bash"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"command": "ls"}


def _anthropic_stream(live: Live, **kw) -> None:
    with live.anthropic().messages.stream(model="m", max_tokens=64, **kw) as stream:
        for _ in stream:
            pass


def _responses_stream(live: Live, **kw) -> None:
    for _ in live.openai().responses.create(model="m", stream=True, **kw):
        pass


def _chat_stream(live: Live, **kw) -> None:
    for _ in live.openai().chat.completions.create(model="m", stream=True, **kw):
        pass


def test_a_replay_miss_is_a_400_on_every_api_streamed_or_not(prism_serve, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="prism")
    # The only output holds a call: by default it waits for a request with tools.
    live = prism_serve("--replay", output(tmp_path, QWEN_CALL))
    hello = [{"role": "user", "content": "Hello?"}]
    for streamed in (True, False):
        with pytest.raises(openai.BadRequestError) as err:
            live.openai().chat.completions.create(model="m", messages=hello, stream=streamed)
        assert err.value.code == "replay_no_match" and "holds a tool call" in err.value.message
        with pytest.raises(openai.BadRequestError) as err:
            live.openai().responses.create(model="m", input="Hello?", stream=streamed)
        assert err.value.code == "replay_no_match"
        with pytest.raises(anthropic.BadRequestError) as aerr:
            live.anthropic().messages.create(model="m", max_tokens=64, messages=hello,
                                             stream=streamed)
        assert aerr.value.body["error"]["type"] == "invalid_request_error"
        assert "holds a tool call" in aerr.value.body["error"]["message"]
    for api in ("openai", "responses", "anthropic"):
        refusal_logged(caplog, 400, "holds a tool call")
        assert any(r.getMessage().startswith(f"[prism] {api} ") for r in caplog.records)
    assert live.runs == []


def qwen_code(api: str) -> dict:
    """Qwen Code's first request (18.6k tokens with SmolLM2's vocabulary) in `api`'s shape."""
    body = captured("qwen")["body"]
    system, user = (m["content"] for m in body["messages"])
    tools = [t["function"] for t in body["tools"]]
    if api == "openai":
        return {"messages": body["messages"], "tools": body["tools"]}
    if api == "responses":
        return {"instructions": system if isinstance(system, str) else json.dumps(system),
                "input": user if isinstance(user, str) else json.dumps(user),
                "tools": [{"type": "function", **t} for t in tools]}
    return {"system": system if isinstance(system, str) else json.dumps(system),
            "messages": [{"role": "user",
                          "content": user if isinstance(user, str) else json.dumps(user)}],
            "tools": [{"name": t["name"], "description": t.get("description", ""),
                       "input_schema": t.get("parameters") or {"type": "object"}}
                      for t in tools]}


def test_qwen_codes_first_request_overflows_8k_as_a_400_on_every_api(
        prism_serve, tmp_path, caplog, default_model):
    caplog.set_level(logging.WARNING, logger="prism")
    # The default pack: replay counts with its GGUF's vocabulary, as the model would.
    live = prism_serve("--replay", output(tmp_path, HERMES_CALL), "--pack", "smollm2",
                       "--n-ctx", "8192")
    with pytest.raises(openai.BadRequestError) as err:
        _chat_stream(live, **qwen_code("openai"))
    assert err.value.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        _responses_stream(live, **qwen_code("responses"))
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError) as aerr:
        _anthropic_stream(live, **qwen_code("anthropic"))
    assert "maximum context length is 8192" in aerr.value.body["error"]["message"]
    refusal_logged(caplog, 400, "maximum context length is 8192 tokens")
    assert live.runs == []


def test_completions_refuse_a_streamed_overflow_and_a_bad_field_with_400(prism_serve, tmp_path,
                                                                         caplog):
    caplog.set_level(logging.WARNING, logger="prism")
    # --n-ctx now sizes a replay's context too
    live = prism_serve("--replay", output(tmp_path, "plain answer"), "--n-ctx", "16")
    http = live.http()
    long = {"prompt": "word " * 200, "max_tokens": 4, "stream": True}
    r = http.post("/v1/completions", json=long)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = http.post("/v1/completions", json={"prompt": "hi", "stream": True, "echo": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"
    refusal_logged(caplog, 400, "maximum context length is 16 tokens")
    r = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4, "stream": True})
    texts = [json.loads(line[6:])["choices"][0]["text"] for line in r.text.splitlines()
             if line.startswith("data: {")]
    assert r.status_code == 200 and "".join(texts) == "plain answer"  # what fits still streams


def test_an_invalid_streamed_body_is_a_400_on_every_api(prism_serve, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="prism")
    live = prism_serve("--replay", output(tmp_path, "plain answer"))
    hello = [{"role": "user", "content": "Hello?"}]
    with pytest.raises(openai.BadRequestError) as err:
        _chat_stream(live, messages=hello, max_tokens=0)
    assert err.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        _responses_stream(live, input="Hello?", max_output_tokens=0)
    with pytest.raises(anthropic.BadRequestError):
        live.anthropic().messages.create(model="m", max_tokens=64, stream=True,
                                         messages=[{"role": "robot", "content": "x"}])
    refusal_logged(caplog, 400, "'max_tokens' must be at least 1")


# A pattern llama-cpp-python's converter copied into the grammar as it was: `\d` is no GBNF
# escape, so llama.cpp could not parse the grammar and every API answered 400 "invalid GBNF
# grammar". engine/grammar/bounds.py now rewrites such patterns into GBNF, so the same schema
# constrains the output on every API (the engine's own refusal of a grammar it cannot parse is
# tested in tests/engine/backends/llama/test_engine.py).
BAD_PATTERN = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d+$"}},
               "required": ["code"]}
DIGITS = re.compile(r'"code"\s*:\s*"(\d*)')


@pytest.mark.model
def test_a_pattern_with_regex_escapes_constrains_the_output_on_every_api(
        prism_serve, caplog, default_model):
    caplog.set_level(logging.WARNING, logger="prism")
    live = prism_serve("--pack", "smollm2", "--n-ctx", "1024", "--parallel", "1",
                       "--no-disk-cache")
    oa = live.openai().with_options(timeout=120)  # a loaded 2-core box reads prompts slowly
    an = live.anthropic().with_options(timeout=120)
    hello = [{"role": "user", "content": "Give me a code."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "code", "schema": BAD_PATTERN}}
    for streamed in (True, False):
        reply = oa.chat.completions.create(model="m", messages=hello, max_tokens=24,
                                           temperature=0, response_format=fmt, stream=streamed)
        text = ("".join(c.choices[0].delta.content or "" for c in reply if c.choices)
                if streamed else reply.choices[0].message.content)
        assert DIGITS.search(text), text
    with an.messages.stream(model="m", max_tokens=24, messages=hello,
                            tools=[{"name": "lookup", "input_schema": BAD_PATTERN}],
                            tool_choice={"type": "tool", "name": "lookup"}) as stream:
        raw = "".join(e.delta.partial_json for e in stream if e.type == "content_block_delta"
                      and e.delta.type == "input_json_delta")
    assert DIGITS.search(raw), raw
    assert "invalid GBNF" not in caplog.text
