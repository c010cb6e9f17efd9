"""Harmony (gpt-oss, LLM-jp 4.1): channels instead of tags.

Owns the family's markers, its reader of message headers and the reader of one call. Run by
whichever thread drives the parser.

gpt-oss writes messages framed by special tokens: `<|channel|>analysis<|message|>` opens the
reasoning, `<|end|>` ends a message, `<|start|>assistant` begins the next one, the answer is in
`<|channel|>final<|message|>`, and a call is a commentary message addressed to a function:

    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>

The recipient may also come first, in the role header: `<|start|>assistant to=functions.NAME
<|channel|>commentary json<|message|>{...}` (what openai-gpt-oss-120b.jinja renders for a call).
The prompt ends with `<|start|>assistant`, so a reply whose first message is a call begins
` to=functions.NAME<|channel|>...`: `to=` at a line start is a call opener too, and the space
before it goes with the call (`Markers.lead_ws`). A commentary message without a recipient is a
preamble: answer text. `<|call|>` and `<|return|>` usually end the output as stop tokens; a call
whose arguments are complete is accepted without them.

Headers are read by `read_header` (`Markers.frame`), not as literal tags: a channel may carry a
content type (`final <|constrain|>json`, structured output), `to=assistant` (gpt-oss sometimes
writes `<|channel|>commentary to=assistant` before the real header: markup, nothing else), and
LLM-jp 4.1 (llm-jp-llm-jp-4.1-8b-thinking.jinja, detected as Harmony) writes a space after each
special token, `<|channel|> final<|message|> Hello`: in a header that opens so, the one space
after `<|message|>` is the header's (a second one is the text's).

Built-in tools (`to=python`, `to=container.exec`, `to=browser.search`: gpt-oss's own, the ones
its template describes under `builtin_tools`) are shown as what they are. A built-in recipient
the request declared as a tool (a function of that name: `python`, `browser.search`) is a call
of it: a JSON object message is its arguments, any other text the value of the tool's one
parameter. One the request did not declare stays answer text, verbatim, its header included so
the recipient shows, and is counted as `malformed_call` naming the undeclared built-in (vLLM
and llama.cpp drop such messages; Prism cannot run the tool, but does not hide that the model
called it).

Choices where the other servers differ: an analysis message may follow a preamble (`reopen`);
`<|end|>` in the answer ends a message, so it is markup, never a stray closer; a call in the
analysis channel (`<|channel|>analysis to=functions.NAME`) is a call like any other.
"""

from __future__ import annotations

import json
import re

from engine.parse.events import CONTENT, REASONING
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal
from engine.parse.families.framed import FramedBody, name_at
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.schema import tool_params

NAME = "harmony"
START = "<|start|>"
CHANNEL = "<|channel|>"
ANALYSIS = "<|channel|>analysis<|message|>"
END = "<|end|>"
CALL_END = "<|call|>"
RETURN = "<|return|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
TO = "to="
_RECIPIENT = "functions."
_MAX_HEADER = 128  # between the name and <|message|>: ` <|constrain|>json` and the like
_CHANNELS = ("analysis", "final", "commentary")
_NOT_CALLS = frozenset({"assistant", "user", "system", "developer", "all"})  # roles, not tools
_NAME_CHARS = "._-"
# What may stand between a channel's name and <|message|> (its <|constrain|> taken out): the
# stray recipient `to=assistant`, then a content type (`json`, `code`).
_HEADER_REST = re.compile(r"(?: ?to=assistant)?(?: *[\w.+-]+)? *")
_RAW_ENDS = (CALL_END, END, RETURN)  # what ends a built-in's raw text

PRESERVED_TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL_END, RETURN)


