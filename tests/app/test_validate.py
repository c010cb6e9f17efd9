"""app/api/validate.py directly: what a request body may hold, each refusal a 400 naming the
field (the same checks against a live server, per API, are in tests/app/test_hardening.py)."""

from __future__ import annotations

import json

import pytest

from app.api.errors import APIError
from app.api.validate import (
    MAX_DEPTH,
    check_tool_schema,
    not_text,
    parse_json,
    schema_grammar,
)


def refused(fn, *args) -> APIError:
    with pytest.raises(APIError) as info:
        fn(*args)
    assert info.value.status == 400
    return info.value


def nested(depth: int) -> bytes:
    """A body whose innermost list stands `depth` levels below the top object."""
    return b'{"a": ' + b"[" * depth + b"]" * depth + b"}"


def test_a_plain_object_passes_as_parsed():
    body = {"model": "m", "messages": [{"role": "user", "content": "h\u00e9 \U0001f600"}],
            "temperature": 0.5, "n": 1e300}
    assert parse_json(json.dumps(body).encode()) == body


@pytest.mark.parametrize("raw, says", [
    (b"", "empty"),
    (b"  \n", "empty"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"a": ', "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON"),
])
def test_what_is_not_a_json_object(raw, says):
    assert says in refused(parse_json, raw).message


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_numbers_json_does_not_have(number):
    err = refused(parse_json, b'{"temperature": ' + number.encode() + b"}")
    assert f"{number} is not a JSON number" in err.message


def test_a_number_too_large_for_a_float_is_not_finite():
    err = refused(parse_json, b'{"options": {"top_p": [0.5, 1e999]}}')
    assert err.param == "options.top_p[1]" and "not a finite number" in err.message


def test_a_lone_surrogate_is_named_where_it_is():
    err = refused(parse_json, b'{"messages": [{"content": "ok"}, {"content": "x\\ud800"}]}')
    assert (err.param, err.code) == ("messages[1].content", "invalid_unicode")
    assert "\\ud800 at character 1" in err.message
    key = refused(parse_json, b'{"tools": {"\\udfff": 1}}')
    assert (key.param, key.code) == ("tools", "invalid_unicode")
    assert parse_json(b'{"emoji": "\\ud83d\\ude00"}') == {"emoji": "\U0001f600"}  # a pair


def test_nesting_is_allowed_up_to_the_limit():
    assert parse_json(nested(MAX_DEPTH - 1))["a"] is not None
    err = refused(parse_json, nested(MAX_DEPTH))
    assert err.code == "nested_too_deeply" and err.param.startswith("a[0]")
    deep = refused(parse_json, nested(5000))  # past json's own recursion limit
    assert deep.code == "nested_too_deeply"


def test_an_output_schema_no_value_matches_is_refused():
    assert schema_grammar({"type": "object", "properties": {"x": {"enum": ["a", "b"]}}},
                          "response_format") is not None
    for empty in ({"enum": []}, {"anyOf": []},
                  {"type": "object", "properties": {"x": {"type": []}}}):
        err = refused(schema_grammar, empty, "response_format.json_schema.schema")
        assert (err.param, err.code) == ("response_format.json_schema.schema", "invalid_schema")


def test_tool_parameters_must_be_a_json_schema_for_an_object():
    check_tool_schema({"type": "object", "properties": {"city": {"type": "string"}}}, "f")
    check_tool_schema({"properties": {}}, "f")  # type defaults to object
    assert "must be a JSON Schema object" in refused(check_tool_schema, "{}", "f").message
    bad = refused(check_tool_schema, {"type": "object", "properties": {"x": {"type": "text"}}},
                  "tools[0].function.parameters")
    assert "'tools[0].function.parameters.properties.x.type' is not a valid JSON Schema" \
        in bad.message
    assert "must describe an object" in refused(check_tool_schema, {"type": "array"}, "f").message


def test_a_non_text_part_says_what_it_was():
    err = not_text("input_image", "input[0].content[1]")
    assert err.param == "input[0].content[1]" and err.code == "unsupported_content"
    assert "is an image" in err.message and "reads text only" in err.message
    assert "a 'video' part" in not_text("video", "x").message
