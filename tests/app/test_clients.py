"""Five coding agents' first requests against replay servers (issue 24, items 2 and 3): opencode
1.18.33, aider 0.86.2, Qwen Code 0.24.4, pi 0.73.1 and Continue's CLI 1.5.47, each request
exactly as captured on the wire (tests/app/data/client_*.json, copies of ../shared/clients),
sent with the official openai SDK to a server built from `prism serve`'s own arguments.

What is checked: a plain-text call waits for the request that declares tools (opencode's title
request comes first and has none), `--replay-strict-order` keeps the old order, and a replay
counts prompt tokens with a GGUF vocabulary (the pack's, exactly; else the default model's,
said to be an estimate in /props and the recording's header).
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from engine.backends.llama.vocab import Vocab
from engine.record.reader import read_session
from engine.record.replay import split_text
from tests.app import test_refusals as refusals
from tests.app.conftest import DATA, captured, sdk_kwargs
from tests.app.test_refusals import HERMES_CALL, QWEN_CALL, output
from tests.support import ROOT

prism_serve = refusals.prism_serve  # the fixture: `prism serve ARGV`'s service, served

SHARED = ROOT.parent / "shared" / "clients"
# fixture name -> the file in ../shared/clients it copies
COPIES = {"opencode": "opencode_first_request.json",
          "opencode_title": "opencode_title_request.json",
          "aider": "aider_first_request.json", "qwen": "qwen_first_request.json",
          "pi": "pi_first_request.json", "continue_cli": "continue_cli_first_request.json",
          "openwebui": "openwebui_chat_with_tools.json"}  # bench/prefix_cache.py's
ANSWER = "Done: the files are listed."


@pytest.mark.parametrize("name", sorted(COPIES))
def test_the_fixtures_are_the_captured_requests(name):
    if not SHARED.is_dir():
        pytest.skip(reason=f"the shared folder {SHARED} is not beside this checkout")
    assert (DATA / f"client_{name}.json").read_bytes() == (SHARED / COPIES[name]).read_bytes()


def stream_reply(live, body: dict) -> tuple[str, list, dict | None]:
    """The streamed reply to a captured chat body: (all it wrote, reasoning and content; tool
    call deltas; usage)."""
    chat = live.openai().chat.completions
    text, calls, usage = "", [], None
    for chunk in chat.create(**sdk_kwargs(chat.create, body)):
        usage = chunk.usage.model_dump() if chunk.usage else usage
        for choice in chunk.choices:
            text += (getattr(choice.delta, "reasoning_content", None) or "") + (
                choice.delta.content or "")
            calls += choice.delta.tool_calls or ()
    return text, calls, usage


@pytest.mark.parametrize("client", ["opencode", "pi", "continue_cli"])
def test_each_tool_clients_first_request_gets_the_call_whole(prism_serve, tmp_path, client,
                                                             default_model):
    live = prism_serve("--replay", output(tmp_path, HERMES_CALL), "--pack", "smollm2",
                       "--n-ctx", "8192")
    body = captured(client)["body"]
    assert body["stream"] is True and body["tools"]
    text, calls, _ = stream_reply(live, body)
    assert text == "" and calls[0].function.name == "bash"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"command": "ls"}


def test_aider_without_tools_gets_text(prism_serve, tmp_path, default_model):
    # aider's whole-file format asks for no tools: the answer goes to it, the call stays
    live = prism_serve("--replay", output(tmp_path, ANSWER, "1.txt"),
                       output(tmp_path, HERMES_CALL, "2.txt"), "--pack", "smollm2")
    body = captured("aider")["body"]
    assert "tools" not in body
    assert stream_reply(live, body)[:2] == (ANSWER, [])


def test_qwen_codes_first_request_does_not_fit_8k(prism_serve, tmp_path, default_model):
    live = prism_serve("--replay", output(tmp_path, HERMES_CALL), "--pack", "smollm2",
                       "--n-ctx", "8192")
    with pytest.raises(openai.BadRequestError) as err:
        stream_reply(live, captured("qwen")["body"])
    assert err.value.code == "context_length_exceeded"


def test_opencodes_title_request_does_not_take_the_call(prism_serve, tmp_path, default_model):
    live = prism_serve("--replay", output(tmp_path, QWEN_CALL, "1.txt"),
                       output(tmp_path, ANSWER, "2.txt"))
    title, first = captured("opencode_title")["body"], captured("opencode")["body"]
    with pytest.raises(openai.BadRequestError, match="holds a tool call"):
        stream_reply(live, title)
    calls = stream_reply(live, first)[1]
    assert calls and calls[0].function.name == "bash"
    assert stream_reply(live, title)[0] == ANSWER  # the next output holds no call


def test_strict_order_keeps_the_old_order(prism_serve, tmp_path, default_model):
    live = prism_serve("--replay", output(tmp_path, QWEN_CALL, "1.txt"),
                       output(tmp_path, ANSWER, "2.txt"), "--replay-strict-order")
    text, calls, _ = stream_reply(live, captured("opencode_title")["body"])
    assert calls == [] and "<function=bash>" in text  # the call, as text: the title took it
    assert stream_reply(live, captured("opencode")["body"])[:2] == (ANSWER, [])


def test_a_replay_on_a_pack_with_a_gguf_counts_with_its_vocabulary(prism_serve, tmp_path,
                                                                   default_model):
    live = prism_serve("--replay", output(tmp_path, HERMES_CALL), "--pack", "smollm2")
    assert live.http().get("/props").json()["token_counts"] == "exact"
    _, _, usage = stream_reply(live, captured("opencode")["body"])
    vocab = Vocab(default_model)
    try:
        assert usage["prompt_tokens"] == len(vocab.tokenize(live.last.prompt))
    finally:
        vocab.close()
    assert "token_counts" not in read_session(live.service.recorder.path).header


def test_a_replay_without_one_counts_with_the_default_models_and_says_so(
        prism_serve, tmp_path: Path, default_model):
    live = prism_serve("--replay", output(tmp_path, QWEN_CALL))  # qwen3-xml: no GGUF
    assert live.http().get("/props").json()["token_counts"] == "estimate"
    _, _, usage = stream_reply(live, captured("opencode")["body"])
    vocab = Vocab(default_model)
    try:
        counted = len(vocab.tokenize(live.last.prompt))
    finally:
        vocab.close()
    # a BPE count, not the text split that made opencode compact without end
    assert usage["prompt_tokens"] == counted != len(split_text(live.last.prompt))
    live.service.recorder.close()
    assert read_session(live.service.recorder.path).header["token_counts"] == "estimate"