def read_header(text: str, i: int, eof: bool) -> tuple[Match, int, str | None]:
    """A message header at text[i] (`Markers.frame`): `<|start|>assistant`, or `<|channel|>`,
    a channel name, its content type and `<|message|>` (LLM-jp's spaces allowed). Returns
    (FULL, end, the channel it opens), (PREFIX, 0, None) while the text ends inside one, or
    (NONE, 0, None). A recipient other than `assistant` is a call's, never a header's."""
    n = len(text)
    m = match_literal(text, i, START)
    if m == FULL:
        j = i + len(START)
        j += text.startswith(" ", j)
        m = match_literal(text, j, "assistant")
        if m == FULL:
            return FULL, j + len("assistant"), CONTENT
        return (PREFIX if m == PREFIX and not eof else NONE), 0, None
    m2 = match_literal(text, i, CHANNEL)
    if m2 != FULL:
        return (PREFIX if PREFIX in (m, m2) and not eof else NONE), 0, None
    j = i + len(CHANNEL)
    if j == n:
        return (NONE if eof else PREFIX), 0, None
    spaced = text[j] == " "
    j += spaced
    k = j
    while k < n and text[k].isalpha():
        k += 1
    word = text[j:k]
    if k == n:
        maybe = not eof and any(c.startswith(word) for c in _CHANNELS)
        return (PREFIX if maybe else NONE), 0, None
    if word not in _CHANNELS:
        return NONE, 0, None
    chan = REASONING if word == "analysis" else CONTENT
    rest: list[str] = []
    p = k
    limit = min(n, k + _MAX_HEADER)
    while True:
        lt = text.find("<|", p, limit)
        if lt < 0:
            tail = text[p:limit]
            rest.append(tail)
            if limit < n or eof or "\n" in tail:
                return NONE, 0, None
            return PREFIX, 0, None  # bounded: at most _MAX_HEADER characters are held
        rest.append(text[p:lt])
        head = "".join(rest)
        for tok in (MESSAGE, CONSTRAIN, CHANNEL):
            mt = match_literal(text, lt, tok)
            if mt == PREFIX:
                return (NONE if eof else PREFIX), 0, None
            if mt == FULL:
                break
        else:
            return NONE, 0, None
        if "\n" in head or not _HEADER_REST.fullmatch(head):
            return NONE, 0, None
        if tok == CONSTRAIN:
            p = lt + len(CONSTRAIN)
            continue
        if tok == CHANNEL:  # `commentary to=assistant` before the real header: markup alone
            return (FULL, lt, CONTENT) if "to=assistant" in head else (NONE, 0, None)
        end = lt + len(MESSAGE)
        if spaced:  # LLM-jp: the space after <|message|> is the header's
            if end == n and not eof:
                return PREFIX, 0, None
            end += text.startswith(" ", end)
        return FULL, end, chan


# The answer's and the reasoning's headers as literal tags too: the scanner's fast paths know
# them; `read_header` reads every other form.
MARKERS = Markers(
    think_open=ANALYSIS,
    think_close=END,
    calls=("<|channel|>commentary to=", "<|start|>assistant to=", "<|channel|>analysis to=",
           "<|channel|> commentary to=", "<|start|> assistant to=", "<|channel|> analysis to=",
           TO),
    markup=(
        "<|start|>assistant",
        "<|channel|>final<|message|>",
        "<|channel|>commentary<|message|>",
        END,
        RETURN,
        CALL_END,
    ),
    reopen=True,
    line_calls=(TO,),
    lead_ws=True,
    frame=read_header,
)


def match_opener(text: str, i: int) -> Match:
    """After `to=`: a recipient that is a tool (`functions.NAME`, or a built-in whose header
    reaches `<|message|>`), not a role (`to=assistant`)."""
    m, j = name_at(text, i, _NAME_CHARS)
    if m != FULL:
        return m
    word = text[i:j]
    if word in _NOT_CALLS:
        return NONE
    if word.startswith(_RECIPIENT):
        return FULL if len(word) > len(_RECIPIENT) else NONE
    at = text.find(MESSAGE, j, j + _MAX_HEADER + len(MESSAGE))
    if at >= 0:
        return NONE if "\n" in text[j:at] else FULL
    tail = text[j : j + _MAX_HEADER + len(MESSAGE)]
    return PREFIX if len(tail) < _MAX_HEADER + len(MESSAGE) and "\n" not in tail else NONE


_RECIP, _HEADER, _BODY, _ARGS, _RAW, _AFTER = range(6)


