"""The thinking budget through a live `prism serve` (app/config.py's --reasoning-budget, the
request fields read in app/api/): the OpenAI SDK's reasoning_effort and reasoning_budget, the
Anthropic SDK's thinking.budget_tokens and thinking disabled, the server's default, /metrics,
and the recording's forced marks, on the default model behind the qwen3-xml pack's template
(its prompt opens <think>)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from engine.chat.budget import EFFORT_BUDGETS, close_text
from engine.record.reader import read_session
from tests.support import ServerProcess

pytestmark = pytest.mark.model
DEFAULT = 5  # the server's --reasoning-budget
SKY = "Why is the sky blue? Think it through."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live(default_model, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("budget")
    port, rec = _free_port(), tmp / "rec.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    server = ServerProcess([sys.executable, "-m", "app", "serve", "--port", str(port), "--pack",
                     "qwen3-xml", "--model", str(default_model), "--parallel", "1",
                     "--n-ctx", "2048", "--reasoning-budget", str(DEFAULT),
                     "--record-to", str(rec)],
                    port, tmp / "server.log", "/health", env=env, timeout=180)
    try:
        yield f"http://127.0.0.1:{port}", rec
    finally:
        server.stop()


def _last_tokens(rec: Path):
    """The last recorded request's tokens (the recorder writes each line as it happens)."""
    return read_session(rec, strict=False).requests[-1].tokens


def _first_forced(rec: Path) -> int:
    toks = _last_tokens(rec)
    first = next(i for i, t in enumerate(toks) if t.forced)
    n = next((i for i in range(first, len(toks)) if not toks[i].forced), len(toks))
    assert "".join(t.text for t in toks[first:n]) == close_text("qwen-xml")
    return first


def _budget_total(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    line = next(ln for ln in text.splitlines()
                if ln.startswith("prism_reasoning_budget_total{"))
    return float(line.rsplit(" ", 1)[1])


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def test_the_servers_default_closes_a_plain_request(live):
    url, rec = live
    before = _budget_total(url)
    reply = _openai(url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": SKY}], max_tokens=60, temperature=0)
    msg = reply.choices[0].message
    assert _first_forced(rec) == DEFAULT
    assert msg.content and getattr(msg, "reasoning_content", None)
    assert _budget_total(url) == before + 1


def test_openai_reasoning_effort_is_a_budget(live):
    url, rec = live
    reply = _openai(url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": SKY}], max_tokens=EFFORT_BUDGETS[
            "minimal"] + 40, temperature=0, reasoning_effort="minimal")
    assert _first_forced(rec) == EFFORT_BUDGETS["minimal"] == 256
    assert reply.choices[0].message.content


def test_a_requests_reasoning_budget_overrides_the_default(live):
    url, rec = live
    _openai(url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": SKY}], max_tokens=40, temperature=0,
        extra_body={"reasoning_budget": 2})
    assert _first_forced(rec) == 2


def test_a_bad_budget_is_the_callers_400(live):
    url, _ = live
    with pytest.raises(openai.BadRequestError) as e:
        _openai(url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            extra_body={"reasoning_budget": -3})
    assert e.value.body["param"] == "reasoning_budget"


def test_anthropic_thinking_budget_tokens(live):
    url, rec = live
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    msg = client.messages.create(
        model="m", max_tokens=60, messages=[{"role": "user", "content": SKY}],
        thinking={"type": "enabled", "budget_tokens": 3}, extra_body={"temperature": 0})
    assert _first_forced(rec) == 3
    kinds = [b.type for b in msg.content]
    assert kinds[0] == "thinking" and "text" in kinds
    off = client.messages.create(
        model="m", max_tokens=30, messages=[{"role": "user", "content": SKY}],
        thinking={"type": "disabled"}, extra_body={"temperature": 0})
    assert [b.type for b in off.content] == ["text"]
    assert not any(t.forced for t in _last_tokens(rec))  # thinking off: nothing to close
