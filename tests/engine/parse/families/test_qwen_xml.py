"""engine/parse/families/qwen_xml.py, driven directly: the opener, where values end, the newline
stripping, typing by schema, the end of a call, errors and their resume points, and the
streamed arguments, each read whole, per character and in random chunks."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import qwen_xml
from engine.parse.families.common import FULL, NONE, PREFIX, Match, tool_schemas
from tests.engine.parse.family_harness import read, read_all_ways

CLOSE = "</tool_call>"
SCHEMAS = tool_schemas([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object",
    "properties": {"s": {"type": "string"}, "n": {"type": "integer"},
                   "o": {"type": "object"}}}}}])


def call(*params: tuple[str, str], name: str = "f") -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"\n<function={name}>\n{body}</function>\n"


@pytest.mark.parametrize(("text", "want"), [
    ("<function=f>", FULL),
    ("<function=", FULL),
    ("<func", PREFIX),
    ("", PREFIX),
    ("<parameter=a>", NONE),
    ('{"name"', NONE),
])
def test_match_opener(text, want):
    got = qwen_xml.match_opener(text, 0)
    assert got is want and isinstance(got, Match)


def test_call_ends_after_the_closing_tag():
    body = call(("s", "Paris"), ("n", "3")) + CLOSE
    p = read_all_ways(qwen_xml, body + "\nafter", schemas=SCHEMAS)
    assert p.done and p.end == len(body)
    assert (p.name, p.arguments) == ("f", {"s": "Paris", "n": 3})


def test_one_leading_and_one_trailing_newline_of_a_value_are_stripped():
    body = call(("s", "\n  two  \n")) + CLOSE
    p = read_all_ways(qwen_xml, body, schemas=SCHEMAS)
    assert p.arguments == {"s": "\n  two  \n"}


def test_a_value_may_contain_end_parameter_not_followed_by_a_tag():
    value = "a </parameter> b"
    p = read_all_ways(qwen_xml, call(("s", value)) + CLOSE, schemas=SCHEMAS)
    assert p.arguments == {"s": value}


def test_values_are_typed_by_the_schema():
    body = call(("s", "42"), ("n", "7"), ("o", '{"k": [1]}')) + CLOSE
    p = read_all_ways(qwen_xml, body, schemas=SCHEMAS)
    assert p.arguments == {"s": "42", "n": 7, "o": {"k": [1]}}


def test_without_a_schema_values_are_json_or_else_raw_text():
    body = call(("a", "[1, 2]"), ("b", "plain words"), name="other") + CLOSE
    p = read_all_ways(qwen_xml, body, schemas=SCHEMAS)
    assert p.arguments == {"a": [1, 2], "b": "plain words"}


def test_missing_end_parameter_before_end_function_is_recovered():
    body = "\n<function=f>\n<parameter=s>\nParis\n</function>\n" + CLOSE
    p = read_all_ways(qwen_xml, body, schemas=SCHEMAS)
    assert p.done and p.arguments == {"s": "Paris"}


def test_text_after_the_function_ends_the_call_before_it():
    fn = call(("s", "x"))
    p = read_all_ways(qwen_xml, fn + "The answer.", schemas=SCHEMAS)
    assert p.done and p.end == len(fn) and p.arguments == {"s": "x"}


def test_end_of_output_after_the_function_accepts_the_call():
    fn = call(("s", "x"))
    p = read_all_ways(qwen_xml, fn + "</tool", schemas=SCHEMAS)
    assert p.done and p.arguments == {"s": "x"}


def test_a_repeated_parameter_keeps_its_first_value():
    p = read_all_ways(qwen_xml, call(("s", "one"), ("s", "two")) + CLOSE, schemas=SCHEMAS)
    assert p.arguments == {"s": "one"}


def test_string_values_stream_before_they_close():
    body = call(("s", "a long value"), ("n", "5")) + CLOSE
    p = read(qwen_xml, body[: body.index("value")], schemas=SCHEMAS, eof=False)
    assert p.name == "f" and not p.done
    assert "".join(t for k, t, _ in p.out if k == "args") == '{"s": "a long '
    p = read_all_ways(qwen_xml, body, schemas=SCHEMAS)
    assert "".join(t for k, t, _ in p.out if k == "args") == json.dumps({"s": "a long value",
                                                                          "n": 5})


def test_a_call_without_parameters():
    p = read_all_ways(qwen_xml, "<function=ping>\n</function>\n" + CLOSE)
    assert (p.name, p.arguments) == ("ping", {})
    assert [(k, t) for k, t, _ in p.out] == [("start", "ping"), ("args", "{}")]


def test_no_function_is_an_error_resuming_at_the_offending_text():
    p = read_all_ways(qwen_xml, "\n  hello")
    assert p.error and not p.done and p.resume == 3


def test_a_newline_in_the_function_name_is_an_error():
    p = read_all_ways(qwen_xml, "<function=a\nb>")
    assert p.error and not p.done


def test_unfinished_value_at_end_of_output():
    p = read_all_ways(qwen_xml, "<function=f>\n<parameter=s>\nParis")
    assert p.error == "unfinished" and not p.done
