"""Harmony (gpt-oss): channels instead of tags.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

gpt-oss writes messages framed by special tokens: `<|channel|>analysis<|message|>` opens the
reasoning, `<|end|>` ends a message, `<|start|>assistant` begins the next one, the answer is in
`<|channel|>final<|message|>`, and a call is a commentary message addressed to a function:

    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>

(the recipient may also come first: `<|start|>assistant to=functions.NAME<|channel|>commentary
json<|message|>`). A commentary message without a recipient is a preamble: answer text.
`<|call|>` and `<|return|>` usually end the output as stop tokens; a call whose arguments are
complete is accepted without them.

Choices where the other servers differ: only `functions.*` recipients are calls (vLLM also
routes the built-in `browser.*` / `python` tools; here they stay text, which Prism cannot run);
an analysis message may follow a preamble (`reopen`); `<|end|>` in the answer ends a message,
so it is markup, never a stray closer; a call in the analysis channel (`<|channel|>analysis
to=functions.NAME`) is a call like any other.
"""

from __future__ import annotations

import json

from engine.parse.families.common import PREFIX, Match, match_literal
from engine.parse.families.framed import FramedBody
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers

NAME = "harmony"
ANALYSIS = "<|channel|>analysis<|message|>"
END = "<|end|>"
CALL_END = "<|call|>"
MESSAGE = "<|message|>"
_RECIPIENT = "functions."
_MAX_HEADER = 128  # between the name and <|message|>: ` <|constrain|>json` and the like

MARKERS = Markers(
    think_open=ANALYSIS,
    think_close=END,
    calls=("<|channel|>commentary to=", "<|start|>assistant to=", "<|channel|>analysis to="),
    markup=(
        "<|start|>assistant",
        "<|channel|>final<|message|>",
        "<|channel|>commentary<|message|>",
        END,
        "<|return|>",
        CALL_END,
    ),
    reopen=True,
)
PRESERVED_TOKENS = (
    "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>",
    "<|return|>",
)

_PRE, _NAME, _HEADER, _ARGS, _AFTER = range(5)


def match_opener(text: str, i: int) -> Match:
    """After `to=`: a function recipient."""
    return match_literal(text, i, _RECIPIENT)


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _PRE

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _PRE:
                if not self._expect(_RECIPIENT):
                    return
                self._st = _NAME
            elif st == _NAME:
                word = self._word(".-")
                if not word:
                    return
                self._start(word)
                self._st = _HEADER
            elif st == _HEADER:
                head = self._until(MESSAGE, _MAX_HEADER)
                if not head:
                    return
                self._st = _ARGS
            elif st == _ARGS:
                if not self._args(eof):
                    return
                self._st = _AFTER
            else:
                self._close(CALL_END, eof)
                return


__all__ = ["MARKERS", "NAME", "PREFIX", "PRESERVED_TOKENS", "CallParser", "match_opener"]


_NEXT = END + "<|start|>assistant"  # a message ends, the next begins


def _write_call(call, index: int) -> str:
    args = json.dumps(call.arguments, ensure_ascii=False)
    head = f"<|channel|>commentary to={_RECIPIENT}{call.name} <|constrain|>json"
    return f"{head}{MESSAGE}{args}{CALL_END}"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    head = f"<|channel|>commentary to={_RECIPIENT}{fn['name']} <|constrain|>json{MESSAGE}"
    return f"{w.seq(head)} {w.args(i, fn)} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="gpt-oss", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=ANALYSIS, reasoning_close=_NEXT,
                  answer_open="<|channel|>final<|message|>", before_calls=_NEXT,
                  calls_sep="<|start|>assistant"),
    detect=("<|channel|>",), supersedes=("gemma4",),
    stops=("<|return|>", "<|call|>"), never_stops=(END,), preserved_tokens=PRESERVED_TOKENS,
    thinking=True, pack="harmony", repairs_history=False,
    grammar=CallGrammar(_grammar_call, several=False),
))
