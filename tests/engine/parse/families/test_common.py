"""engine/parse/families/common.py: match results, literal prefixes, bounded whitespace, escaping of
fragments, and the tools' schemas."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import REGISTRY, opener_family
from engine.parse.families.common import (
    FULL,
    MAX_GAP,
    NONE,
    PREFIX,
    Match,
    escape_fragment,
    match_literal,
    skip_ws,
    tool_schemas,
)


def test_match_is_ordered_so_max_is_the_more_hopeful():
    assert NONE < PREFIX < FULL
    assert max(NONE, PREFIX) is PREFIX and max(PREFIX, FULL) is FULL
    assert [m.name for m in Match] == ["NONE", "PREFIX", "FULL"]


@pytest.mark.parametrize(("text", "i", "want"), [
    ("a<think>", 1, FULL),
    ("a<thi", 1, PREFIX),
    ("a", 1, PREFIX),  # the text ends exactly here: anything may follow
    ("a<tool", 1, NONE),
    ("<think", 0, PREFIX),
])
def test_match_literal(text, i, want):
    assert match_literal(text, i, "<think>") is want


def test_skip_ws_is_bounded_unless_told_otherwise():
    assert skip_ws("  \n\tx", 0) == 4
    assert skip_ws("   ", 0) == 3  # ran out of text: the caller must wait
    assert skip_ws(" " * (MAX_GAP + 1) + "x", 0) == -1
    assert skip_ws(" " * (MAX_GAP + 1) + "x", 0, None) == MAX_GAP + 1


def test_escape_fragment_joins_to_json_dumps():
    s = 'a"b\\c\n\u00e9\U0001f600\x01'
    assert "".join(escape_fragment(ch) for ch in s) == json.dumps(s)[1:-1]


def test_tool_schemas_reads_openai_bare_and_anthropic_tools():
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"name": "b", "parameters": {"properties": {}}},
        {"name": "c", "input_schema": {"type": "object", "properties": {"x": {}}}},
        {"name": "d", "parameters": "not a dict"},
        "junk",
        {"function": {"name": 3}},
    ]
    assert tool_schemas(tools) == {
        "a": {"type": "object"}, "b": {"properties": {}},
        "c": {"type": "object", "properties": {"x": {}}}, "d": {},
    }
    assert tool_schemas(None) == {}


def test_opener_family_auto_takes_either_and_a_named_family_only_its_own():
    assert opener_family("auto", "<function=f>", 0) == (FULL, REGISTRY["qwen-xml"])
    assert opener_family("auto", '{"name": "f"}', 0)[0] is FULL
    assert opener_family("qwen-xml", '{"name": "f"}', 0) == (NONE, None)
    assert opener_family("auto", "<fun", 0) == (PREFIX, None)


def test_auto_never_takes_another_familys_opener():
    for body in ("get_weather\n<arg_key>", "functions.f", "<｜tool▁call▁begin｜>f"):
        assert opener_family("auto", body, 0)[0] is NONE, body
