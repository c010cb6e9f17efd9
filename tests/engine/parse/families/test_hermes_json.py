"""engine/parse/families/hermes_json.py, driven directly: the opener, the JSON scanner's decisions
(where the object ends, what is an error and where the text resumes) and the streamed
arguments, each read whole, per character and in random chunks."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, Match
from tests.engine.parse.family_harness import read, read_all_ways

CLOSE = "</tool_call>"


@pytest.mark.parametrize(("text", "want"), [
    ('{"name": "f"}', FULL),
    ('{ \n "name"', FULL),
    ("{", PREFIX),
    ('{  "na', PREFIX),
    ("", PREFIX),
    ('{"arguments": {}, "name": "f"}', NONE),  # the name must come first to be an opener
    ("[", NONE),
    ("{" + " " * 100 + '"name"', NONE),  # past the bounded gap: text, whatever follows
])
def test_match_opener(text, want):
    got = hermes_json.match_opener(text, 0)
    assert got is want and isinstance(got, Match)


def test_call_ends_at_the_closing_tag():
    body = '\n{"name": "f", "arguments": {"a": 1, "b": [true, null, "x"]}}\n' + CLOSE
    p = read_all_ways(hermes_json, body + "after")
    assert p.done and p.end == len(body)
    assert (p.name, p.arguments) == ("f", {"a": 1, "b": [True, None, "x"]})


def test_closing_tag_inside_a_string_does_not_end_the_call():
    args = {"q": "a </tool_call> b", "e": "\u00e9\n\"\\"}
    body = json.dumps({"name": "f", "arguments": args}) + CLOSE
    p = read_all_ways(hermes_json, body)
    assert p.done and p.arguments == args and p.end == len(body)


def test_text_after_the_object_ends_the_call_before_it():
    obj = '{"name": "f", "arguments": {}}'
    p = read_all_ways(hermes_json, obj + "\n\nThe answer.")
    assert p.done and p.end == len(obj) and p.arguments == {}


def test_end_of_output_after_a_whole_object_accepts_the_call():
    obj = '{"name": "f", "arguments": {"a": 1}}'
    p = read_all_ways(hermes_json, obj + "\n  </tool")
    assert p.done and p.end == len(obj)


def test_arguments_as_a_json_string_and_parameters_key():
    p = read_all_ways(hermes_json, '{"name": "f", "arguments": "{\\"a\\": [1]}"}' + CLOSE)
    assert p.arguments == {"a": [1]}
    p = read_all_ways(hermes_json, '{"name": "g", "parameters": {"b": 2}}' + CLOSE)
    assert (p.name, p.arguments) == ("g", {"b": 2})


def test_streamed_fragments_are_canonical_json_written_as_they_arrive():
    args = {"s": "two\nlines", "n": -1.5e3, "l": [1, {"k": False}], "z": None}
    body = '{"name":"f","arguments":{"s":"two\\nlines","n":-1.5e3,"l":[1,{"k":false}],"z":null}}'
    p = read(hermes_json, body[: body.index("lines") + 2], eof=False)
    assert p.name == "f" and not p.done
    early = "".join(t for k, t, _ in p.out if k == "args")
    assert early == '{"s": "two\\nli'  # the string streams before it closes
    p = read_all_ways(hermes_json, body + CLOSE)
    assert p.arguments == args


def test_name_after_the_arguments_streams_them_whole_at_the_end():
    body = '{"arguments": {"a": "x"}, "name": "f"}' + CLOSE
    p = read_all_ways(hermes_json, body)
    assert [(k, t) for k, t, _ in p.out] == [("start", "f"), ("args", '{"a": "x"}')]


@pytest.mark.parametrize(("body", "why"), [
    ('{"name": "f", "arguments": {"a": 1,}}', "unexpected }"),
    ('{"name": "f", "arguments": [1]}', "arguments is not an object"),
    ('{"arguments": {}}', "no name"),
    ('{"name": "f", "arguments": "not json"}', "arguments string is not JSON"),
    ('{"name": "f", "arguments": {"a": tru}}', "bad literal tru"),
    ('{"name": "f" "arguments": {}}', "unexpected string"),
])
def test_malformed_bodies_are_errors_with_a_resume_point(body, why):
    p = read_all_ways(hermes_json, body + CLOSE)
    assert not p.done and p.error == why
    assert 0 <= p.resume <= len(body)


def test_bad_character_before_the_object_resumes_at_it():
    p = read_all_ways(hermes_json, "  x{}")
    assert p.error == "expected {" and p.resume == 2


def test_unfinished_object_at_end_of_output():
    p = read_all_ways(hermes_json, '{"name": "f", "arguments": {"a": "b')
    assert p.error == "unfinished" and not p.done


def test_depth_is_bounded():
    deep = '{"name": "f", "arguments": ' + "[" * 70
    p = read(hermes_json, deep)
    assert p.error == "unexpected ["
