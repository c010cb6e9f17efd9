"""engine/parse/parser_tags.py, through the parser: what a tag start in the text turns out to be:
the reasoning closer (a stray one in the answer is dropped, a quoted one kept), a call opener (real
mid-line in the answer, text when quoted), the family's openers only, and the events a tag
leaves. Every case is parsed whole, per character and in random chunks, with stream_tools off
and on (parse_all_ways), except where the events themselves are asserted."""

from __future__ import annotations

import pytest

from engine.parse.events import ANOMALY, CONTENT, MARKUP, REASONING
from engine.parse.parser import OutputParser
from tests.engine.parse.parser_harness import (
    HERMES_CALL,
    TOOLS,
    XML_CALL,
    anomalies,
    parse_all_ways,
    run,
)


def test_think_close_wins_when_first():
    res = parse_all_ways("plan\n</think>\n\n" + XML_CALL, tools=TOOLS)
    assert res.reasoning == "plan" and res.content == "" and len(res.tool_calls) == 1
    assert anomalies(res) == {}


def test_content_call_after_text_and_several_calls_with_text_after():
    text = "Sure.\n" + XML_CALL + "\n" + HERMES_CALL + "\nDone."
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert [c.name for c in res.tool_calls] == ["get_weather", "read_file"]
    assert [c.index for c in res.tool_calls] == [0, 1]
    assert [c.id for c in res.tool_calls] == ["call_0", "call_1"]
    assert res.content == "Sure.Done."


def test_content_call_mid_line_is_real():
    res = parse_all_ways("Checking now. " + XML_CALL, start="content", tools=TOOLS)
    assert len(res.tool_calls) == 1 and res.content == "Checking now. "


@pytest.mark.parametrize("quote", ["inline", "fence", "tilde"])
def test_content_quoted_call_stays_text(quote):
    wrap = {
        "inline": "Write `" + XML_CALL + "` like that.",
        "fence": "Like:\n```\n" + XML_CALL + "\n```\n",
        "tilde": "Like:\n~~~~\n" + XML_CALL + "\n~~~~\n",
    }[quote]
    res = parse_all_ways(wrap, start="content", tools=TOOLS)
    assert res.tool_calls == () and res.content == wrap


def test_content_fence_closes_then_real_call():
    text = "```python\nx = '<tool_call>'\n```\n" + XML_CALL
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert len(res.tool_calls) == 1 and res.content == "```python\nx = '<tool_call>'\n```"


def test_stray_think_close_dropped_and_answer_streams():
    text = "reason\n</think>\n\nFirst part.\n\n</think>\n\nSecond part."
    res = parse_all_ways(text)
    assert res.reasoning == "reason"
    assert res.content == "First part.\n\nSecond part."
    assert anomalies(res) == {"stray_think_end": 1}


def test_stray_think_close_does_not_hold_the_answer():
    p = OutputParser(start="content", id_prefix="")
    p.feed("draft</think>")
    streamed = []
    for ch in "The answer streams live.":
        streamed += [e.text for e in p.feed(ch) if e.kind == CONTENT]
    assert "".join(streamed) == "The answer streams live."  # before finish()


def test_quoted_think_close_in_content_is_kept():
    res = parse_all_ways("Models write `</think>` to end.", start="content")
    assert res.content == "Models write `</think>` to end." and not anomalies(res)


def test_family_restricts_openers():
    res = parse_all_ways(HERMES_CALL, start="content", family="qwen-xml")
    assert res.tool_calls == () and res.content == HERMES_CALL
    res = parse_all_ways(XML_CALL, start="content", family="hermes-json")
    assert res.tool_calls == () and res.content == XML_CALL


def test_markup_events_carry_the_tags():
    events = run("a\n</think>\n\nb")
    assert [(e.kind, e.text) for e in events] == [
        (REASONING, "a"), (MARKUP, "\n</think>"), (MARKUP, "\n\n"), (CONTENT, "b")]


def test_anomaly_events_name_their_kind():
    events = run("x</think>y", start="content")
    anoms = [e for e in events if e.kind == ANOMALY]
    assert len(anoms) == 1 and anoms[0].anomaly == "stray_think_end"
    assert anoms[0].span == (1, 9)
