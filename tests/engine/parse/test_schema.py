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
    assert streams_raw(plain) and not streams_raw(opt) and not streams_raw(None)
    # Whenever a prefix is declared final, every value starting with it converts to itself.
    for types in (opt, either):
        for value in [*VALUES, "nul", "nullx", "n", " {", "\t[", "x{"]:
            for k in range(len(value) + 1):
                if raw_is_final(types, value[:k]):
                    assert convert(value, types) == (value, False), (types, value, k)
    assert not raw_is_final(opt, "nul") and raw_is_final(opt, "nulx")
    assert not raw_is_final(either, "   ") and raw_is_final(either, "  x")
