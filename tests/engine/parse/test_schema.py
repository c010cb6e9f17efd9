"""engine/parse/schema.py: the JSON types a parameter's schema allows, and one raw value typed by
them.

The parser-level cases (a whole call through every chunking) are in test_parser.py; these pin
the typing rules themselves, including that equivalent schemas type every value alike.
"""

from __future__ import annotations

import pytest

from engine.parse.schema import (
    convert,
    declared_params,
    param_types,
    raw_is_final,
    schema_types,
    streams_raw,
)
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

# Optional[str] as Pydantic v2, Pydantic v1 / OpenAPI, a type list, a $ref and oneOf write it.
OPTIONAL_STR = [
    {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    {"type": "string", "nullable": True},
    {"type": ["string", "null"]},
    {"$ref": "#/$defs/MaybeText"},
    {"oneOf": [{"$ref": "#/definitions/Text"}, {"type": "null"}]},
]
DEFS = {
    "$defs": {"MaybeText": {"anyOf": [{"$ref": "#/definitions/Text"}, {"const": None}]}},
    "definitions": {"Text": {"type": "string", "description": "any text"}},
}
OPTIONAL_INT = [
    {"type": ["integer", "null"]},
    {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    {"allOf": [{"$ref": "#/$defs/Count"}], "nullable": True},
]
INT_DEFS = {"$defs": {"Count": {"type": "integer", "minimum": 0}}}

VALUES = ["42", "true", "null", "hello", "  spaced", "{\"a\": 1}", "[1, 2]", "None", "", "3.5"]


def _tool(props: dict, defs: dict) -> dict:
    return {"t": {"type": "object", "properties": props, **defs}}


@pytest.mark.parametrize("sch", OPTIONAL_STR)
def test_optional_string_resolves_to_string_and_null(sch):
    assert param_types(_tool({"p": sch}, DEFS), "t", "p") == {"string", "null"}


def test_equivalent_schemas_type_every_value_alike():
    for group, defs in ((OPTIONAL_STR, DEFS), (OPTIONAL_INT, INT_DEFS)):
        typed = []
        for sch in group:
            types = param_types(_tool({"p": sch}, defs), "t", "p")
            typed.append([convert(v, types) for v in VALUES])
        assert all(t == typed[0] for t in typed), group


def test_string_union_keeps_raw_text_but_null_is_null():
    types = schema_types({"anyOf": [{"type": "string"}, {"type": "null"}]})
    assert convert("42", types) == ("42", False)
    assert convert("true", types) == ("true", False)
    assert convert("{\"a\": 1}", types) == ("{\"a\": 1}", False)
    assert convert("null", types) == (None, False)
    assert convert("null ", types) == ("null ", False)  # only exactly `null`


def test_non_string_union_types_the_value():
    types = schema_types({"type": ["integer", "null"]})
    assert convert("7", types) == (7, False)
    assert convert("null", types) == (None, False)
    assert convert("None", types) == (None, True)  # a Python literal: repaired
    assert convert("seven", types) == ("seven", False)  # neither: the raw text, as before


@pytest.mark.parametrize(("raw", "want"), [
    # llama.cpp tests/test-chat.cpp `string_union_tool` ("amount": ["string", "integer"]):
    # Ling 3.0 `7` -> 7 and `1abc` -> "1abc"; Qwen3-Coder `42` -> 42 and `2 dollars` -> text
    ("7", 7), ("42", 42), ("-3", -3), ("1abc", "1abc"), ("2 dollars", "2 dollars"),
    # not exactly an integer's JSON: the text
    ("007", "007"), ("7a", "7a"), ("1.5", "1.5"), ("3.0", "3.0"), ("1e3", "1e3"),
    ("true", "true"), ("True", "True"), ("null", "null"), ("", ""), ("[7]", "[7]"),
])
def test_string_or_integer_reads_an_integer_literal_as_the_integer(raw, want):
    value, repaired = convert(raw, schema_types({"type": ["string", "integer"]}))
    assert value == want and type(value) is type(want) and not repaired


def test_string_unions_with_other_scalars_and_equivalent_spellings():
    for sch in ({"type": ["string", "number", "boolean"]},
                {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]},
                {"oneOf": [{"type": "boolean"}, {"type": ["number", "string"]}]}):
        types = schema_types(sch)
        assert [convert(r, types)[0] for r in ("7", "3.5", "1e3", "true", "false", "tru", "x")] \
            == [7, 3.5, 1000.0, True, False, "tru", "x"]
    # a string and a boolean only: numbers stay text
    assert convert("7", schema_types({"type": ["string", "boolean"]})) == ("7", False)
    # llama.cpp's nullable string: `123 Main St` starts like a number but is text
    assert convert("123 Main St", schema_types({"type": ["string", "null"]})) == (
        "123 Main St", False)


def test_string_or_object_decodes_an_object_only():
    types = schema_types({"type": ["string", "object"]})
    assert convert(' {"k": [1]}', types) == ({"k": [1]}, False)
    assert convert("[1]", types) == ("[1]", False)  # an array is not allowed: the text
    assert convert("{not json", types) == ("{not json", False)
    assert convert("12", types) == ("12", False)


@pytest.mark.parametrize(("raw", "sch", "want"), [
    ("True", {"type": "boolean"}, True),
    ("False", {"type": "boolean"}, False),
    ("None", {"type": "null"}, None),
    ("{'k': 'v', 'n': (1, 2)}", {"type": "object"}, {"k": "v", "n": [1, 2]}),
    ("[1, 'a', None]", {"type": "array"}, [1, "a", None]),
    ("1_000", {"type": "integer"}, 1000),
])
def test_python_literals_for_non_string_parameters(raw, sch, want):
    value, repaired = convert(raw, schema_types(sch))
    assert value == want and type(value) is type(want) and repaired


def test_python_literals_never_for_strings_unknown_types_or_misfits():
    assert convert("True", schema_types({"type": "string"})) == ("True", False)
    assert convert("True", None) == ("True", False)  # no schema: JSON or the raw text
    assert convert("{'a': 1}", schema_types({"type": "array"})) == ("{'a': 1}", False)
    assert convert("__import__('os')", schema_types({"type": "object"}))[1] is False


def test_values_json_cannot_hold_stay_text():
    # Sets, bytes, complex, non-string keys, infinities and NaN have no JSON form: a client
    # would get invalid JSON (json.dumps writes `Infinity`), so they stay the raw text.
    types = schema_types({"type": ["object", "array", "number"]})
    for raw in ("{1, 2}", "b'x'", "1j", "{1: 'a'}", "1e999", "NaN", "-Infinity", "[1e999]"):
        assert convert(raw, types) == (raw, False), raw
    assert convert("NaN", None) == ("NaN", False)


def test_json_that_fits_is_not_a_repair_and_integers_are_numbers():
    assert convert("3", schema_types({"type": "number"})) == (3, False)
    assert convert("3.0", schema_types({"type": "integer"})) == (3.0, False)
    assert convert("true", schema_types({"type": "integer"})) == (True, False)  # as before


def test_unknown_and_contradictory_schemas_are_untyped():
    assert schema_types({"description": "x"}) is None
    assert schema_types({"anyOf": [{"type": "string"}, {}]}) is None  # a branch allows all
    assert schema_types({"allOf": [{"type": "string"}, {"type": "integer"}]}) is None
    assert schema_types({"$ref": "#/$defs/Missing"}, {"$defs": {}}) is None
    assert schema_types({"$ref": "https://example.com/s.json"}, {}) is None


def test_ref_cycles_end():
    root = {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}
    assert schema_types({"$ref": "#/$defs/A"}, root) is None


def test_enum_and_const_give_their_values_types():
    assert schema_types({"enum": ["a", "b"]}) == {"string"}
    assert schema_types({"enum": [1, None]}) == {"integer", "null"}
    assert schema_types({"const": True}) == {"boolean"}


def test_declared_params_follow_a_top_level_ref():
    schemas = {
        "f": {"type": "object", "properties": {"a": {}, "b": {}}},
        "g": {"$ref": "#/$defs/Args",
              "$defs": {"Args": {"properties": {"x": {"type": "integer"}}}}},
        "h": {},
    }
    assert declared_params(schemas, "f") == {"a", "b"}
    assert declared_params(schemas, "g") == {"x"}
    assert param_types(schemas, "g", "x") == {"integer"}
    assert declared_params(schemas, "h") is None and declared_params(schemas, "zzz") is None


def test_streaming_decisions_agree_with_convert():
    plain = schema_types({"type": "string"})
    opt = schema_types({"type": ["string", "null"]})
    either = schema_types({"type": ["string", "object", "null"]})
    count = schema_types({"type": ["string", "integer"]})
    flag = schema_types({"type": ["string", "boolean", "number"]})
    assert streams_raw(plain) and not streams_raw(opt) and not streams_raw(None)
    assert not streams_raw(count) and not streams_raw(flag)
    # Whenever a prefix is declared final, every value starting with it converts to itself.
    for types in (opt, either, count, flag):
        for value in [*VALUES, "nul", "nullx", "n", " {", "\t[", "x{", "7", "7a", "-1.5e3",
                      "007", "truex", "fals", "12 dollars", "1abc"]:
            for k in range(len(value) + 1):
                if raw_is_final(types, value[:k]):
                    assert convert(value, types) == (value, False), (types, value, k)
    assert not raw_is_final(opt, "nul") and raw_is_final(opt, "nulx")
    assert not raw_is_final(either, "   ") and raw_is_final(either, "  x")
    assert not raw_is_final(count, "12") and raw_is_final(count, "12 d")
    assert raw_is_final(count, "x")
    assert not raw_is_final(flag, "tr") and raw_is_final(flag, "tx")


def test_a_string_or_integer_value_streams_as_it_reads_through_a_whole_call():
    """Qwen XML streams a union value once its start decides it (raw_is_final): every chunking
    gives the same call, and the streamed fragments join to its JSON (parse_all_ways)."""
    tools = [{"type": "function", "function": {"name": "set_union", "parameters": {
        "type": "object", "properties": {k: {"type": ["string", "integer"]}
                                         for k in ("a", "b", "c", "d")}}}}]
    text = ("<tool_call>\n<function=set_union>\n<parameter=a>\n7\n</parameter>\n"
            "<parameter=b>\n12 dollars and more text\n</parameter>\n<parameter=c>\n007\n"
            "</parameter>\n<parameter=d>\nx\n</parameter>\n</function>\n</tool_call>")
    res = parse_all_ways(text, family="qwen-xml", start="content", tools=tools)
    assert res.tool_calls[0].arguments == {"a": 7, "b": "12 dollars and more text", "c": "007",
                                           "d": "x"}
    assert not anomalies(res)
