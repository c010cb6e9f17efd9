"""Mistral (Mistral Small 3.x, Magistral, Devstral): `[THINK]` reasoning and `[TOOL_CALLS]`.

Owns the family's record (a name-json `CallFormat`, engine/parse/shapes/name_json.py: the
newer form read, written and forced) and its one addition to that reader, the older list (a
json-list record, `OLDER`, read by engine/parse/shapes/json_list.py's reader). Run by whichever
thread drives the parser.

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}             (tokenizer v11 and later)
    [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{...}      (with a call id)
    [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}, {...}]          (older)

Each `[TOOL_CALLS]` of the newer form is one call; the older form is one list, read call by
call (each element is its own call, `follow` hands the next one to the parser).

Choices where the other servers differ: the older list's elements may also name their
arguments `parameters` (as Hermes JSON reads them), and write them before the name
(`{"arguments": …, "name": …}`: the call streams whole once the name is known); `[CALL_ID]`'s
id is kept as the call's (Prism numbers a call without one: nine alphanumerics, which the
templates accept back); the answer after a call is text (vLLM drops what follows a
`[TOOL_CALLS]` list).
"""

from __future__ import annotations

from engine.parse.families.common import Match
from engine.parse.families.registry import register
from engine.parse.shapes import json_list
from engine.parse.shapes.build import engine, shape_family
from engine.parse.shapes.record import JSON_LIST, NAME_JSON, CallFormat

NAME = "mistral"
THINK = "[THINK]"
THINK_END = "[/THINK]"
CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"

FORMAT = CallFormat(NAME_JSON, call=CALLS, name_end=ARGS, id_tag=CALL_ID)
# The older list, read never written: a json-list record, its `[` read by the record's reader.
OLDER = CallFormat(JSON_LIST, section=CALLS, sep=", ")
PRESERVED_TOKENS = (THINK, THINK_END, CALLS, ARGS, CALL_ID)


class _OlderList(json_list.list_reader(OLDER)):
    opened = True


def _list_opener(record_test):
    """The record's opener test, and the older list's: its first object begins with "name",
    "arguments" or "parameters" (either order: `{"arguments": …, "name": …}` too)."""
    older_test = json_list.opener_test(OLDER)

    def match_opener(text: str, i: int) -> Match:
        if i < len(text) and text[i] == "[":
            return older_test(text, i)
        return record_test(text, i)

    return match_opener


def _with_list(record_reader: type) -> type:
    """The record's reader, and the older list, read by the json-list shape's reader one
    element at a time (`follow` hands the parser the next one)."""

    class CallParser(record_reader):
        def __init__(self, schemas: dict, stream: bool) -> None:
            super().__init__(schemas, stream)
            self._list: bool | None = None  # None: not yet known; True: the older list

        def follow(self) -> json_list.CallList | None:
            """The reader of the list's next element, when one follows this call."""
            return self._json.follow() if self._list else None

        def _run(self, eof: bool) -> None:
            if self._list is None:
                if not self._ws():
                    return
                self._list = self._buf[0] == "["
                if self._list:
                    self._eat(1)
                    self._json = _OlderList(self.schemas, self.stream)
                    self._json_at = self._pos
            if not self._list:
                super()._run(eof)
            elif self._sub(eof):
                self.done, self.end = True, self._pos

    return CallParser


_LETTERS = str.maketrans("0123456789", "ghijklmnop")


def _call_id(prefix: str, index: int) -> str:
    """9 alphanumeric characters, the only ids Mistral's templates accept back ("Tool call IDs
    should be alphanumeric strings with length 9!"): the reply's prefix as letters, then the
    index in digits (letters then digits, so two indices never give one id)."""
    digits = str(index)
    letters = "".join(c for c in prefix.lower().translate(_LETTERS) if "a" <= c <= "z") or "x"
    return (letters * 9)[: 9 - len(digits)] + digits


FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Mistral Small 3.x, Magistral, Devstral",
    reasoning=(THINK, THINK_END), writer={"reasoning_open": THINK, "reasoning_close": THINK_END},
    reader=_with_list, match_opener=_list_opener(engine(FORMAT).match_opener),
    detect=(CALLS, THINK), stops=("</s>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="mistral", call_id=_call_id,
))
MARKERS, match_opener, CallParser = FAMILY.markers, FAMILY.match_opener, FAMILY.call_parser

__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]
