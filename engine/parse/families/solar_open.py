"""Solar Open (Upstage Solar Open 100B): messages framed by `<|begin|>`/`<|end|>`, reasoning in a
`<|think|>` message, calls in a `<|tool_calls|>` message.

Owns the family's markers, the reader of one call, its writer and its forced-call grammar. Run
by whichever thread drives the parser.

The prompt ends with `<|begin|>assistant`; the model writes its turn as messages, each opened by
its kind and closed by `<|end|>`, the next one opened by `<|begin|>assistant` again:

    <|think|>The user wants the weather.<|end|><|begin|>assistant<|content|>Checking.<|end|>
    <|begin|>assistant<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather
    <|tool_call:args|>{"city": "Seoul"}<|tool_call:end|><|calls|>

(without the line breaks). `<|flush|>` ends a turn that answers, `<|calls|>` one that calls
(both end-of-generation tokens, so the engine usually stops before them); `<|end|>` closes every
message, the reasoning too, so it is the reasoning closer here and never a stop string. The
template's `reasoning_effort` "low"/"minimal" closes an empty `<|think|><|end|>` in the prompt:
the reply then starts with `<|content|>` or `<|tool_calls|>`. Several calls share one
`<|tool_calls|>` message, each `<|tool_call:begin|>` read as its own call; `<|calls|>` is
consumed by the call before it. The id before `<|tool_call:name|>` is the model's own (the
template asks for 10 random lowercase letters and digits) and is kept as the call's id.

Choices where the other servers differ: in the answer `<|end|>` followed by `<|begin|>` (or
`<|flush|>`, or the end of output) ends a message and is markup; anywhere else it is a stray
closer, dropped and counted (vLLM and llama.cpp never see one: their grammars end each message
at it). A call's id may be empty or any `[A-Za-z0-9_-]` word (llama.cpp requires one such
character; vLLM replaces an id that is not 10 lowercase letters or digits, and de-duplicates
repeated ones, which Prism does not: the model's id is shown as written). Arguments written as
a Python literal (`{'city': 'Seoul'}`) are accepted, as vLLM does, and counted as a repaired
call; arguments that parse neither way leave the call as text (vLLM returns the raw string as
the arguments). A `<|tool_call:begin|>` without the `<|tool_calls|>` message opener is a call
when its id and `<|tool_call:name|>` follow (vLLM accepts it; llama.cpp's grammar does not). A
`<|think|>` after a message end re-enters the reasoning, and a frame tag (`<|begin|>assistant`,
`<|content|>`) in the reasoning opens the answer (a reasoning the model forgot to close); the
template renders the history's reasoning as a message of its own, so no call is ever moved
out of it when the turn is shown again.
"""

from __future__ import annotations

import ast
import json

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal
from engine.parse.families.framed import MAX_NAME, FramedBody
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers

NAME = "solar-open"
THINK = "<|think|>"
END = "<|end|>"
BEGIN = "<|begin|>"
ASSISTANT = BEGIN + "assistant"
CONTENT = "<|content|>"
FLUSH = "<|flush|>"
CALLS = "<|tool_calls|>"
CALL = "<|tool_call:begin|>"
CALL_NAME = "<|tool_call:name|>"
CALL_ARGS = "<|tool_call:args|>"
CALL_END = "<|tool_call:end|>"
CALLS_END = "<|calls|>"
_ID_CHARS = "_-"
_NAME_CHARS = "_-.:"

MARKERS = Markers(
    think_open=THINK,
    think_close=END,
    calls=(CALLS, CALL),
    markup=(ASSISTANT, CONTENT, END, FLUSH, CALLS_END),
    reopen=True,
    close_frames=(BEGIN, FLUSH),
)
PRESERVED_TOKENS = (THINK, END, BEGIN, CONTENT, FLUSH, CALLS, CALL, CALL_NAME, CALL_ARGS,
                    CALL_END, CALLS_END)

_BEGIN, _ID, _NAME, _ARGS_TAG, _ARGS, _LITERAL, _END, _SECTION = range(8)


def _id_end(text: str, i: int) -> int:
    """Where the id starting at text[i] ends (word characters and `_-`); -1 when too long."""
    n = len(text)
    j = i
    while j < n and (text[j].isalnum() or text[j] in _ID_CHARS):
        j += 1
        if j - i > MAX_NAME:
            return -1
    return j


