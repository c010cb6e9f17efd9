"""engine/chat/arguments.py: a complete call's arguments checked against its tool's schema.

The validator picks its draft by `$schema`, says what failed and where (a JSON pointer), reports
a schema that cannot check once and never raises; the filter adds one `invalid_arguments` anomaly
before a call that breaks its schema and lets every event through unchanged.
"""

from __future__ import annotations

import itertools
import logging

import pytest

from engine.chat import arguments
from engine.chat.arguments import (
    MAX_ERRORS,
    ArgumentCheck,
    ArgumentError,
    ToolChecks,
    describe,
)
from engine.parse.events import (
    ANOMALY,
    INVALID_ARGUMENTS,
    TOOL_CALL,
    merge,
    result_of,
)
from engine.parse.filters import through
from engine.parse.reading import Reading

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "units"],
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}
_unique = itertools.count()


def fresh_name() -> str:
    """A tool name no other test used: bad schemas are reported once per process."""
    return f"tool_{next(_unique)}"


def call(name: str, **params) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_a_missing_required_enum_is_reported_at_the_missing_property():
    errors = ToolChecks([WEATHER]).errors("get_weather", {"city": "Paris", "days": 3})
    assert errors == (ArgumentError("/units", "'units' is a required property"),)
    assert str(errors[0]) == "/units: 'units' is a required property"


def test_each_failure_says_what_and_where():
    errors = ToolChecks([WEATHER]).errors(
        "get_weather", {"city": 7, "days": "three", "units": "kelvin"})
    where = {e.pointer: e.message for e in errors}
    assert set(where) == {"/city", "/days", "/units"}
    assert "is not of type 'string'" in where["/city"]
    assert where["/days"] == "'three' is not of type 'integer'"
    assert "'kelvin' is not one of" in where["/units"]


def test_arguments_that_fit_give_no_error_and_an_undeclared_tool_none():
    checks = ToolChecks([WEATHER])
    assert checks.errors("get_weather", {"city": "Paris", "days": 3, "units": "celsius"}) == ()
    assert checks.errors("get_time", {"city": "Paris"}) is None


def test_pointers_escape_and_follow_nesting():
    schema = {"type": "object", "properties": {"a/b~c": {"type": "object", "properties": {
        "list": {"type": "array", "items": {"type": "integer"}}}}}}
    tool = {"name": "t", "parameters": schema}  # a bare function object reads the same
    (err,) = ToolChecks([tool]).errors("t", {"a/b~c": {"list": [1, "x"]}})
    assert err.pointer == "/a~1b~0c/list/1"


def test_an_error_at_the_object_itself_is_shown_at_the_root():
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "additionalProperties": False}
    (err,) = ToolChecks([{"name": "t", "parameters": schema}]).errors("t", {"town": "x"})
    assert err.pointer == "" and str(err).startswith("(root): Additional properties")


def test_anthropic_input_schema_is_checked_too():
    tool = {"name": "get_weather", "input_schema": WEATHER_PARAMS}
    errors = ToolChecks([tool]).errors("get_weather", {"city": "Paris", "days": 0,
                                                       "units": "celsius"})
    assert [e.pointer for e in errors] == ["/days"]


def test_the_schema_names_its_draft():
    # Tuple-form `items` is draft 7's; in Draft 2020-12 (the default) it is no valid schema.
    params = {"type": "object", "properties": {"p": {"type": "array",
                                                     "items": [{"type": "integer"}]}}}
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **params}
    (err,) = ToolChecks([{"name": "t", "parameters": draft7}]).errors("t", {"p": ["x"]})
    assert err.pointer == "/p/0"
    name = fresh_name()
    assert ToolChecks([{"name": name, "parameters": params}]).errors(name, {"p": ["x"]}) is None


