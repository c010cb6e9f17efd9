"""Functionary v3.2 (MeetKai, on Llama 3): no reasoning; each message of a reply names its
recipient after `>>>`: `all` for the answer, a tool's name for a call with JSON arguments.

Owns the family's markers, the reader of one call and its writer. Run by whichever thread
drives the parser.

    all
    Let me check.>>>get_weather
    {"city": "Paris"}>>>get_weather
    {"city": "Lyon"}

What its template (meetkai-functionary-medium-v3.2.jinja) writes: Llama 3 turns
(`<|start_header_id|>ROLE<|end_header_id|>\n\n…<|eot_id|>`), the tools as a TypeScript
`namespace functions` in the system turn, an assistant turn as `>>>all\n` + its content, then
`>>>NAME\n` + the arguments per call, then `<|eot_id|>`. Its generation prompt ends with
`>>>`: the model starts with the recipient, so the output's very start is read as if it
followed `>>>` (`Markers.opened`): `all\n` there is the answer's header (markup), `NAME\n{`
a call. Later in the reply `>>>all\n` is markup (the answer goes on) and `>>>NAME\n{` a call;
whitespace after a call's arguments is the call's. The arguments are read by the Hermes JSON
scanner (`framed.JsonArgs`); `python\n` followed by anything but `{` is code to the end of the
output, the call `python` with `{"code": CODE}`.

Choices where the other servers differ: vLLM and SGLang have no Functionary parser. llama.cpp
(`common_chat_parse_functionary_v3_2`) finds `>>>NAME\n{` anywhere; here a `>>>` counts only
outside code fences and inline code, and a bare `NAME\n{` only at the output's start (where the
prompt's `>>>` left the model). Names are word characters and `_-.` (llama.cpp: `\\w+`). Raw
python code runs to the end of the output, as in llama.cpp (a `>>>` in it is code: Python's
own prompt). Text after a call without `>>>all\n` is still the answer's.

Detected by `>>>all` (as llama.cpp detects it), superseding llama3-json (its Llama 3 turns).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.parse.families.common import FULL, NONE, PREFIX, Match, skip_ws
from engine.parse.families.framed import name_at
from engine.parse.families.functionary_v3_1 import CodeBody
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers

NAME = "functionary-v3.2"
CALL = ">>>"
ANSWER = "all"  # the recipient of the answer
ANSWER_TAG = CALL + ANSWER + "\n"
PYTHON = "python"
_NAME_CHARS = "_-."

MARKERS = Markers(None, None, (CALL,), markup=(ANSWER_TAG,), opened=CALL)
# `>>>` and the recipients are plain text in Llama 3's vocabulary: no special token to keep.
PRESERVED_TOKENS: tuple[str, ...] = ()

_NAME, _NL, _BODY, _ARGS, _TRAIL, _CODE = range(6)


def match_opener(text: str, i: int) -> Match:
    """A recipient other than `all`, a newline, whitespace, then `{` (or, for `python`,
    anything: its code)."""
    m, j = name_at(text, i, _NAME_CHARS)
    if m != FULL:
        return m
    if text[j] != "\n" or text[i:j] == ANSWER:
        return NONE
    k = skip_ws(text, j + 1)
    if k < 0:
        return NONE
    if k == len(text):
        return PREFIX
    return FULL if text[k] == "{" or text[i:j] == PYTHON else NONE


class CallParser(CodeBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _NAME

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _NAME:
                word = self._word(_NAME_CHARS)
                if not word:
                    return
                self._start(word)
                self._st = _NL
            elif st == _NL:
                if not self._expect("\n"):
                    return
                self._st = _BODY
            elif st == _BODY:  # whitespace, then JSON arguments (or python's code)
                if not self._ws():
                    if eof:
                        self._fail("no arguments")
                    return
                if self._buf[0] == "{":
                    self._st = _ARGS
                elif self.name == PYTHON:
                    self._st = _CODE
                else:
                    self._fail("expected {")
            elif st == _ARGS:
                if not self._args(eof):
                    return
                self._st = _TRAIL
            elif st == _TRAIL:  # the whitespace after the arguments is the call's
                if not self._ws() and not eof:
                    return
                self.done, self.end = True, self._pos
            else:
                self._code(eof)
                return


__all__ = ["ANSWER_TAG", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


@dataclass(frozen=True, slots=True)
class _Writer(Writer):
    """Functionary v3.2's writer: its answer always opens with the `all` recipient (the prompt
    wrote the `>>>` before it)."""

    def write_answer(self, text: str, after_reasoning: bool = False) -> str:
        return self.answer_open + text


def _write_call(call, index: int) -> str:
    return f"{call.name}\n{json.dumps(call.arguments, ensure_ascii=False)}"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer); the prompt ends with
    `>>>`, so the first call starts with its name."""
    return f"{w.seq(fn['name'] + chr(10))} {w.args(i, fn)}"


FAMILY = register(Family(
    name=NAME, models="Functionary v3.2 (small, medium; Llama 3)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=_Writer(_write_call, answer_open=ANSWER + "\n", calls_sep=CALL, before_calls=CALL),
    detect=(">>>all",), supersedes=("llama3-json",), stops=("<|eot_id|>", "<|eom_id|>"),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME, repairs_history=False,
    grammar=CallGrammar(_grammar_call, sep=CALL), tag_forms=(">>>",),
))