class CallParser(FramedBody):
    """One call, read after `to=`: the recipient, the rest of the header, then a JSON object
    (a function's arguments) or, for a declared built-in, its text."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _RECIP
        self._builtin = ""  # the built-in recipient, once known ("" for a function)
        self._declared = True  # a function, or a built-in the request declared
        self._parts: list[str] = []  # a built-in's raw text read so far

    def _step(self, st: int, eof: bool) -> bool:
        if st == _RECIP:
            word = self._word(_NAME_CHARS)
            if not word:
                return False
            if word.startswith(_RECIPIENT) and len(word) > len(_RECIPIENT):
                self._start(word[len(_RECIPIENT):])
            elif word in _NOT_CALLS or word.startswith(_RECIPIENT):
                self._fail(f"{word} is not a tool")
                return False
            else:
                self._builtin = word
                self._declared = word in self.schemas
                if self._declared:
                    self._start(word)
            self._st = _HEADER
        elif st == _HEADER:
            head = self._until(MESSAGE, _MAX_HEADER)
            if not head:
                return False
            if not self._declared:
                # Shown as what it is: the header stays text, the message reads as text.
                self._fail(f"built-in tool {self._builtin} not declared")
                return False
            self._st = _BODY if self._builtin else _ARGS
        elif st == _BODY:  # a built-in's message: JSON arguments, or its text
            if not self._ws() and not eof:
                return False
            self._st = _ARGS if self._buf.startswith("{") else _RAW
        elif st == _ARGS:
            return self._go(self._args(eof), _AFTER)
        elif st == _RAW:
            if not self._raw(eof):
                return False
        else:
            self._close(CALL_END, eof)
            return False
        return True

    def _raw(self, eof: bool) -> bool:
        """A declared built-in's text up to `<|call|>` (consumed), `<|end|>`, `<|return|>` or
        the end of output, as the value of the tool's one parameter; True once read."""
        b = self._buf
        ends = [k for k in (b.find(e) for e in _RAW_ENDS) if k >= 0]
        if not ends and not eof:
            keep = max(map(len, _RAW_ENDS)) - 1
            if len(b) > keep:
                self._parts.append(b[: len(b) - keep])
                self._eat(len(b) - keep)
            return False
        k = min(ends) if ends else len(b)
        raw = "".join(self._parts) + b[:k]
        self._parts.clear()
        self._eat(k)
        params = _params_of(tool_params(self.schemas, self._builtin))
        if len(params) != 1:
            self._fail(f"text for {self._builtin}, which takes {len(params)} parameters")
            return False
        self.arguments = {params[0]: raw.rstrip("\n")}
        if self.stream:
            self.out.append(("args", json.dumps(self.arguments), self._pos))
        self._st = _AFTER
        return True


def _params_of(params: dict | None) -> list[str]:
    """The parameter names a tool's parameters schema declares, in order."""
    props = params.get("properties") if params is not None else None
    return list(props) if isinstance(props, dict) else []


__all__ = ["MARKERS", "NAME", "PREFIX", "PRESERVED_TOKENS", "CallParser", "match_opener",
           "read_header"]


_NEXT = END + "<|start|>assistant"  # a message ends, the next begins


def _write_call(call, index: int) -> str:
    args = json.dumps(call.arguments, ensure_ascii=False)
    head = f"<|channel|>commentary to={_RECIPIENT}{call.name} <|constrain|>json"
    return f"{head}{MESSAGE}{args}{CALL_END}"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    head = f"<|channel|>commentary to={_RECIPIENT}{fn['name']} <|constrain|>json{MESSAGE}"
    # `<|call|>` is optional: in gpt-oss's vocabulary it is an end-of-generation token, which
    # llama.cpp's grammar sampler allows only once the grammar is complete (sampling it while
    # the grammar still expects it aborts the process). Optional, the call is complete before
    # it, so the model ends the reply on it; where it is text (SmolLM2, replays) it may follow.
    return f"{w.seq(head)} {w.args(i, fn)} ({w.seq(CALL_END)})?"


FAMILY = register(Family(
    name=NAME, models="gpt-oss, LLM-jp 4.1", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=ANALYSIS, reasoning_close=_NEXT,
                  answer_open="<|channel|>final<|message|>", before_calls=_NEXT,
                  calls_sep="<|start|>assistant"),
    detect=("<|channel|>",), supersedes=("gemma4",),
    stops=(RETURN, CALL_END), never_stops=(END,), preserved_tokens=PRESERVED_TOKENS,
    thinking=True, pack="harmony", repairs_history=False,
    grammar=CallGrammar(_grammar_call, several=False),
))
