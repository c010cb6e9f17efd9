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

Choices where the other servers differ: a value that is not Gemma syntax makes the call
malformed (text with `malformed_call`), where some parsers keep the bare text as a string.
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import PREFIX, Match, match_literal
from engine.parse.families.framed import FramedBody
from engine.parse.families.registry import Family, Writer, register
from engine.parse.markers import Markers

NAME = "gemma4"
THOUGHT = "<|channel>thought"
THOUGHT_END = "<channel|>"
CALL = "<|tool_call>"
CALL_END = "<tool_call|>"
QUOTE = '<|"|>'
_CALL_WORD = "call:"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEY = re.compile(r"[A-Za-z0-9_.\-$]+")
_MAX_DEPTH = 64

MARKERS = Markers(THOUGHT, THOUGHT_END, (CALL,))
PRESERVED_TOKENS = ("<|channel>", THOUGHT_END, CALL, CALL_END, QUOTE)

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


__all__ = ["MARKERS", "NAME", "PREFIX", "PRESERVED_TOKENS", "CallParser", "match_opener"]


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


FAMILY = register(Family(
    name=NAME, models="Gemma 4", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=THOUGHT + "\n", reasoning_close=THOUGHT_END,
                  calls_sep=""),
    detect=(CALL, "<|channel>", "<|turn>"), stops=("<turn|>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="gemma4",
))
