"""app/parse.py: `prism parse` as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RAW = (
    "I should look.\n\n<tool_call>\n<function=read_file>\n<parameter=path>\n/etc/hosts\n"
    "</parameter>\n</function>\n</tool_call>"
)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


def prism(*args, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "app", "parse", *args], input=stdin,
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("chunk", [None, "1", "0", "7"])
def test_parse_stdin_any_chunking_same_result(chunk, tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    args = ["--tools", str(tools)] + (["--chunk", chunk] if chunk else [])
    out = prism(*args, stdin=RAW)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res == {
        "reasoning": "I should look.",
        "content": "",
        "tool_calls": [{"id": "call_0", "name": "read_file",
                        "arguments": {"path": "/etc/hosts"}}],
        "finish_reason": "tool_calls",
        "anomalies": {"implicit_reasoning_end": 1, "stray_think_end": 0,
                      "unfinished_call": 0, "malformed_call": 0, "unknown_tool": 0,
                      "repaired_call": 0, "invalid_arguments": 0},
    }


def test_parse_file_no_thinking_events(tmp_path):
    f = tmp_path / "out.txt"
    f.write_text("Hi</think> there", encoding="utf-8")
    out = prism(str(f), "--no-thinking", "--events", "--stream-tools", "--chunk", "0",
                "--seed", "3")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert "".join(e["text"] for e in events if e["kind"] == "content") == "Hi there"
    assert [e["anomaly"] for e in events if e["kind"] == "anomaly"] == ["stray_think_end"]
    spans = [e["span"] for e in events]
    assert spans[0][0] == 0 and spans[-1][1] == len("Hi</think> there")


def test_family_option(tmp_path):
    raw = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert json.loads(prism("--no-thinking", stdin=raw).stdout)["tool_calls"][0]["name"] == "f"
    res = json.loads(prism("--no-thinking", "--family", "qwen-xml", stdin=raw).stdout)
    assert res["tool_calls"] == [] and res["content"] == raw
    # --dialect, the flag's former name, still works, and is not offered in --help
    old = json.loads(prism("--no-thinking", "--dialect", "qwen-xml", stdin=raw).stdout)
    assert old == res
    assert "--dialect" not in prism("--help").stdout


def test_unreadable_input_exit_2(tmp_path):
    out = prism(str(tmp_path / "missing.txt"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("prism parse: cannot read") and out.stderr.count("\n") == 1
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    assert prism(str(bad)).returncode == 2


@pytest.mark.parametrize("content", ["[1,", '{"tools": 3}', "[1, 2]"])
def test_bad_tools_file_exit_2(tmp_path, content):
    tools = tmp_path / "tools.json"
    tools.write_text(content)
    out = prism("--tools", str(tools), stdin="x")
    assert out.returncode == 2 and "bad tools file" in out.stderr
