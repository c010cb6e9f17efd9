"""DeepSeek R1, V3 and V3.1: `<think>` reasoning and calls framed by DeepSeek's own tokens.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>                      (R1, V3)

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
    <｜tool▁calls▁end｜>                                            (V3.1)

Several calls share one section; each `<｜tool▁call▁begin｜>` is read as its own call, and the
section's end is consumed by the call before it. The two layouts are told apart after the
separator: a `{` there is V3.1's arguments (its word before the separator is the name), anything
else is V3's name (the word before was the call type, `function`).

Choices where the other servers differ: V3's ```json fence around the arguments is optional
(llama.cpp requires it, vLLM's regex does too, models drop it); a `<｜tool▁call▁begin｜>` without
the section opener still starts a call when `NAME<｜tool▁sep｜>` follows (vLLM's V3.1 parser
requires the section); a call whose arguments are complete is accepted at the end of output.
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import FULL, NONE, PREFIX, Match
from engine.parse.families.framed import FramedBody, call_or_word
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "deepseek"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEP = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
_FENCE = "```"
_NAME_CHARS = "_-.:"
_FENCE_HEAD = re.compile(r"```[A-Za-z]*[ \t]*\r?\n?[ \t]*")
_MAX_FENCE = 16

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (CALLS_BEGIN, CALL_BEGIN))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END)

_BEGIN, _WORD, _SEP, _AFTER_SEP, _NAME, _FENCE_OPEN, _ARGS, _FENCE_CLOSE, _END, _SECTION = (
    range(10))


def match_opener(text: str, i: int) -> Match:
    """After the section opener: `<｜tool▁call▁begin｜>`; after a call opener: a word then the
    separator."""
    return call_or_word(text, i, CALL_BEGIN, _NAME_CHARS, (SEP,))


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._first = ""  # the word before the separator: V3's type or V3.1's name
        self._fenced = False

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                m = self._lit(CALL_BEGIN)
                if m == PREFIX:
                    return
                self._st = _WORD
            elif st == _WORD:
                word = self._word(_NAME_CHARS)
                if not word:
                    return
                self._first = word
                self._st = _SEP
            elif st == _SEP:
                if not self._expect(SEP):
                    return
                self._st = _AFTER_SEP
            elif st == _AFTER_SEP:
                if not self._ws():
                    return
                if self._buf[0] == "{":  # V3.1: the word was the name
                    self._start(self._first)
                    self._st = _ARGS
                else:
                    self._st = _NAME
            elif st == _NAME:
                word = self._word(_NAME_CHARS)
                if not word:
                    return
                self._start(word)
                self._st = _FENCE_OPEN
            elif st == _FENCE_OPEN:
                if not self._ws():
                    return
                b = self._buf
                if b[0] != "{":
                    # V3's fence: ```json, then the arguments on the next line.
                    k = b.find("{", 0, _MAX_FENCE + 1)
                    if k < 0:
                        if len(b) > _MAX_FENCE or not _FENCE.startswith(b[:3]):
                            self._fail("expected arguments")
                        return
                    if not _FENCE_HEAD.fullmatch(b[:k]):
                        self._fail("expected arguments")
                        return
                    self._eat(k)
                    self._fenced = True
                self._st = _ARGS
            elif st == _ARGS:
                if not self._args(eof):
                    return
                self._st = _FENCE_CLOSE if self._fenced else _END
            elif st == _FENCE_CLOSE:
                if not self._ws():
                    if eof:
                        self.done, self.end = True, self._pos
                    return
                m = self._lit(_FENCE)
                if m == PREFIX:
                    if eof:
                        self.done, self.end = True, self._pos
                    return
                if m == NONE:
                    self.done, self.end = True, self._pos
                    return
                self._st = _END
            elif st == _END:
                if self._close(CALL_END, eof) != FULL:
                    return  # undecided, or no call end: the call is whole, the rest is text
                self.done = False
                self._st = _SECTION
            else:
                self._close(CALLS_END, eof)
                return


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


def _write_call(call, index: int) -> str:
    return CALL_BEGIN + call.name + SEP + json.dumps(call.arguments, ensure_ascii=False) + CALL_END


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF, V3.1's layout (`w`: engine/grammar/writer.py's Writer)."""
    return f"{w.seq(CALL_BEGIN + fn['name'] + SEP)} {w.args(i, fn)} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="DeepSeek R1, V3, V3.1", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(_write_call, calls_open=CALLS_BEGIN, calls_sep="",
                  calls_close=CALLS_END),
    detect=(CALLS_BEGIN, "<｜Assistant｜>"), stops=("<｜end▁of▁sentence｜>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="deepseek",
    grammar=CallGrammar(_grammar_call, open=CALLS_BEGIN, close=CALLS_END),
))
