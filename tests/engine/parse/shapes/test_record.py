"""engine/parse/shapes/: one `CallFormat` record gives the reader, the writer and the forced-call
grammar, for every shape; a record of markers alone (as a template probe would fill one in)
reads back what its own writer writes, at every chunking, stream_tools off and on."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY
from engine.parse.shapes.build import engine
from engine.parse.shapes.record import (
    JSON_LIST,
    JSON_OBJECT,
    NAME_JSON,
    PYTHON_LIST,
    SHAPES,
    TAGGED,
    CallFormat,
)
from tests.engine.parse.family_harness import read_all_ways

# Records no family registers: markers as a probe could diff them out of a template's renders.
RECORDS = {
    "tagged": CallFormat(TAGGED, section="<calls>\n", section_end="</calls>",
                         call='<call name="', name_end='">\n', param='<arg name="',
                         key_end='">', value_end="</arg>\n", call_end="</call>\n"),
    "tagged-kv": CallFormat(TAGGED, call="<fn>", name_end="\n", param="<k>",
                            key_end="</k>", value="<v>", value_end="</v>\n",
                            call_end="</fn>", sep="\n"),
    "json-object": CallFormat(JSON_OBJECT, call="<call>", call_end="</call>", sep="\n"),
    "json-list": CallFormat(JSON_LIST, section="<calls>", section_end="</calls>", sep=", "),
    "json-list-keyed": CallFormat(JSON_LIST, section="<calls>", section_end="</calls>",
                                  sep=", ", keyed=True),
    "python-list": CallFormat(PYTHON_LIST, section="<py>", section_end="</py>", sep=", "),
    "name-json": CallFormat(NAME_JSON, section="<calls>", section_end="</calls>", call="<call>",
                            name_end="<args>", call_end="</call>", sep="\n"),
    "name-json-indexed": CallFormat(NAME_JSON, call="<|call|>", name_prefix="functions.",
                                    index=":", name_end="<|args|>", call_end="<|end|>"),
    "name-json-bare-end": CallFormat(NAME_JSON, call="[CALL]", name_end="[ARGS]"),
    # DeepSeek R1's layout as a probe diffs it: the fence is in the record's own strings.
    "name-json-fenced": CallFormat(NAME_JSON, section="<s>", section_end="</s>",
                                   call="<c>function<t>", name_end="\n```json\n",
                                   call_end="\n```<e>", sep="\n"),
}
# The families that are name-json records: their record round-trips like the others.
RECORDS.update({name: REGISTRY[name].format for name in ("deepseek", "kimi-k2", "mistral")})
CALL = ToolCall("c0", "get_weather", {"city": "\nParis ", "days": 3, "tags": ["a", None],
                                      "deep": {"x": True}}, 0)


@pytest.mark.parametrize("key", RECORDS)
def test_a_record_reads_back_what_it_writes(key):
    fmt = RECORDS[key]
    eng = engine(fmt)
    written = eng.open + eng.write_call(CALL, 0) + eng.close
    opener = eng.openers[0]
    assert written.startswith(opener)
    body = written[len(opener):]
    assert eng.match_opener(body, len(body) - len(body.lstrip())) == 2  # FULL
    p = read_all_ways(SimpleNamespace(CallParser=eng.reader), body + " tail")
    assert (p.name, p.arguments) == (CALL.name, CALL.arguments)
    assert p.end == len(body)


@pytest.mark.parametrize("key", RECORDS)
def test_a_record_gives_a_grammar(key):
    from engine.grammar.writer import Writer

    fmt = RECORDS[key]
    w = Writer({})
    fn = {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}
    rule = engine(fmt).grammar_call(w, 0, fn)
    assert json.dumps("get_weather")[1:-1] in rule


def test_the_shapes_are_the_migrated_families_records():
    """The families on a shape carry their record, and every shape serves one."""
    shapes = {f.format.shape for f in REGISTRY.values() if f.format is not None}
    assert shapes == set(SHAPES)
    for name in ("glm", "minimax-xml", "dsml", "lfm2", "pythonic", "pythonic-tagged",
                 "json-list", "granite", "nemotron-v2", "apriel", "deepseek", "kimi-k2"):
        fam = REGISTRY[name]
        assert fam.format is not None
        assert fam.call_parser.__bases__ == engine(fam.format).reader.__bases__, name
    # Hunyuan 3's reader is its record's, plus its one repair (a missing separator).
    hy = REGISTRY["hunyuan3"]
    assert issubclass(hy.call_parser, engine(hy.format).reader.__bases__[0])
    # Mistral's reader is its name-json record's, plus the older JSON list.
    mi = REGISTRY["mistral"]
    assert issubclass(mi.call_parser, engine(mi.format).reader.__bases__[0])


@pytest.mark.parametrize("name", ["hunyuan3", "granite", "nemotron-v2", "apriel", "minimax-m1",
                                  "gigachat3.1", "firefunction", "hermes-json", "llama3-json",
                                  "functionary-v3.1"])
def test_a_family_writes_and_forces_calls_from_its_record(name):
    """Families that keep a reader of their own still write and force calls from their record:
    the family's writer writes exactly what the record's engine writes, and so does its
    grammar."""
    from engine.grammar.writer import Writer

    fam = REGISTRY[name]
    eng = engine(fam.format)
    call = ToolCall("c0", "get_weather", {"city": "Paris", "days": 3}, 0)
    assert fam.writer.write_call(call) == eng.open + eng.write_call(call, 0) + eng.close
    fn = {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}}
    assert fam.grammar.call(Writer({}), 0, fn) == eng.grammar_call(Writer({}), 0, fn)
    assert (fam.grammar.open, fam.grammar.close) == (eng.open, eng.close)


def test_a_json_list_record_may_take_a_lone_object_and_repair_a_missing_bracket():
    """`single`: an object without the list's brackets is a list of one; `repair_close`: a
    list whose `]` never comes ends at its closer, a repair. Without them, neither is read."""
    strict = CallFormat(JSON_LIST, section="<calls>", section_end="</calls>", sep=", ")
    lenient = CallFormat(JSON_LIST, section="<calls>", section_end="</calls>", sep=", ",
                         single=True, repair_close=True)
    lone = '{"name": "f", "arguments": {"a": 1}}</calls> tail'
    unclosed = '[{"name": "f", "arguments": {"a": 1}}</calls> tail'
    for body in (lone, unclosed):
        assert engine(strict).match_opener(body, 0) == (0 if body is lone else 2)
        assert engine(lenient).match_opener(body, 0) == 2  # FULL
        p = read_all_ways(SimpleNamespace(CallParser=engine(lenient).reader), body)
        assert (p.name, p.arguments) == ("f", {"a": 1})
        assert p.end == body.index(" tail")
        assert p.repairs == ([] if body is lone else ["no ]"])
    p = read_all_ways(SimpleNamespace(CallParser=engine(strict).reader), unclosed)
    assert (p.name, p.repairs) == ("f", [])
    assert p.end == unclosed.index("</calls>")  # the list just stops: its closer is text


def test_a_record_is_frozen_data():
    fmt = RECORDS["tagged"]
    with pytest.raises(AttributeError):
        fmt.call = "x"  # type: ignore[misc]
    with pytest.raises(ValueError):
        CallFormat("yaml")
    assert fmt.describe() == "tagged in <calls>"
    assert REGISTRY["pythonic"].format.describe() == "python list (bare)"


@pytest.mark.parametrize("module", ["functionary_v3_2", "gigachat3", "apertus"])
def test_a_family_with_its_own_frame_writes_and_forces_calls_from_a_record(module):
    """Families whose record is not registered (their reader and frame are their own) still
    write and force each call exactly as their record's engine does."""
    import importlib

    from engine.grammar.writer import Writer

    mod = importlib.import_module(f"engine.parse.families.{module}")
    fam, eng = mod.FAMILY, engine(mod.FORMAT)
    call = ToolCall("c0", "get_weather", {"city": "Paris", "days": 3}, 0)
    assert fam.writer.write_call(call) == eng.open + eng.write_call(call, 0) + eng.close
    fn = {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}}
    assert fam.grammar.call(Writer({}), 0, fn) == eng.grammar_call(Writer({}), 0, fn)