def match_opener(text: str, i: int) -> Match:
    """After `<|tool_calls|>`: `<|tool_call:begin|>`; after that: an id (possibly empty) then
    `<|tool_call:name|>`."""
    m = match_literal(text, i, CALL)
    if m != NONE:
        return m
    j = _id_end(text, i)
    if j < 0:
        return NONE
    return PREFIX if j == len(text) else match_literal(text, j, CALL_NAME)


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._raw: list[str] = []  # the arguments' text fed so far (a Python literal's, too)
        self._sent: list[str] = []  # the argument fragments streamed so far
        self._bad: tuple[str, int] = ("", 0)  # why the arguments are not JSON, where it resumes
        self._parts: list[str] = []

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            return self._go(self._opened(CALL) is not None, _ID)
        elif st == _ID:
            k = _id_end(self._buf, 0)
            if k < 0:
                self._fail("bad call id")
                return False
            if k == len(self._buf):
                return False  # the id may go on
            if k:
                self.call_id = self._buf[:k]  # the model's own id: kept
                self._eat(k)
            if not self._expect(CALL_NAME):
                return False
            self._st = _NAME
        elif st == _NAME:
            word = self._word(_NAME_CHARS)
            if not word:
                return False
            self._start(word)
            self._st = _ARGS_TAG
        elif st == _ARGS_TAG:
            return self._go(self._expect_seq((CALL_ARGS,)), _ARGS)
        elif st == _ARGS:
            return self._go(self._json_args(eof), _END)
        elif st == _LITERAL:
            return self._go(self._literal_args(eof), _END)
        elif st == _END:
            if self._close(CALL_END, eof) != FULL:
                return False  # undecided, or no call end: the call is whole, the rest is text
            self.done = False
            self._st = _SECTION
        else:
            self._close(CALLS_END, eof)
            return False
        return True

    # -- the arguments: JSON as it streams, else a Python literal --------------------------------

    def _json_args(self, eof: bool) -> bool:
        """The JSON arguments, streamed as they come; on a JSON error the same text is read
        again, as a Python literal, up to the call's end."""
        self._raw.append(self._buf)  # all of it goes to the JSON reader
        mark = len(self.out)
        done = self._args(eof)
        self._sent.extend(t for k, t, _ in self.out[mark:] if k == "args")
        if done or not self.error:
            return done
        self._bad = (self.error, self.resume if self.resume is not None else self._pos)
        self.error = self.resume = None
        self._buf, self._pos = "".join(self._raw), self._json_at
        self._raw.clear()
        self._st = _LITERAL
        return False

    def _literal_args(self, eof: bool) -> bool:
        """The arguments as a Python literal (vLLM's fallback): an object, up to the call's
        end (or the end of output). Its fragments continue what the JSON reader streamed."""
        raw = self._upto(CALL_END, self._parts)
        if raw is None:
            if not eof:
                return False
            raw = "".join(self._parts) + self._buf
            self._parts.clear()
            self._eat(len(self._buf))
        else:  # `_upto` ate the call's end: give it back to the state that reads it
            self._buf = CALL_END + self._buf
            self._pos -= len(CALL_END)
        try:
            value = ast.literal_eval(raw.strip())
            full = json.dumps(value) if isinstance(value, dict) else ""
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            full = ""
        sent = "".join(self._sent)
        if not full or not full.startswith(sent):
            self.error, self.resume = self._bad
            return False
        self.arguments = value
        self.repaired("python literal arguments")
        if self.stream and len(full) > len(sent):
            self.out.append(("args", full[len(sent):], self._pos))
        return True


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


def _valid_id(call_id: str) -> bool:
    return bool(call_id) and _id_end(call_id, 0) == len(call_id)


def _write_call(call, index: int) -> str:
    args = json.dumps(call.arguments, ensure_ascii=False)
    cid = call.id if _valid_id(call.id) else _call_id("prism", index)
    return f"{CALL}{cid}{CALL_NAME}{call.name}{CALL_ARGS}{args}{CALL_END}"


_LETTERS = str.maketrans("0123456789", "ghijklmnop")


def _call_id(prefix: str, index: int) -> str:
    """10 lowercase letters and digits, the ids Solar's template asks for: the reply's prefix as
    letters, then the index in digits (letters then digits, so two indices never give one id)."""
    digits = str(index)
    letters = "".join(c for c in prefix.lower().translate(_LETTERS) if "a" <= c <= "z") or "x"
    return (letters * 10)[: max(10 - len(digits), 0)] + digits


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): a 10-character id as the
    template asks, the name, the JSON arguments by schema."""
    cid = " ".join(["[a-z0-9]"] * 10)
    name = w.seq(CALL_NAME + fn["name"] + CALL_ARGS)
    return f"{w.seq(CALL)} {cid} {name} {w.args(i, fn)} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="Solar Open 100B", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=THINK, reasoning_close=END + ASSISTANT,
                  answer_open=CONTENT, before_calls=END + ASSISTANT, calls_open=CALLS,
                  calls_sep=""),
    detect=(CALL, "<|tool_response:begin|>"),
    stops=(FLUSH, CALLS_END), never_stops=(END,), preserved_tokens=PRESERVED_TOKENS,
    thinking=True, pack=NAME, repairs_history=False,
    grammar=CallGrammar(_grammar_call, open=CALLS),
    call_id=_call_id,
))
