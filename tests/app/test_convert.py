"""app/api/convert.py: the converters every dialect shares, directly (the dialect tests reach
them through the server and the SDKs)."""

from __future__ import annotations

import json

import pytest

from app.api.convert import (
    Lenient,
    check_json_output,
    decode_arguments,
    function_tool,
    json_schema_format,
    sampling,
    stop_tuple,
    text_of,
    thinking_from_effort,
    validate,
)
from app.api.errors import APIError
from engine.chat.request import Sampling

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "days": {"type": "integer"}},
          "required": ["city"], "additionalProperties": False}


def test_text_of_strings_parts_and_none():
    assert text_of(None) == ""
    assert text_of("hi") == "hi"
    parts = [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"},
             "b", {"type": "input_text", "text": "c"}]
    assert text_of(parts) == "a\nb\nc"  # a part with no text is skipped, texts joined by lines
    with pytest.raises(APIError) as e:  # an image is refused, not skipped (issue 10, item 6)
        text_of([{"type": "image_url", "image_url": {}}], "messages[0].content")
    assert e.value.param == "messages[0].content[0]" and "vision" in e.value.message
    assert text_of({"type": "text", "text": "x"}) == "x"


@pytest.mark.parametrize(("content", "param"), [
    ([{"type": "text"}], "messages[0].content[0].text"),
    ([42], "messages[0].content[0]"),
    (42, "messages[0].content"),
])
def test_text_of_names_the_bad_part(content, param):
    with pytest.raises(APIError) as e:
        text_of(content, "messages[0].content")
    assert e.value.status == 400 and e.value.param == param


def test_decode_arguments_takes_json_strings_and_objects():
    assert decode_arguments('{"city": "Paris"}', "f") == {"city": "Paris"}
    assert decode_arguments({"city": "Paris"}, "f") == {"city": "Paris"}
    assert decode_arguments("", "f") == {} and decode_arguments(None, "f") == {}
    for bad in ("{not json", "[1, 2]", 3):
        with pytest.raises(APIError) as e:
            decode_arguments(bad, "tool_calls[0].function.arguments")
        assert e.value.param == "tool_calls[0].function.arguments"


def test_function_tool_fills_an_empty_schema():
    assert function_tool("f", None, None) == {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    t = function_tool("g", "does g", SCHEMA)["function"]
    assert t["description"] == "does g" and t["parameters"] is SCHEMA


def test_sampling_keeps_the_defaults_for_what_is_not_given():
    assert sampling() == Sampling()
    s = sampling(temperature=0.0, top_k=5, seed=3)
    assert (s.temperature, s.top_k, s.seed) == (0.0, 5, 3)
    assert (s.top_p, s.min_p) == (Sampling().top_p, Sampling().min_p)


def test_stop_tuple_drops_empty_strings():
    assert stop_tuple(None) == () and stop_tuple("") == ()
    assert stop_tuple("END") == ("END",)
    assert stop_tuple(["a", "", "b"]) == ("a", "b")


@pytest.mark.parametrize(("effort", "want"), [
    (None, None), ("none", False), (" None ", False), ("low", True), ("high", True)])
def test_thinking_from_effort(effort, want):
    assert thinking_from_effort(effort) is want


def test_json_schema_format_builds_a_grammar_llama_cpp_parses():
    from llama_cpp import LlamaGrammar

    grammar, thinking = json_schema_format(SCHEMA, "text.format.schema", None)
    assert thinking is False  # constrained output means no thinking
    assert grammar is not None and "root" in grammar
    LlamaGrammar.from_string(grammar, verbose=False)  # raises on GBNF llama.cpp rejects


def test_json_schema_format_leaves_a_thinking_model_unconstrained():
    assert json_schema_format(SCHEMA, "f", True) == (None, True)


@pytest.mark.parametrize("schema", [{"type": "no-such-type"}, "a string", None])
def test_json_schema_format_refuses_a_bad_schema_naming_the_field(schema):
    with pytest.raises(APIError) as e:
        json_schema_format(schema, "response_format.json_schema.schema", None)
    assert e.value.status == 400 and e.value.param == "response_format.json_schema.schema"


def test_check_json_output():
    assert check_json_output(json.dumps({"city": "Paris", "days": 2}), SCHEMA) is None
    assert "not JSON" in check_json_output("Paris", SCHEMA)
    assert "does not match" in check_json_output('{"days": 2}', SCHEMA)


class Body(Lenient):
    model: str = ""
    n: int


def test_validate_ignores_unknown_fields_and_names_the_bad_one():
    assert validate(Body, {"n": 1, "surprise": True}).n == 1
    with pytest.raises(APIError) as e:
        validate(Body, {"n": "many"}, "input[2]")
    assert e.value.param == "input[2].n"
    with pytest.raises(APIError) as e:
        validate(Body, {})
    assert e.value.message == "Missing required field 'n'"