@pytest.mark.parametrize("schema", [
    {"type": 12},  # not a schema
    {"$schema": 5, "type": "object"},  # a $schema that is no string
    {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/a.json"}}},
], ids=["invalid", "bad-$schema", "unresolvable-$ref"])
def test_a_schema_that_cannot_check_is_reported_once_and_checks_nothing(schema, caplog):
    name = fresh_name()
    tools = [{"name": name, "parameters": schema}]
    with caplog.at_level(logging.WARNING, logger="prism"):
        for _ in range(2):  # two requests declaring the same tool
            checks = ToolChecks(tools)
            assert checks.errors(name, {"a": 1}) is None
            assert checks.errors(name, {"a": 2}) is None
    lines = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(lines) == 1 and "not checked" in lines[0]


def test_a_tool_is_compiled_once_per_request(monkeypatch):
    compiled = []
    real = arguments.compile_schema
    monkeypatch.setattr(arguments, "compile_schema",
                        lambda name, schema: compiled.append(name) or real(name, schema))
    checks = ToolChecks([WEATHER])
    for days in (1, 2, "x"):
        checks.errors("get_weather", {"city": "Paris", "days": days})
    ToolChecks([WEATHER]).errors("get_weather", {})
    assert compiled == ["get_weather", "get_weather"]  # once each request, on its first call


def test_describe_keeps_the_first_failures_and_counts_the_rest():
    errors = [ArgumentError(f"/p{i}", "bad") for i in range(MAX_ERRORS + 2)]
    text = describe(errors)
    assert text.count("bad") == MAX_ERRORS and text.endswith("; and 2 more")
    assert describe(errors[:1]) == "/p0: bad"


def events_of(output: str, tools, *, stream_tools: bool, chunk: int = 3):
    reading = Reading(start="content", family="qwen-xml", tools=tuple(tools),
                      tools_declared=True, stream_tools=stream_tools)
    parser = reading.parser(id_prefix="t")
    raw = [ev for i in range(0, len(output), chunk) for ev in parser.feed(output[i:i + chunk])]
    raw += parser.finish()
    return raw, through([ArgumentCheck(tools)], raw)


@pytest.mark.parametrize("stream_tools", [True, False])
def test_the_filter_marks_a_broken_call_and_changes_nothing_else(stream_tools):
    output = ("Checking.\n" + call("get_weather", city="Paris", days=3) + "\n"
              + call("get_weather", city="Oslo", days=2, units="celsius"))
    raw, checked = events_of(output, [WEATHER], stream_tools=stream_tools)
    marks = [ev for ev in checked if ev.anomaly == INVALID_ARGUMENTS]
    assert [m.text for m in marks] == ["/units: 'units' is a required property"]
    assert [ev for ev in checked if ev.anomaly != INVALID_ARGUMENTS] == raw  # all else as is
    (mark,) = marks
    first = next(ev for ev in checked if ev.kind == TOOL_CALL)
    assert checked[checked.index(first) - 1] is mark  # just before the call it concerns
    assert mark.kind == ANOMALY and mark.span == (first.span[0], first.span[0])
    assert (mark.index, mark.call_id) == (first.index, first.call_id)
    assert "".join(output[a:b] for a, b in (ev.span for ev in merge(checked))) == output
    res = result_of(checked)
    assert res.anomalies[INVALID_ARGUMENTS] == 1
    assert res.tool_calls == result_of(raw).tool_calls  # delivered as the model wrote them


def test_an_undeclared_tool_is_unknown_not_invalid():
    _, checked = events_of(call("get_time", zone="UTC"), [WEATHER], stream_tools=True)
    res = result_of(checked)
    assert res.anomalies["unknown_tool"] == 1 and res.anomalies[INVALID_ARGUMENTS] == 0
    assert [c.name for c in res.tool_calls] == ["get_time"]


def test_no_tools_no_check():
    assert not ArgumentCheck([]).checks
    _, checked = events_of(call("get_weather", city="x"), [], stream_tools=False)
    assert result_of(checked).anomalies[INVALID_ARGUMENTS] == 0
