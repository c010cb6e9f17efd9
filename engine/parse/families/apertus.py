"""Apertus (Swiss AI Apertus 8B / 70B Instruct): `<|inner_prefix|>` reasoning, calls as one JSON
list of `{NAME: ARGS}` objects between `<|tools_prefix|>` and `<|tools_suffix|>`.

Owns the family's markers, its record (`FORMAT`, a json-list shape whose objects are `keyed`,
engine/parse/shapes/json_list.py: the writer, forced-call grammar and opener test come from it)
and the reader of one call. Run by whichever thread drives the parser.

    <|inner_prefix|>The user wants the weather.<|inner_suffix|>Checking.<|tools_prefix|>
    [{"get_weather": {"city": "Paris"}}, {"get_time": {"zone": "CET"}}]<|tools_suffix|>

(without the line break). Each element of the list is one call, its only key the tool's name
and its value the arguments object; the list is read element by element (`follow` hands the
next one to the parser) and the arguments stream as they are written. The prompt ends with
`<|assistant_start|>`; the model opens its reasoning itself when the developer turn says
`Deliberation: enabled` (`enable_thinking`), and ends its turn with `<|assistant_end|>`.
Answer text may follow the list (the tool outputs come back in the same assistant turn).

Choices where the other servers differ: an element whose arguments are `null` is a call with no
arguments (SGLang's reading), counted as a repaired call; an element that is not a one-key
object ends the list there, its text the answer's with `malformed_call` (SGLang skips it and
reads on); a complete list is a call at the end of output even without `<|tools_suffix|>`
(vLLM and SGLang need the suffix, llama.cpp treats a missing one as a partial call). The
template also writes calls inside the deliberation (its `tool_calls` blocks keep
`<|inner_prefix|>` open); as for every family, a call there ends the reasoning only when it
begins the reasoning or a line (llama.cpp's grammar trigger and parser, too, read calls only
after `<|inner_suffix|>`).
"""

from __future__ import annotations

from engine.parse.families.common import NONE, PREFIX
from engine.parse.families.framed import MAX_NAME, FramedBody
from engine.parse.families.registry import Family, register
from engine.parse.markers import Markers
from engine.parse.shapes.build import engine, grammar_of, writer_of
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "apertus"
INNER = "<|inner_prefix|>"
INNER_END = "<|inner_suffix|>"
TOOLS = "<|tools_prefix|>"
TOOLS_END = "<|tools_suffix|>"
TURN_END = "<|assistant_end|>"

# The calls' syntax as data: a json-list of `{NAME: ARGS}` objects (`keyed`) between the two
# tokens. Its writer, forced-call grammar and opener test are the json-list shape's; the reader
# is the family's own (it is stricter, and repairs `null` arguments).
FORMAT = CallFormat(JSON_LIST, section=TOOLS, section_end=TOOLS_END, sep=", ", keyed=True)
MARKERS = Markers(INNER, INNER_END, (TOOLS,))
PRESERVED_TOKENS = (INNER, INNER_END, TOOLS, TOOLS_END)

_LIST, _ELEM, _NAME, _NAME_TEXT, _COLON, _ARGS, _ELEM_END, _AFTER_ELEM, _SUFFIX = (
    range(9))
# The list's punctuation, each after optional whitespace: a state's text and the next state.
_PUNCT = {_LIST: ("[", _ELEM), _ELEM: ("{", _NAME), _NAME: ('"', _NAME_TEXT),
          _COLON: (":", _ARGS), _ELEM_END: ("}", _AFTER_ELEM)}


# After `<|tools_prefix|>`: `[`, then (after whitespace) `{`, then `"`.
match_opener = engine(FORMAT).match_opener


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _LIST
        self._more = False  # a `,` followed the element: the next call continues the list

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
            if st in _PUNCT:
                lit, nxt = _PUNCT[st]
                if not (self._ws() and self._expect(lit)):
                    return
                self._st = nxt
            elif st == _NAME_TEXT:
                name = self._until('"', MAX_NAME)
                if not name:
                    return  # None: the name may go on; "": not a name (error set)
                if name.strip() != name or "\\" in name:
                    self._fail("bad function name")
                    return
                self._start(name)
                self._st = _COLON
            elif st == _ARGS:
                if self._json is None:
                    if not self._ws():
                        return
                    if self._buf[0] == "n":  # `null`: no arguments
                        m = self._lit("null")
                        if m == PREFIX:
                            return
                        if m == NONE:
                            self._fail("expected arguments")
                            return
                        self.repaired("null arguments")
                        if self.stream:
                            self.out.append(("args", "{}", self._pos))
                        self._st = _ELEM_END
                        continue
                if not self._args(eof):
                    return
                self._st = _ELEM_END
            elif st == _AFTER_ELEM:  # `,` (another element follows) or `]`
                if not self._ws():
                    return
                b = self._buf[0]
                if b not in ",]":
                    self._fail("expected , or ]")
                    return
                self._eat(1)
                if b == ",":
                    self._more = True
                    self.done, self.end = True, self._pos
                    return
                self._st = _SUFFIX
            else:
                self._close(TOOLS_END, eof)
                return


__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


FAMILY = register(Family(
    name=NAME, models="Apertus 8B / 70B Instruct", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=writer_of(FORMAT, reasoning_open=INNER, reasoning_close=INNER_END, before_calls=""),
    detect=(TOOLS, INNER), stops=(TURN_END,), never_stops=(TOOLS_END, INNER_END),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME,
    grammar=grammar_of(FORMAT),
))
