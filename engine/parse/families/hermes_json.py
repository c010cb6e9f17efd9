"""Hermes JSON tool-call bodies: `{"name": NAME, "arguments": {...}}` then `</tool_call>`.

Owns the incremental reader of one call body (the text after `<tool_call>`). Run by whichever
thread drives the parser.

The body is read by a small character-level JSON scanner that knows the structure (so a
`</tool_call>` inside a string never ends the call) and, when `stream` is on and the name came
before the arguments object, re-emits the arguments as canonical `json.dumps` text while they
are written: strings as they arrive, numbers and literals when complete. The final object is
always `json.loads` of the raw body, so the scanner only decides *where* things end; the
fragments join to `json.dumps(arguments)` because both sides use json's own escaping.

`arguments` may also be a string holding a JSON object (some models double-encode); it is then
emitted whole when complete. A body that does not parse, or whose arguments are not an object,
is an error (the parser returns the text with a `malformed_call` anomaly).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.parse.families.common import (
    FULL,
    NONE,
    PREFIX,
    WS,
    CallBody,
    Match,
    match_literal,
    skip_ws,
)
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import CALL_CLOSE, CALL_OPEN, THINK_MARKERS
from engine.parse.shapes import json_object
from engine.parse.shapes.record import JSON_OBJECT, CallFormat

NAME = "hermes-json"
_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_MAX_DEPTH = 64
_STRING_STOP = re.compile(r'["\\]')  # what ends a run of plain characters inside a string


@dataclass(slots=True)
class _Frame:
    """One open object or array of the scanned JSON (mutable: the scanner's own stack)."""

    kind: str  # "{" or "["
    expect: str  # what may come next: "key", "colon", "value" or "comma"
    count: int = 0  # values read so far
    key: str | None = None  # the object's latest key


def match_opener(text: str, i: int) -> Match:
    """`{`, optional whitespace, then `"name"`."""
    n = len(text)
    if i >= n:
        return PREFIX
    if text[i] != "{":
        return NONE
    j = skip_ws(text, i + 1)
    return NONE if j < 0 else match_literal(text, j, '"name"')


class CallParser(CallBody):
    CLOSE = CALL_CLOSE  # what ends the call after the object ("": the object ends it)
    _top_args = False  # the top-level object is the arguments (framed.JsonArgs), not a call

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._raw: list[str] = []  # the JSON object's raw text
        self._pos = 0  # relative offset of the next character to read
        self._phase = 0  # 0 before the object, 1 inside it, 2 after it
        self._tail = ""  # what follows the object after whitespace (the start of </tool_call>)
        self._obj_end = 0  # relative offset just past the object
        # scanner state
        self._stack: list[_Frame] = []
        self._in_str = False
        self._esc = ""  # pending escape: "" | "\\" | "\\uXXX..."
        self._str: list[str] = []
        self._lit: list[str] = []
        # emission state: depth of the arguments object while streaming it (0 = not emitting)
        self._emit_base = 0
        self._frag: list[str] = []
        self._frag_end = 0  # relative offset just past the character that wrote _frag's last piece
        self._args_streamed = False
        self._string_is_key = False
        self._started = False

    def feed(self, text: str) -> None:
        if self.done or self.error:
            return
        i, n = 0, len(text)
        while i < n:
            if self._in_str and not self._esc and n - i > 1:
                # A run of plain string characters at once (most of a body): nothing in it
                # can end the string or be an error, and escaping it whole equals escaping
                # it per character.
                m = _STRING_STOP.search(text, i)
                j = m.start() if m else n
                if j > i:
                    run = text[i:j]
                    self._pos += j - i
                    self._raw.append(run)
                    self._string_piece(run)
                    i = j
                    continue
            ch = text[i]
            i += 1
            self._pos += 1
            if self._phase == 1:
                mark, end = len(self._frag), self._frag_end
                self._scan(ch)
                if self.error:
                    # Keep what the characters before the bad one produced, so the events
                    # are the same however the text was chunked.
                    del self._frag[mark:]
                    self._frag_end = end
                    self._flush()
            elif self._phase == 0:
                if ch in WS:
                    continue
                if ch != "{":
                    self.error = "expected {"
                    self.resume = self._pos - 1
                    return
                self._phase = 1
                self._scan(ch)
            else:
                if self._after(ch):
                    return
            if self.error:
                if self.resume is None:
                    self.resume = self._pos - 1  # the offending character
                return
            if self.done:
                return
        self._flush()

    def finish(self) -> None:
        if self.done or self.error:
            return
        if self._phase == 2:  # whole object, end of output before </tool_call>: accept
            self.done, self.end = True, self._obj_end
            return
        self.error = "unfinished"

    # -- after the object: whitespace then </tool_call> -----------------------------------

    def _after(self, ch: str) -> bool:
        if not self._tail and ch in WS:
            return False  # whitespace is skipped, not kept: any amount costs linear time
        self._tail += ch
        m = match_literal(self._tail, 0, self.CLOSE) if self.CLOSE else NONE
        if m == FULL:
            self.done, self.end = True, self._pos
            return True
        if m == NONE:
            # Text after a complete object: the call is whole, the rest is the answer's.
            self.done, self.end = True, self._obj_end
            return True
        return False

    # -- the JSON scanner ------------------------------------------------------------------

    def _out(self, s: str) -> None:
        if self._emit_base:
            self._frag.append(s)
            self._frag_end = self._pos

    def _flush(self) -> None:
        # The fragment ends at the character that wrote it, not at the end of the feed: the
        # whitespace or `:` after it writes nothing, and must not move the span with the
        # chunking.
        if self._frag:
            self.out.append(("args", "".join(self._frag), self._frag_end))
            self._frag = []

    def _scan(self, ch: str) -> None:
        self._raw.append(ch)
        if self._in_str:
            self._string_char(ch)
            return
        if self._lit:
            if ch in ",}] \t\r\n":
                self._end_literal()
                if self.error:
                    return
            else:
                self._lit.append(ch)
                return
        if ch in WS:
            return
        top = self._stack[-1] if self._stack else None
        expect = top.expect if top else "value"
        if ch == '"':
            if expect not in ("value", "key"):
                self.error = "unexpected string"
                return
            self._in_str = True
            self._string_is_key = expect == "key"
            self._str = []
            if not self._string_is_key:
                self._begin_value(top)
                self._out('"')
            return
        if ch in "{[":
            if expect != "value" or len(self._stack) >= _MAX_DEPTH:
                self.error = "unexpected " + ch
                return
            self._begin_value(top)
            if self.stream and ch == "{" and (
                (top is None and self._top_args)
                or (len(self._stack) == 1 and top is not None and top.key == "arguments"
                    and self.name is not None)
            ):
                self._emit_base = len(self._stack) + 1  # the arguments object's depth
                self._args_streamed = True
            self._out(ch)
            self._stack.append(_Frame(ch, "key" if ch == "{" else "value"))
            return
        if ch in "}]":
            if top is None or top.kind != ("{" if ch == "}" else "["):
                self.error = "unbalanced " + ch
                return
            if top.expect != "comma" and not (top.count == 0 and top.expect in ("key", "value")):
                self.error = "unexpected " + ch
                return
            self._out(ch)
            if len(self._stack) == self._emit_base:
                self._emit_base = 0
                self._flush()
            self._stack.pop()
            self._end_value()
            return
        if ch == ":":
            if top is None or top.expect != "colon":
                self.error = "unexpected :"
                return
            top.expect = "value"
            return
        if ch == ",":
            if top is None or top.expect != "comma":
                self.error = "unexpected ,"
                return
            top.expect = "key" if top.kind == "{" else "value"
            self._out(", ")
            return
        if expect != "value" or ch not in "-0123456789tfn":
            self.error = "unexpected " + ch
            return
        self._begin_value(top)
        self._lit.append(ch)

    def _begin_value(self, top: _Frame | None) -> None:
        if top is not None:
            top.count += 1

    def _end_value(self) -> None:
        """A value just closed in the current top frame (or the whole object closed)."""
        if not self._stack:
            self._phase = 2
            self._obj_end = self._pos
            self._finish_object()
            return
        self._stack[-1].expect = "comma"

    def _end_literal(self) -> None:
        tok = "".join(self._lit)
        self._lit = []
        try:
            val = json.loads(tok)
        except ValueError:
            self.error = "bad literal " + tok[:20]
            return
        self._out(json.dumps(val))
        self._end_value()

    def _string_char(self, ch: str) -> None:
        esc = self._esc
        if esc:
            if esc == "\\":
                if ch == "u":
                    self._esc = "\\u"
                    return
                if ch not in _ESC:
                    self.error = "bad escape"
                    return
                self._esc = ""
                self._string_piece(_ESC[ch])
                return
            esc += ch
            if len(esc) < 6:
                self._esc = esc
                return
            self._esc = ""
            try:
                self._string_piece(chr(int(esc[2:], 16)))
            except ValueError:
                self.error = "bad escape"
            return
        if ch == "\\":
            self._esc = "\\"
            return
        if ch == '"':
            self._in_str = False
            text = "".join(self._str)
            top = self._stack[-1] if self._stack else None
            if self._string_is_key:
                top.key = text
                top.expect = "colon"
                self._out(f"{json.dumps(text)}: ")
                return
            if len(self._stack) == 1 and top is not None and top.key == "name":
                self.name = text
                if self.stream and not self._started:
                    self._started = True
                    self.out.append(("start", text, self._pos))
            self._out('"')
            self._end_value()
            return
        # Raw control characters (a literal newline in a string) are accepted, as
        # json.loads(strict=False) does: models write them and the intent is clear.
        self._string_piece(ch)

    def _string_piece(self, s: str) -> None:
        self._str.append(s)
        if self._emit_base and not self._string_is_key:
            # json.dumps escapes per code point, so escaping each piece joins to the whole
            self._frag.append(json.dumps(s)[1:-1])
            self._frag_end = self._pos

    def _finish_object(self) -> None:
        self.resume = self._pos  # any error found here concerns the whole object
        try:
            obj = json.loads("".join(self._raw), strict=False)
        except ValueError as e:
            self.error = f"bad JSON: {e}"
            self.resume = self._pos
            return
        name = obj.get("name") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not name:
            self.error = "no name"
            return
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args, strict=False) if args.strip() else {}
            except ValueError:
                self.error = "arguments string is not JSON"
                return
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.error = "arguments is not an object"
            return
        self.name, self.arguments = name, args
        if self.stream:
            if not self._started:
                self._started = True
                self.out.append(("start", name, self._pos))
            if not self._args_streamed:
                self.out.append(("args", json.dumps(args), self._pos))


# The syntax as data: the writer and the forced-call grammar come from the json-object shape's
# engine (engine/parse/shapes/json_object.py), whose reader is this scanner.
FORMAT = CallFormat(JSON_OBJECT, call=CALL_OPEN + "\n", call_end="\n" + CALL_CLOSE, sep="\n")


FAMILY = register(Family(
    name=NAME, models="Qwen3 (Hermes JSON calls), Hermes, most ChatML tool templates",
    markers=THINK_MARKERS, match_opener=match_opener, call_parser=CallParser,
    writer=think_writer(json_object.write_call(FORMAT)), format=FORMAT,
    detect=(CALL_OPEN,), fallback=True,
    thinking=None, pack="qwen3-hermes",
    grammar=CallGrammar(json_object.grammar_call(FORMAT), sep=FORMAT.sep),
))
