"""`prism stats --context` (app/context_report.py): a real process reads a recording and prints
each request's prompt by part, in the default model's real tokens, and the tokens two turns
share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message
from engine.record.recording import Recorder

ROOT = Path(__file__).resolve().parents[2]
TOOLS = tuple({"type": "function", "function": {
    "name": n, "description": f"The {n} tool.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for n in ("get_weather", "search_web"))


def _record(path: Path) -> list[str]:
    tpl = resolve_pack("qwen3-xml", require_model=False).chat_template()
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"q": "Oslo"}}}
    turns = [
        [Message("system", "You help with travel."), Message("user", "Weather in Oslo?")],
        [Message("system", "You help with travel."), Message("user", "Weather in Oslo?"),
         Message("assistant", "", tool_calls=(call,)),
         Message("tool", "Snow, -3 degrees.", tool_call_id="c1")],
    ]
    prompts = []
    with Recorder(path, model="scripted", pack="qwen3-xml") as rec:
        for i, messages in enumerate(turns):
            req = ChatRequest(messages=tuple(messages), tools=TOOLS, thinking=False)
            prompt = tpl.render(req.messages, tools=req.tools, enable_thinking=False)
            prompts.append(prompt)
            rec.request(f"r{i}", req, prompt, tools=TOOLS)
    return prompts


def test_stats_context_counts_each_part_with_the_real_tokenizer(tmp_path, default_model):
    from engine.backends.llama.vocab import Vocab

    path = tmp_path / "s.jsonl"
    prompts = _record(path)
    out = subprocess.run([sys.executable, "-m", "app", "stats", "--context", "--json", str(path)],
                         cwd=ROOT, text=True, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["requests"]
    vocab = Vocab(default_model)
    try:
        totals = [len(vocab.tokenize(p)) for p in prompts]
    finally:
        vocab.close()
    assert [r["tokens"] for r in rows] == totals
    for r in rows:
        assert sum(p["tokens"] for p in r["parts"]) == r["tokens"]
        assert r["tokenizer"] == default_model.name
        tools = [p for p in r["parts"] if p["kind"] == "tools"]
        assert [p["located"] for p in tools] == [True, True]  # the pack's template placed them
    assert rows[0]["unused_tools"] == ["get_weather", "search_web"]
    assert rows[1]["unused_tools"] == ["search_web"]  # the second turn called get_weather
    assert rows[1]["by_kind"]["tool_results"] > 0 and rows[1]["by_kind"]["tool_calls"] > 0
    # The second prompt extends the first: they share the whole first turn's text.
    assert rows[0]["shared_with_previous"] == 0
    assert rows[1]["shared_with_previous"] > totals[0] // 2


def test_stats_context_prints_a_line_per_request(tmp_path, default_model):
    path = tmp_path / "s.jsonl"
    _record(path)
    out = subprocess.run([sys.executable, "-m", "app", "stats", "--context", str(path)],
                         cwd=ROOT, text=True, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"tokens counted with {default_model.name}" in out.stdout
    assert "r1  " in out.stdout and "never called: search_web" in out.stdout
    assert "tool_results" in out.stdout
