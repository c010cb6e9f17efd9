"""Functionary v3.1 (MeetKai, on Llama 3.1): no reasoning; calls as `<function=NAME>{…}
</function>`, and Python code after `<|python_tag|>`.

Owns the family's record (a name-json `CallFormat`, engine/parse/shapes/name_json.py, whose
reader, writer and grammar its calls use) and what is its own: the python tag, and `CodeBody`
(a call whose arguments are raw code to the end of the output, which Functionary v3.2 shares).
Run by whichever thread drives the parser.

    Checking.<function=get_weather>{"city": "Paris"}</function>
    <|python_tag|>import math
    print(math.pi)

What its template (meetkai-functionary-medium-v3.1.jinja) writes: Llama 3.1 turns
(`<|start_header_id|>ROLE<|end_header_id|>\n\n…<|eot_id|>`, a tool result as an `ipython`
turn), the tools in the system turn with the instruction to reply
`<function=NAME>{JSON arguments}</function>` on one line; an assistant turn's content, then
each call as `<function=NAME>` + arguments|tojson + `</function>` (a call to `python` as
`<|python_tag|>` + arguments|tojson), then `<|eom_id|>` (a turn without calls ends with
`<|eot_id|>`). The generation prompt is the assistant header: no reasoning. The arguments are
read by the Hermes JSON scanner (engine/parse/families/hermes_json.py, `framed.JsonArgs`), so a
`</function>` inside a string never ends them. After `<|python_tag|>` (and whitespace) a `{`
begins JSON arguments of a `python` call (the template's own form); anything else is code to
the end of the output, the call `python` with `{"code": CODE}` (llama.cpp's reading).

Choices where the other servers differ: vLLM and SGLang have no Functionary parser. llama.cpp
(`common_chat_parse_functionary_v3_1_llama_3_1`) takes `<function=` anywhere; here it counts
only outside code fences and inline code, as every call opener does. llama.cpp reads
everything after `<|python_tag|>` as code; here a `{` right after it is read as the JSON
arguments the template writes there. A call whose arguments are complete is accepted without
`</function>` (at the end of output, or when other text follows: the text is the answer's),
as llama.cpp accepts a partial closer. Qwen XML's `<function=NAME>` then `<parameter=` is not
a call of this family (its arguments must be a JSON object); Qwen XML's own reader
(qwen_xml.py) is untouched.

Detected by its template's instruction (``start_tag => `<function` ``) or version comment
(`version=v3-llama3.1`): `<function=` alone is in Qwen3-Coder's templates too, and its Llama
turns would select llama3-json, which this family supersedes. `</function>` is plain text in
the vocabulary; it is listed with the preserved tokens so that the raw view draws it as a tag.
"""

from __future__ import annotations

import json

from engine.parse.families.common import FULL, PREFIX, WS, Match, escape_fragment
from engine.parse.families.framed import FramedBody
from engine.parse.families.registry import Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes.build import engine, grammar_of
from engine.parse.shapes.name_json import args_opener
from engine.parse.shapes.record import NAME_JSON, CallFormat

NAME = "functionary-v3.1"
OPENER = "<function="
CLOSER = "</function>"
PYTHON_TAG = "<|python_tag|>"
PYTHON = "python"  # the call a `<|python_tag|>` makes
_NAME_CHARS = "_-."

FORMAT = CallFormat(NAME_JSON, call=OPENER, name_end=">", call_end=CLOSER)
_ENGINE = engine(FORMAT)

# The python tag is the body's own first characters: the reader must know which form it reads.
MARKERS = Markers(None, None, (OPENER, PYTHON_TAG), body_openers=(PYTHON_TAG,))
PRESERVED_TOKENS = (PYTHON_TAG, CLOSER)

_PY, _PY_ARGS, _CODE = range(3)


def _after_python_tag(text: str, i: int) -> bool:
    """Does text[i] come right after `<|python_tag|>` and whitespace?"""
    k = i
    while k > 0 and text[k - 1] in WS:
        k -= 1
    return text.endswith(PYTHON_TAG, 0, k)


def match_opener(text: str, i: int) -> Match:
    """After `<function=`: a name, `>`, whitespace, `{`. After `<|python_tag|>` (looked for
    before i): anything, code or JSON."""
    if _after_python_tag(text, i):
        return FULL if i < len(text) else PREFIX
    return args_opener(text, i, _NAME_CHARS, ">")


class CodeBody(FramedBody):
    """A call reader that may end in raw code: `_code(eof)` takes all the rest of the output
    as `{"code": CODE}`, streaming the escaped code as it comes."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._code_parts: list[str] = []

    def _code(self, eof: bool) -> None:
        b = self._buf
        if b:
            head = "" if self._code_parts else '{"code": "'
            self._code_parts.append(b)
            self._eat(len(b))
            if self.stream:
                self.out.append(("args", head + escape_fragment(b), self._pos))
        if eof:
            self.arguments = {"code": "".join(self._code_parts)}
            if self.stream:
                self.out.append(("args", '"}' if self._code_parts else '{"code": ""}',
                                 self._pos))
            self.done, self.end = True, self._pos


class CallParser(_ENGINE.reader, CodeBody):
    """The record's reader, and what follows `<|python_tag|>` (kept in the body)."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._py: int | None = None  # None: not yet known; else the python tag's state

    def _run(self, eof: bool) -> None:
        if self._py is None:
            if not self._buf:
                return
            if self._buf[0] != "<":
                self._py = -1
            elif not self._expect(PYTHON_TAG):
                return
            else:
                self._py = _PY
        if self._py < 0:
            super()._run(eof)
            return
        while not (self.done or self.error):
            if self._py == _PY:  # after the tag: JSON arguments, or code
                if not self._ws():
                    if eof:
                        self._fail("no code")
                    return
                self._start(PYTHON)
                self._py = _PY_ARGS if self._buf[0] == "{" else _CODE
            elif self._py == _PY_ARGS:  # the template's own form: no closer after it
                if not self._args(eof):
                    return
                self.done, self.end = True, self._pos
            else:
                self._code(eof)
                return


__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "CodeBody",
           "match_opener"]


_write_record = _ENGINE.write_call


def _write_call(call, index: int) -> str:
    if call.name == PYTHON:  # as the template writes a python call
        return PYTHON_TAG + json.dumps(call.arguments, ensure_ascii=False)
    return _write_record(call, index)


FAMILY = register(Family(
    name=NAME, models="Functionary v3.1 (small, medium; Llama 3.1)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=Writer(_write_call, calls_sep="", before_calls=""),
    detect=("start_tag => `<function`", "version=v3-llama3.1"), supersedes=("llama3-json",),
    stops=("<|eot_id|>", "<|eom_id|>"), preserved_tokens=PRESERVED_TOKENS, thinking=False,
    pack=NAME, repairs_history=False, grammar=grammar_of(FORMAT, _ENGINE), format=FORMAT,
))
