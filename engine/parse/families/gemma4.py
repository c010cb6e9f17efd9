"""Gemma 4: `<|channel>thought` reasoning and `<|tool_call>call:NAME{...}<tool_call|>` calls in
Gemma's own value syntax.

Owns the family's markers, the reader of one call and the reader of Gemma's values. Run by
whichever thread drives the parser.

    <|channel>thought
    The user wants the weather.<channel|>Let me check.
    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,units:[<|"|>C<|"|>]}<tool_call|>

Keys are bare words (or quoted); strings are wrapped in the `<|"|>` token (JSON strings are
read too); numbers, `true`, `false` and `null` are bare; objects and arrays nest. The arguments
are read whole when `<tool_call|>` arrives (or at the end of output, when they form a complete
object), then streamed as one `json.dumps` fragment: a `<|"|>` string may hold any character, so
nothing before the closer can be streamed as final.

Thought blocks come empty or doubled too (google-gemma-4-31B-it*.jinja's generation prompt
writes an empty `<|channel>thought\n<channel|>` when thinking is off, and the model echoes it;
llama.cpp's tests/test-chat.cpp, Gemma 4 "Edge cases"): `<|channel>thought` is read by
`read_header` (`Markers.frame`) wherever it stands, repeated `<|channel>` tokens before
`thought` included, so an empty block anywhere is markup alone, a thought block in the answer is
reasoning again (the template strips every `<|channel>...<channel|>` from the answer it shows
back), and a second opener inside the thought is markup; a `<channel|>` with no block open is a
stray closer (dropped, counted).

Choices where the other servers differ: a value that is not Gemma syntax makes the call
malformed (text with `malformed_call`), where some parsers keep the bare text as a string.
"""

from __future__ import annotations

import json
import re

from engine.parse.events import REASONING
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal
from engine.parse.families.framed import FramedBody
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers

NAME = "gemma4"
CHANNEL = "<|channel>"
THOUGHT = "<|channel>thought"
THOUGHT_END = "<channel|>"
CALL = "<|tool_call>"
CALL_END = "<tool_call|>"
QUOTE = '<|"|>'
_CALL_WORD = "call:"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEY = re.compile(r"[A-Za-z0-9_.\-$]+")
_MAX_DEPTH = 64



def read_header(text: str, i: int, eof: bool) -> tuple[Match, int, str | None]:
    """A thought block's opener at text[i] (`Markers.frame`): one or more `<|channel>`, then
    `thought`. (FULL, its end, "reasoning"), PREFIX while the text ends inside one, or NONE."""
    j = i
    while text.startswith(CHANNEL, j):
        j += len(CHANNEL)
    if j == i:
        m = match_literal(text, i, CHANNEL)
        return (PREFIX if m == PREFIX and not eof else NONE), 0, None
    m = match_literal(text, j, THOUGHT[len(CHANNEL):])
    if m == FULL:
        return FULL, j + len(THOUGHT) - len(CHANNEL), REASONING
    if not eof and PREFIX in (m, match_literal(text, j, CHANNEL)):
        return PREFIX, 0, None
    return NONE, 0, None


MARKERS = Markers(THOUGHT, THOUGHT_END, (CALL,), frame=read_header)
PRESERVED_TOKENS = (CHANNEL, THOUGHT_END, CALL, CALL_END, QUOTE)

_WORD, _NAME, _BODY = range(3)


def match_opener(text: str, i: int) -> Match:
    return match_literal(text, i, _CALL_WORD)


class GemmaSyntaxError(ValueError):
    pass


