"""Functionary v3.2 (MeetKai, on Llama 3): no reasoning; each message of a reply names its
recipient after `>>>`: `all` for the answer, a tool's name for a call with JSON arguments.

Owns the family's markers, the reader of one call, its answer's writer and its record
(`FORMAT`, a name-json shape, engine/parse/shapes/name_json.py, whose writer and forced-call
grammar its calls use). Run by whichever thread drives the parser.

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

from dataclasses import dataclass

from engine.parse.families.common import Match
from engine.parse.families.functionary_v3_1 import CodeBody
from engine.parse.families.registry import Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes.build import engine, grammar_of
from engine.parse.shapes.name_json import args_opener
from engine.parse.shapes.record import NAME_JSON, CallFormat

NAME = "functionary-v3.2"
CALL = ">>>"
ANSWER = "all"  # the recipient of the answer
ANSWER_TAG = CALL + ANSWER + "\n"
PYTHON = "python"
_NAME_CHARS = "_-."

# The calls' syntax as data, for the writer and the forced-call grammar: `NAME\n{ARGS}`, joined
# by `>>>` (the prompt ends with the first one, so a reply's first call starts with its name).
FORMAT = CallFormat(NAME_JSON, name_end="\n", sep=CALL)
MARKERS = Markers(None, None, (CALL,), markup=(ANSWER_TAG,), opened=CALL)
# `>>>` and the recipients are plain text in Llama 3's vocabulary: no special token to keep.
PRESERVED_TOKENS: tuple[str, ...] = ()

_NAME, _NL, _BODY, _ARGS, _TRAIL, _CODE = range(6)


def match_opener(text: str, i: int) -> Match:
    """A recipient other than `all`, a newline, whitespace, then `{` (or, for `python`,
    anything: its code)."""
    return args_opener(text, i, _NAME_CHARS, "\n", answer=ANSWER, code=PYTHON)


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


FAMILY = register(Family(
    name=NAME, models="Functionary v3.2 (small, medium; Llama 3)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=_Writer(engine(FORMAT).write_call, answer_open=ANSWER + "\n", calls_sep=CALL,
                   before_calls=CALL),
    detect=(">>>all",), supersedes=("llama3-json",), stops=("<|eot_id|>", "<|eom_id|>"),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME, repairs_history=False,
    grammar=grammar_of(FORMAT), tag_forms=(">>>",),
))
