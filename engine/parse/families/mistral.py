"""Mistral (Mistral Small 3.x, Magistral, Devstral): `[THINK]` reasoning and `[TOOL_CALLS]`.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}             (tokenizer v11 and later)
    [TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{...}      (with a call id)
    [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}, {...}]          (older)

Each `[TOOL_CALLS]` of the newer form is one call; the older form is one list, read call by
call (each element is its own call, `follow` hands the next one to the parser).

Choices where the other servers differ: the older list's elements may also name their
arguments `parameters` (as Hermes JSON reads them), and write them before the name
(`{"arguments": …, "name": …}`: the call streams whole once the name is known); `[CALL_ID]`'s
id is not kept (Prism numbers its calls); the answer after a call is text (vLLM drops what
follows a `[TOOL_CALLS]` list).
"""

from __future__ import annotations

import json

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody, word_then
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes.json_list import object_opener

NAME = "mistral"
THINK = "[THINK]"
THINK_END = "[/THINK]"
CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_NAME_CHARS = "_-."

MARKERS = Markers(THINK, THINK_END, (CALLS,))
PRESERVED_TOKENS = (THINK, THINK_END, CALLS, ARGS, CALL_ID)

_KEYS = ("name", "arguments", "parameters")

_BEGIN, _NAME, _ID, _ARGS_TAG, _ARGS, _ELEM, _AFTER_ELEM = range(7)


def match_opener(text: str, i: int) -> Match:
    """`NAME[ARGS]`, `NAME[CALL_ID]`, or a list whose first object begins with "name" or
    "arguments"."""
    if i < len(text) and text[i] == "[":
        j = skip_ws(text, i + 1)
        if j < 0:
            return NONE
        # The element's keys in either order (`{"arguments": …, "name": …}` too).
        return PREFIX if j == len(text) else object_opener(text, j, _KEYS)
    return word_then(text, i, _NAME_CHARS, (ARGS, CALL_ID))


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._more = False  # a list element followed: the next call continues the list

    def follow(self) -> CallParser | None:
        """The reader of the list's next element, when one follows this call."""
        if not self._more:
            return None
        nxt = CallParser(self.schemas, self.stream)
        nxt._st = _ELEM
        return nxt

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                if self._buf[0] == "[":
                    self._eat(1)
                    self._st = _ELEM
                else:
                    self._st = _NAME
            elif st == _NAME:
                word = self._word(_NAME_CHARS)
                if not word:
                    return
                self._name_seen = word  # started once the optional id is read: it is the id
                self._st = _ID
            elif st == _ID:  # an optional `[CALL_ID]id` before `[ARGS]`
                b = self._buf
                m = match_literal(b, 0, CALL_ID)
                if m == PREFIX:
                    return  # `[` could begin either tag; `[C...` only this one
                if m == FULL:
                    k = len(CALL_ID)
                    while k < len(b) and (b[k].isalnum() or b[k] in _NAME_CHARS):
                        k += 1
                    if k == len(b):
                        return  # the id may go on
                    self.call_id = b[len(CALL_ID):k] or None  # the model's own: kept
                    self._eat(k)
                self._start(self._name_seen)
                self._st = _ARGS_TAG
            elif st == _ARGS_TAG:
                if not self._expect(ARGS):
                    return
                self._st = _ARGS
            elif st == _ARGS:
                if not self._args(eof):
                    return
                self.done, self.end = True, self._pos
            elif st == _ELEM:
                if self._json is None:
                    if not self._ws():
                        return
                    self._json = hermes_json.CallParser(self.schemas, self.stream)
                    self._json_at = self._pos
                if not self._sub(eof):
                    return
                self._st = _AFTER_ELEM
            else:  # after a list element: `,` (another follows) or `]`, else the list ends
                if self._close_at < 0:
                    self._close_at = self._pos
                if not self._ws() and not eof:
                    return
                b = self._buf
                if b and b[0] in ",]":
                    self._more = b[0] == ","
                    self._eat(1)
                    self.done, self.end = True, self._pos
                else:
                    self.done, self.end = True, self._close_at
                return


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


def _write_call(call, index: int) -> str:
    return CALLS + call.name + ARGS + json.dumps(call.arguments, ensure_ascii=False)


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    return f"{w.seq(CALLS + fn['name'] + ARGS)} {w.args(i, fn)}"


_LETTERS = str.maketrans("0123456789", "ghijklmnop")


def _call_id(prefix: str, index: int) -> str:
    """9 alphanumeric characters, the only ids Mistral's templates accept back ("Tool call IDs
    should be alphanumeric strings with length 9!"): the reply's prefix as letters, then the
    index in digits (letters then digits, so two indices never give one id)."""
    digits = str(index)
    letters = "".join(c for c in prefix.lower().translate(_LETTERS) if "a" <= c <= "z") or "x"
    return (letters * 9)[: 9 - len(digits)] + digits


FAMILY = register(Family(
    name=NAME, models="Mistral Small 3.x, Magistral, Devstral", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=THINK, reasoning_close=THINK_END, calls_sep=""),
    detect=(CALLS, THINK), stops=("</s>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="mistral",
    grammar=CallGrammar(_grammar_call),
    call_id=_call_id,
))
