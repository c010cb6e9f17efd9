"""engine/parse/reading.py: `Reading`, how one output is read: the parser it makes, the filters
it implies, and its round trip through plain data (recordings, fixtures)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.parse import Reading as PublicReading
from engine.parse.events import EXTRA_TOOL_CALL, TOOL_CALL, TOOL_START, result_of
from engine.parse.filters import CallsAsText, FirstCallOnly, through
from engine.parse.parser import OutputParser
from engine.parse.reading import Reading

TOOLS = ({"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}},)
CALL = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
TWO = "Sure.\n" + CALL + "\n" + CALL.replace("=f>", "=g>")

FULL = Reading(start="content", family="qwen-xml", tools=TOOLS, tools_declared=True,
               stream_tools=True, one_call=True, calls_as_text=False)


def read(reading: Reading, text: str, *, reply: bool = False):
    parser = reading.parser(id_prefix="")
    filters = reading.filters() + (reading.reply_filters() if reply else [])
    return through(filters, parser.feed(text) + parser.finish())


def test_it_is_the_public_face():
    assert PublicReading is Reading


def test_the_defaults_are_the_parsers_own():
    r = Reading()
    p, plain = r.parser(), OutputParser()
    assert (p.family, p.stream_tools, p.state) == (plain.family, plain.stream_tools,
                                                   plain.state)
    assert r.filters() == [] and r.reply_filters() == []


def test_the_parser_is_made_as_the_reading_says():
    p = FULL.parser(id_prefix="x")
    assert (p.family, p.stream_tools, p.state) == ("qwen-xml", True, "content")
    evs = p.feed(CALL) + p.finish()
    (call,) = [e.call for e in evs if e.kind == TOOL_CALL]
    assert call.arguments == {"a": 1}  # typed by the declared tool's schema
    assert call.id == "call_x0"  # the ids as `id_prefix` fixes them
    assert any(e.kind == TOOL_START for e in evs)
    # Each call makes a new parser: one per output.
    assert FULL.parser() is not FULL.parser()


def test_tools_declared_makes_a_call_to_another_tool_unknown():
    text = CALL.replace("=f>", "=g>")
    declared = result_of(read(Reading(start="content", tools_declared=True), text))
    unknown = result_of(read(Reading(start="content"), text))
    assert declared.anomalies["unknown_tool"] == 1 and unknown.anomalies["unknown_tool"] == 0


def test_one_call_per_reply_is_a_filter_of_the_run():
    (f,) = FULL.filters()
    assert isinstance(f, FirstCallOnly) and FULL.filters()[0] is not f  # new ones each time
    res = result_of(read(FULL, TWO))
    assert [c.name for c in res.tool_calls] == ["f"] and res.anomalies[EXTRA_TOOL_CALL] == 1
    both = result_of(read(dataclasses.replace(FULL, one_call=False), TWO))
    assert [c.name for c in both.tool_calls] == ["f", "g"]


def test_calls_as_text_is_a_filter_of_the_reply_only():
    r = Reading(start="content", tools_declared=True, calls_as_text=True)
    assert r.filters() == []
    (f,) = r.reply_filters()
    assert isinstance(f, CallsAsText)
    assert len(result_of(read(r, CALL)).tool_calls) == 1  # the run keeps the call
    reply = result_of(read(r, CALL, reply=True))
    assert reply.tool_calls == () and reply.content == CALL


def test_round_trip_through_json():
    d = FULL.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert Reading.from_dict(json.loads(json.dumps(d))) == FULL
    assert Reading.from_dict(Reading().to_dict()) == Reading()
    assert set(d) == {f.name for f in dataclasses.fields(Reading)}


def test_missing_keys_take_their_defaults():
    assert Reading.from_dict({}) == Reading()
    assert Reading.from_dict({"start": "content", "one_call": True}) == Reading(
        start="content", one_call=True)


def test_an_older_fixtures_settings_read_as_a_reading():
    old = {"start": "content", "dialect": "hermes-json", "stream_tools": True,
           "tools": list(TOOLS)}
    assert Reading.from_dict(old) == Reading(start="content", family="hermes-json",
                                             stream_tools=True, tools=TOOLS)


def test_tools_are_a_tuple_and_readings_compare_by_value():
    r = Reading(tools=list(TOOLS))
    assert r.tools == TOOLS and isinstance(r.tools, tuple)
    assert r == Reading(tools=TOOLS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.start = "content"


def test_a_bad_reading_fails_where_it_is_used():
    with pytest.raises(ValueError, match="family"):
        Reading(family="martian").parser()
    with pytest.raises(ValueError, match="start"):
        Reading(start="nowhere").parser()