def test_firefunction_reads_its_list_with_its_record_reader():
    """FireFunction's reader is its json-list record's, started after the opener's `[`."""
    ff = REGISTRY["firefunction"]
    assert issubclass(ff.call_parser, engine(ff.format).reader.__bases__[0])
    body = '{"name": "f", "arguments": {"a": 1}}, {"name": "g", "parameters": {}}] tail'
    p = read_all_ways(SimpleNamespace(CallParser=ff.call_parser), body)
    assert (p.name, p.arguments) == ("f", {"a": 1})
    assert p.end == body.index(", {") + 1  # the comma is the call's: the next one follows


def test_a_json_list_record_may_name_other_name_keys_and_an_id_key():
    """`name_alt`: other keys read as the name; `id_key`: the model's own id, kept when it
    comes before the name. Neither is written."""
    fmt = CallFormat(JSON_LIST, section="<calls>", section_end="</calls>", sep=", ",
                     name_key="tool_name", name_alt=("name",), args_key="parameters",
                     id_key="call_id")
    eng = engine(fmt)
    call = ToolCall("c0", "f", {"a": 1}, 0)
    assert eng.write_call(call, 0) == '{"tool_name": "f", "parameters": {"a": 1}}'
    body = '[{"call_id": "7", "name": "f", "parameters": {"a": 1}}]</calls> tail'
    assert eng.match_opener(body, 0) == 2  # FULL: the id may come first
    p = read_all_ways(SimpleNamespace(CallParser=eng.reader), body)
    assert (p.name, p.arguments, p.call_id) == ("f", {"a": 1}, "7")
    assert p.end == body.index(" tail")


def test_a_keyed_json_list_record_reads_the_name_from_the_one_key():
    """`keyed`: each object is `{NAME: ARGS}`; an object of two keys is no call."""
    fmt = CallFormat(JSON_LIST, section="<calls>", section_end="</calls>", sep=", ",
                     keyed=True)
    eng = engine(fmt)
    assert eng.write_call(ToolCall("c0", "f", {"a": 1}, 0), 0) == '{"f": {"a": 1}}'
    body = '[{"f": {"a": [1, "x"]}}, {"g": {}}]</calls>'
    assert eng.match_opener(body, 0) == 2  # FULL
    p = read_all_ways(SimpleNamespace(CallParser=eng.reader), body)
    assert (p.name, p.arguments) == ("f", {"a": [1, "x"]})
    assert p.end == body.index(", {") + 1  # the comma is the call's: the next one follows
    p = read_all_ways(SimpleNamespace(CallParser=eng.reader), '[{"f": {}, "g": {}}]')
    assert p.error == "not one call"
