"""Kimi K2 and K2-Thinking: `<think>` reasoning and calls framed by Kimi's section tokens.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(without the line break). The call's id is `functions.NAME:INDEX`; the name is what lies
between the `functions.` prefix (optional) and the `:INDEX` suffix (optional). Several calls
share one section: each `<|tool_call_begin|>` is read as its own call, and the section's end is
consumed by the call before it.

K2-Thinking writes its calls right after its reasoning, on the same line: `<think>I need the
weather<|tool_calls_section_begin|>...` without `</think>` (Kimi-K2-Thinking.jinja renders a
turn as `<think>...</think>` then the section, no newline between). The section's tokens are
special tokens the model writes only to call, so they end the reasoning mid-line too
(`Markers.inline_calls`; vLLM's kimi_k2 reasoning parser ends it at the section token wherever
it stands, llama.cpp's tests/test-chat.cpp has a call "*inside thinking block*"), where other
families' openers count only at a line start. A fenced one stays reasoning.

Choices where the other servers differ: `<|tool_call_section_begin|>` (singular, which some K2
outputs write) opens a section too, as in vLLM; a `<|tool_call_begin|>` outside a section is a
call when an id and `<|tool_call_argument_begin|>` follow; the model's own id
(`functions.NAME:IDX`) is kept as the call's id.
"""

from __future__ import annotations

import json

from engine.parse.families.common import FULL, PREFIX, Match
from engine.parse.families.framed import FramedBody, call_or_word
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "kimi-k2"
SECTION = "<|tool_calls_section_begin|>"
SECTION_ALT = "<|tool_call_section_begin|>"
CALL = "<|tool_call_begin|>"
ARG = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
SECTION_END = "<|tool_calls_section_end|>"
SECTION_END_ALT = "<|tool_call_section_end|>"
_ID_CHARS = "_-.:"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION, SECTION_ALT, CALL),
                  inline_calls=(SECTION, SECTION_ALT, CALL))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_ALT, CALL, ARG, CALL_END,
                    SECTION_END, SECTION_END_ALT)

_BEGIN, _ID, _ARG, _ARGS, _END, _SECTION = range(6)


def match_opener(text: str, i: int) -> Match:
    """After the section: `<|tool_call_begin|>`; after a call's opener: an id, then
    (after whitespace) `<|tool_call_argument_begin|>`."""
    return call_or_word(text, i, CALL, _ID_CHARS, (ARG,), gap=True)


def name_of(call_id: str) -> str:
    """`functions.get_weather:0` -> `get_weather`."""
    name = call_id.removeprefix("functions.")
    head, sep, tail = name.rpartition(":")
    return head if sep and head and tail.isdigit() else name


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                if self._lit(CALL) == PREFIX:
                    return
                self._st = _ID
            elif st == _ID:
                word = self._word(_ID_CHARS)
                if not word:
                    return
                if name_of(word) != word:  # `functions.NAME:IDX`: the model's own id, kept
                    self.call_id = word
                self._start(name_of(word))
                self._st = _ARG
            elif st == _ARG:
                if not self._ws():
                    return
                if not self._expect(ARG):
                    return
                self._st = _ARGS
            elif st == _ARGS:
                if not self._args(eof):
                    return
                self._st = _END
            elif st == _END:
                if self._close(CALL_END, eof) != FULL:
                    return
                self.done = False
                self._st = _SECTION
            else:
                self._close((SECTION_END, SECTION_END_ALT), eof)
                return


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


def _write_call(call, index: int) -> str:
    args = json.dumps(call.arguments, ensure_ascii=False)
    # The model's own id when the call kept it, else the form Kimi's template writes.
    cid = call.id if name_of(call.id) == call.name != call.id else f"functions.{call.name}:{index}"
    return f"{CALL}{cid}{ARG}{args}{CALL_END}"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer). The index counts the
    calls of the conversation (Kimi's ids); the parser does not keep it."""
    head = w.seq(f"{CALL}functions.{fn['name']}:")
    return f"{head} [0-9] [0-9]? {w.seq(ARG)} {w.args(i, fn)} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="Kimi K2, K2-Thinking", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(_write_call, calls_open=SECTION, calls_sep="",
                  calls_close=SECTION_END),
    detect=(SECTION, "<|im_middle|>"), stops=("<|im_end|>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="kimi-k2",
    grammar=CallGrammar(_grammar_call, open=SECTION, close=SECTION_END),
))