def read_value(s: str, i: int = 0, depth: int = 0):
    """One Gemma value at s[i] (after whitespace): (value, index after it)."""
    n = len(s)
    while i < n and s[i] in " \t\r\n":
        i += 1
    if i >= n:
        raise GemmaSyntaxError("value expected")
    if s.startswith(QUOTE, i):
        j = s.find(QUOTE, i + len(QUOTE))
        if j < 0:
            raise GemmaSyntaxError("unclosed string")
        return s[i + len(QUOTE) : j], j + len(QUOTE)
    c = s[i]
    if c == '"':
        try:
            return json.JSONDecoder().raw_decode(s, i)
        except ValueError as e:
            raise GemmaSyntaxError(str(e)) from None
    if c in "{[":
        if depth >= _MAX_DEPTH:
            raise GemmaSyntaxError("too deep")
        return _container(s, i, depth + 1)
    for word, val in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return val, i + len(word)
    m = _NUMBER.match(s, i)
    if m:
        text = m.group()
        return (float(text) if any(ch in text for ch in ".eE") else int(text)), m.end()
    raise GemmaSyntaxError(f"unexpected {c!r}")


def _container(s: str, i: int, depth: int):
    obj = s[i] == "{"
    close = "}" if obj else "]"
    out: dict | list = {} if obj else []
    i += 1
    first = True
    while True:
        while i < len(s) and s[i] in " \t\r\n":
            i += 1
        if i < len(s) and s[i] == close:
            return out, i + 1
        if not first:
            if i >= len(s) or s[i] != ",":
                raise GemmaSyntaxError(f"expected , or {close}")
            i += 1
        first = False
        if obj:
            while i < len(s) and s[i] in " \t\r\n":
                i += 1
            if s.startswith(QUOTE, i) or s.startswith('"', i):
                key, i = read_value(s, i, depth)
            else:
                m = _KEY.match(s, i)
                if not m:
                    raise GemmaSyntaxError("key expected")
                key, i = m.group(), m.end()
            while i < len(s) and s[i] in " \t\r\n":
                i += 1
            if i >= len(s) or s[i] != ":":
                raise GemmaSyntaxError("expected :")
            value, i = read_value(s, i + 1, depth)
            if key not in out:
                out[key] = value
        else:
            value, i = read_value(s, i, depth)
            out.append(value)


def read_arguments(raw: str) -> dict:
    """The whole arguments text (`{...}`, whitespace around it allowed) as a dict."""
    value, end = read_value(raw)
    if not isinstance(value, dict):
        raise GemmaSyntaxError("arguments are not an object")
    if raw[end:].strip():
        raise GemmaSyntaxError("text after the arguments")
    return value


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _WORD
        self._parts: list[str] = []  # the arguments' text read so far (no closer in it)
        self._body_at = 0  # body offset where the arguments begin

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _WORD:
                if not self._expect(_CALL_WORD):
                    return
                self._st = _NAME
            elif st == _NAME:
                word = self._word("-.")
                if not word:
                    return
                self._start(word)
                self._st = _BODY
                self._body_at = self._pos
            else:
                raw = self._upto(CALL_END, self._parts)
                if raw is None:
                    if eof:
                        self._at_end()
                    return
                try:
                    args = read_arguments(raw)
                except GemmaSyntaxError as e:
                    self.error, self.resume = f"bad arguments: {e}", self._body_at
                    return
                self._done(args)
                return

    def _at_end(self) -> None:
        """End of output without the closer: a complete object is the call."""
        raw = "".join(self._parts) + self._buf
        stripped = raw.rstrip(" \t\r\n")
        try:
            args = read_arguments(stripped)
        except GemmaSyntaxError:
            return  # finish() calls it unfinished
        self._eat(len(self._buf))
        self._pos = self._body_at + len(stripped)
        self._done(args)

    def _done(self, args: dict) -> None:
        self.arguments = args
        if self.stream:
            self.out.append(("args", json.dumps(args), self._pos))
        self.done, self.end = True, self._pos


__all__ = ["MARKERS", "NAME", "PREFIX", "PRESERVED_TOKENS", "CallParser", "match_opener",
           "read_header"]


