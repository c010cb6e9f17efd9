"""Llama 3 JSON (Llama 3.1, 3.2, 3.3): no reasoning; a call is a JSON object at a line start,
optionally after `<|python_tag|>`.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    {"name": "get_weather", "parameters": {"city": "Paris"}}
    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}

The object is read by the Hermes JSON scanner (engine/parse/families/hermes_json.py), so `arguments`
works as well as `parameters`, and a `{` inside a string never ends it. Several calls may be
separated by `;` (`{...}; {...}`); each is its own call.

Choices where the other servers differ: a bare object is a call only at the start of a line
and when its first key is "name" (vLLM's llama3_json parser takes an object anywhere in the
output when the whole output parses; a JSON example in prose stays text here); the family has
no reasoning, so a `</think>` is plain text.
"""

from __future__ import annotations

from engine.parse.families import hermes_json
from engine.parse.families.common import NONE, WS, Match, match_literal
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes import json_object
from engine.parse.shapes.record import JSON_OBJECT, CallFormat

NAME = "llama3-json"
PYTHON_TAG = "<|python_tag|>"

MARKERS = Markers(None, None, (PYTHON_TAG, "{"), body_openers=("{",), line_calls=("{",))
PRESERVED_TOKENS = (PYTHON_TAG,)


def match_opener(text: str, i: int) -> Match:
    """After `<|python_tag|>`: `{"name"`; after a bare `{` (the body's own): `"name"`."""
    m = match_literal(text, i, '"name"')
    if m != NONE:
        return m
    j = i - 1
    while j >= 0 and text[j] in WS:
        j -= 1
    if j >= 0 and text[j] == "{":  # a bare `{` is the object itself: a second `{` is not
        return NONE
    return hermes_json.match_opener(text, i)


class CallParser(hermes_json.CallParser):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._more = False  # `; {` followed: the next call of the list is read at once
        self._semi_end = 0

    def follow(self) -> CallParser | None:
        return CallParser(self.schemas, self.stream) if self._more else None

    def _after(self, ch: str) -> bool:
        """After the object: `;` then another object continues the list; anything else is
        the answer's text again. Whitespace is skipped, never kept (linear cost)."""
        if ch in WS:
            return False
        if not self._tail and ch == ";":
            self._tail = ";"
            self._semi_end = self._pos  # just past the `;`
            return False
        if self._tail and ch == "{":
            self._more = True
            self.done, self.end = True, self._semi_end
            return True
        self.done, self.end = True, self._obj_end
        return True


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


# The syntax as data: the writer and the forced-call grammar come from the json-object shape's
# engine (engine/parse/shapes/json_object.py); the reader above adds the `;` list.
FORMAT = CallFormat(JSON_OBJECT, sep="; ", args_key="parameters", args_alt=("arguments",),
                    line_start=True)


FAMILY = register(Family(
    name=NAME, models="Llama 3.1-3.3", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser, writer=Writer(json_object.write_call(FORMAT), calls_sep=FORMAT.sep),
    format=FORMAT,
    detect=(PYTHON_TAG, "<|start_header_id|>"), stops=("<|eot_id|>", "<|eom_id|>"),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack="llama3-json",
    repairs_history=False,
    grammar=CallGrammar(json_object.grammar_call(FORMAT), sep=FORMAT.sep),
))
