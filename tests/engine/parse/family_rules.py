"""The parser's rules as checks any family can be put through (docs/design.md, section 4).

A family test module describes its family in a `Family` (how it writes a call, a malformed
call, whether it has `<think>`-style reasoning) and runs every check in `RULES` on it. Each
check parses whole, per character and in random chunks, stream_tools off and on
(parse_all_ways), so every case also checks the chunking invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "code": {"type": "string"}}}}}]
ARGS = {"city": "Paris", "days": 3}


@dataclass(frozen=True)
class Family:
    family: str
    call: Callable[[str, dict], str]  # a whole call (its section included) for name, args
    malformed: str  # a call the family's reader must refuse
    think: tuple[str, str] | None = ("<think>", "</think>")  # reasoning opener, closer
    typed: Callable[[str, str], str] | None = None  # one call with one raw value (XML-like)


def _parse(fam: Family, text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family=fam.family, tools=TOOLS, **kw)


def reasoning_then_answer(fam: Family):
    if fam.think is None:
        res = _parse(fam, "Just an answer.\nTwo lines.")
        assert (res.reasoning, res.content) == ("", "Just an answer.\nTwo lines.")
        return
    opener, closer = fam.think
    res = _parse(fam, opener + "\nLet me see.\n" + closer + "\n\nIt is 4.")
    assert (res.reasoning, res.content, res.tool_calls) == ("Let me see.", "It is 4.", ())
    res = _parse(fam, "Still thinking.\n" + closer + "\nDone.", start="reasoning")
    assert (res.reasoning, res.content) == ("Still thinking.", "Done.")
    assert not anomalies(res)


def one_call(fam: Family):
    res = _parse(fam, "Checking.\n" + fam.call("get_weather", ARGS))
    assert res.content == "Checking." and res.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", ARGS)]
    assert not anomalies(res)


def several_calls_then_text(fam: Family):
    text = (fam.call("get_weather", {"city": "A"}) + "\n" + fam.call("get_weather", {"city": "B"})
            + "\nBoth asked.")
    res = _parse(fam, text)
    assert [c.arguments["city"] for c in res.tool_calls] == ["A", "B"]
    assert res.content.strip() == "Both asked."
    assert [c.index for c in res.tool_calls] == [0, 1]


def call_inside_reasoning(fam: Family):
    if fam.think is None:
        return
    res = _parse(fam, "I need the weather.\n" + fam.call("get_weather", ARGS), start="reasoning")
    assert res.reasoning == "I need the weather." and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def quoted_markup_stays_text(fam: Family):
    call = fam.call("get_weather", ARGS)
    # An inline code span ends at a newline (docs/design.md): quote the call on one line.
    inline = "The format: `" + call.replace("\n", "") + "` and so on."
    for quoted in (inline, "```\n" + call + "\n```"):
        res = _parse(fam, quoted)
        assert res.tool_calls == () and res.content == quoted, quoted
    if fam.think is not None:
        text = "It looks like " + call.replace("\n", "") + " mid-sentence."
        res = _parse(fam, text + "\n" + fam.think[1] + "\nok", start="reasoning")
        assert res.tool_calls == () and res.reasoning == text


def quoted_call_over_lines_stays_text(fam: Family):
    """A call quoted in inline backticks stays text even where it runs over several lines: the
    code span that quotes call markup runs on to its closing backticks (in the reasoning too)."""
    call = fam.call("get_weather", ARGS)
    text = "Example: `" + call + "` and so on."
    res = _parse(fam, text)
    assert res.tool_calls == () and res.content == text
    if fam.think is not None:
        res = _parse(fam, "`" + call + "` is the format.\n" + fam.think[1] + "\nok",
                     start="reasoning")
        assert res.tool_calls == () and res.reasoning == "`" + call + "` is the format."


def stray_closer_dropped(fam: Family):
    if fam.think is None:
        return
    closer = fam.think[1]
    res = _parse(fam, "Part one." + closer + " part two.")
    assert res.content == "Part one. part two." and anomalies(res) == {"stray_think_end": 1}


def unfinished_call_is_text(fam: Family):
    call = fam.call("get_weather", ARGS)
    cut = call[: len(call) * 2 // 3]
    res = _parse(fam, cut)
    assert res.tool_calls == () and res.content == cut
    assert anomalies(res) == {"unfinished_call": 1}


def malformed_call_is_text(fam: Family):
    res = _parse(fam, fam.malformed)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content == fam.malformed


def unknown_tool_flagged(fam: Family):
    res = _parse(fam, fam.call("nope", {}))
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("nope", {})]
    assert anomalies(res) == {"unknown_tool": 1}


def schema_typing(fam: Family):
    if fam.typed is None:  # JSON arguments carry their own types
        res = _parse(fam, fam.call("get_weather", {"city": "42", "days": 3}))
        assert res.tool_calls[0].arguments == {"city": "42", "days": 3}
        return
    for key, raw, want in (("city", "42", "42"), ("days", "3", 3), ("code", "[1]", "[1]"),
                           ("other", "[1, 2]", [1, 2]), ("other", "plain", "plain")):
        res = _parse(fam, fam.typed(key, raw))
        assert res.tool_calls[0].arguments == {key: want}, (key, raw)


RULES = [reasoning_then_answer, one_call, several_calls_then_text, call_inside_reasoning,
         quoted_markup_stays_text, quoted_call_over_lines_stays_text, stray_closer_dropped,
         unfinished_call_is_text, malformed_call_is_text, unknown_tool_flagged, schema_typing]