def _write_value(v) -> str:
    """A value in Gemma's own syntax: strings in `<|"|>`, bare keys, numbers and words."""
    if isinstance(v, str):
        return QUOTE + v + QUOTE
    if isinstance(v, dict):
        return "{" + ",".join(f"{k if _KEY.fullmatch(k) else json.dumps(k)}:{_write_value(x)}"
                              for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_write_value(x) for x in v) + "]"
    return json.dumps(v)


def _write_call(call, index: int) -> str:
    return f"{CALL}{_CALL_WORD}{call.name}{_write_value(call.arguments)}{CALL_END}"


def _gemma_any(w) -> str:
    """A grammar rule for any Gemma value (a property without a usable schema)."""
    p = w.prefix
    name = f"{p}-gv"
    if name not in w.rules:
        q = w.seq(QUOTE)
        w.rules[name] = (f'{q} {w.until(QUOTE)} {q} | {p}-gnum | "true" | "false"'
                         f' | "null" | "{{" ({p}-gkv ("," {p}-gkv)*)? "}}"'
                         f' | "[" ({name} ("," {name})*)? "]"')
        w.rules[f"{p}-gkv"] = f'[A-Za-z0-9_]+ ":" {name}'
        w.rules[f"{p}-gnum"] = '"-"? [0-9]{1,15} ("." [0-9]{1,15})?'
    return name


def _comma_list(items: list[tuple[str, bool]]) -> str:
    """Comma-separated `items` (expression, required) in order, the optional ones omissible."""
    alts = []
    for k, (first, _) in enumerate(items):
        rest = " ".join(f'("," {e})' + ("" if req else "?") for e, req in items[k + 1:])
        alts.append(f"{first} {rest}".strip())
        if items[k][1]:  # a required item cannot be skipped: no later item may come first
            break
    else:
        alts.append('""')
    return "(" + " | ".join(alts) + ")"


def _gemma_value(w, schema: dict, depth: int = 0) -> str:
    enum = schema.get("enum")
    q = w.seq(QUOTE)
    if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return "(" + " | ".join(f"{q} {w.lit(e)} {q}" for e in enum) + ")"
    if isinstance(enum, list) and enum and all(
            isinstance(e, (int, float, bool)) or e is None for e in enum):
        # Numbers, booleans and null are written bare in Gemma's values, as in JSON.
        return "(" + " | ".join(w.lit(json.dumps(e)) for e in enum) + ")"
    kind = schema.get("type")
    if kind == "string":
        return f"{q} {w.until(QUOTE)} {q}"
    if kind == "integer":
        return '("-"? [0-9]{1,15})'
    if kind == "number":
        _gemma_any(w)
        return f"{w.prefix}-gnum"
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "null":
        return '"null"'
    if depth < 8 and kind == "array" and isinstance(schema.get("items"), dict):
        item = _gemma_value(w, schema["items"], depth + 1)
        return f'"[" ({item} ("," {item})*)? "]"'
    if depth < 8 and kind == "object" and isinstance(schema.get("properties"), dict):
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        items = []
        for k, sub in schema["properties"].items():
            key = k if _KEY.fullmatch(k) else json.dumps(k)
            value = _gemma_value(w, sub if isinstance(sub, dict) else {}, depth + 1)
            items.append((f"{w.lit(key + ':')} {value}", k in required))
        return f'"{{" {_comma_list(items)} "}}"'
    return _gemma_any(w)


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF in Gemma's own values (`w`: engine/grammar/writer.py's Writer)."""
    params = w.params(fn)
    args = (_gemma_value(w, params) if isinstance(params.get("properties"), dict)
            else f'"{{" ({w.prefix}-gkv ("," {w.prefix}-gkv)*)? "}}"')
    _gemma_any(w)
    return f"{w.seq(CALL + _CALL_WORD + fn['name'])} {args} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="Gemma 4", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=THOUGHT + "\n", reasoning_close=THOUGHT_END,
                  calls_sep=""),
    detect=(CALL, "<|channel>", "<|turn>"), stops=("<turn|>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="gemma4",
    grammar=CallGrammar(_grammar_call),
))
