"""Granite 3.3 (IBM Granite 3.x Instruct): `<think>` reasoning and `<|tool_call|>` followed by a
JSON list of calls.

Owns the family's markers, the reader of one element of a JSON list of calls (`ListCall`, also
what engine/parse/families/nemotron_v2.py reads its `<TOOLCALL>` lists with) and the family's
record. Run by whichever thread drives the parser.

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}},
                  {"name": "get_time", "arguments": {"zone": "CET"}}]

(one line, as the model writes it). Each element of the list is its own call: `follow` hands
the next one to the parser, so the calls stream one by one. Each element is read by the Hermes
JSON scanner (engine/parse/families/hermes_json.py), so `parameters` works as well as
`arguments`, an `arguments` string holding JSON is decoded, and a `]` inside a string never ends
the list. The template asks for reasoning, when thinking, as `<think>…</think>` and for the answer
as `<response>…</response>`: the response tags are markup, not part of the answer.

Granite 4.0 and 4.1 write Hermes calls (`<tool_call>{…}</tool_call>`, their templates carry no
`<|tool_call|>`): they stay detected as hermes-json.

Choices where the other servers differ: an element may name its arguments before its name (as
vLLM's tests have Granite write it); a list may follow text and text may follow it (vLLM's
granite parser reads a list only at the very start of the output and drops the answer then; a
JSON example quoted in backticks or a fence stays text); a bare object after `<|tool_call|>` is
one call (llama.cpp accepts any JSON there, vLLM only a list); a list left without its `]` is
accepted at the end of output, and elsewhere repaired (`repaired_call`, "no ]"); `<response>`
and `</response>` are markup wherever they stand unquoted in the answer (llama.cpp strips them
only around the answer), text in the reasoning, and the writer does not write them; Granite
3.1's `<tool_call> [` string form (which vLLM's granite parser also takes) is not read: no
template here writes it.
"""

from __future__ import annotations

import json

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "granite"
TOOL_CALL = "<|tool_call|>"
RESPONSE = "<response>"
RESPONSE_END = "</response>"
NO_CLOSE = "no ]"  # the repair of a list whose `]` never came (repaired_call's text)

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (TOOL_CALL,), markup=(RESPONSE, RESPONSE_END))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, RESPONSE, RESPONSE_END, TOOL_CALL)

_BEGIN, _ELEM, _AFTER, _END = range(4)


def object_opener(text: str, i: int) -> Match:
    """`{`, optional whitespace, then `"name"` or `"arguments"` (Granite may write the
    arguments first)."""
    n = len(text)
    if i >= n:
        return PREFIX
    if text[i] != "{":
        return NONE
    j = skip_ws(text, i + 1)
    if j < 0:
        return NONE
    return max(match_literal(text, j, '"name"'), match_literal(text, j, '"arguments"'))


def list_opener(text: str, i: int) -> Match:
    """`[` then (after whitespace) a call object (`object_opener`), or that object alone."""
    n = len(text)
    if i >= n:
        return PREFIX
    if text[i] == "[":
        j = skip_ws(text, i + 1)
        if j < 0:
            return NONE
        return PREFIX if j == n else object_opener(text, j)
    return object_opener(text, i)


match_opener = list_opener


class JsonElement(hermes_json.CallParser):
    """One `{"name": …, "arguments": …}` object of a list, done right after its closing brace
    (the list's reader reads what follows: a `,`, the `]`, whitespace)."""

    def _finish_object(self) -> None:
        super()._finish_object()
        if not self.error:
            self.done, self.end = True, self._pos


class ListCall(FramedBody):
    """One element of a JSON list of calls; `CLOSE` is what ends the list after its `]` (""
    when nothing does: Granite's)."""

    CLOSE = ""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._list = False  # the calls are a list (a `[` opened them), not one bare object
        self._more = False  # a `,` followed: the next element continues the list

    def follow(self) -> ListCall | None:
        """The reader of the list's next element, when one follows this call."""
        if not self._more:
            return None
        nxt = type(self)(self.schemas, self.stream)
        nxt._st, nxt._list = _ELEM, True
        return nxt

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                if self._buf[0] == "[":
                    self._eat(1)
                    self._list = True
                self._st = _ELEM
            elif st == _ELEM:
                if self._json is None:
                    if not self._ws():
                        return
                    self._json = JsonElement(self.schemas, self.stream)
                    self._json_at = self._pos
                if not self._sub(eof):
                    return
                self._st = _AFTER if self._list else _END
            elif st == _AFTER:  # `,` (another element follows), `]`, or the list ends here
                if self._close_at < 0:
                    self._close_at = self._pos
                if not self._ws():
                    if eof:  # the output ended inside the list: the calls are whole
                        self.done, self.end = True, self._close_at
                    return
                c = self._buf[0]
                if c in ",]":
                    self._eat(1)
                    self._close_at = -1
                    if c == "]":
                        self._st = _END
                        continue
                    self._more = True
                    self.done, self.end = True, self._pos
                    return
                m = match_literal(self._buf, 0, self.CLOSE) if self.CLOSE else NONE
                if m == PREFIX and not eof:
                    return
                self.repaired(NO_CLOSE)
                if m == FULL:  # the list's closer without its `]`
                    self._eat(len(self.CLOSE))
                    self.done, self.end = True, self._pos
                else:  # text after the last element: the call ends before the whitespace
                    self.done, self.end = True, self._close_at
                self._close_at = -1
                return
            else:  # after the list
                if not self.CLOSE:
                    self.done, self.end = True, self._pos
                    return
                self._close(self.CLOSE, eof)
                return


class CallParser(ListCall):
    pass


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "JsonElement", "ListCall",
           "list_opener", "match_opener", "object_opener"]


def write_json_call(call, index: int) -> str:
    """One element of a JSON list of calls, as the list families' models write it."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def grammar_json_call(w, i: int, fn: dict) -> str:
    """A forced call as one element of a JSON list (`w`: engine/grammar/writer.py's Writer)."""
    head = '{"name": ' + json.dumps(fn["name"]) + ', "arguments": '
    return f"{w.seq(head)} {w.args(i, fn)} {w.seq('}')}"


FAMILY = register(Family(
    name=NAME, models="Granite 3.x Instruct (3.3)", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(write_json_call, calls_open=TOOL_CALL + "[", calls_sep=", ",
                        calls_close="]", before_calls=""),
    detect=(TOOL_CALL,), stops=("<|end_of_text|>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="granite",
    grammar=CallGrammar(grammar_json_call, open=TOOL_CALL + "[", sep=", ", close="]"),
))
