"""Qwen XML tool-call bodies: `<function=NAME>`, `<parameter=KEY>` value `</parameter>`.

Owns the incremental reader of one call body (the text after `<tool_call>`). Run by whichever
thread drives the parser.

Rules (DESIGN rule 7): a value ends at the first `</parameter>` followed, after whitespace, by
`<parameter=` or `</function>`, so values may contain `</parameter>`; a missing `</parameter>`
right before `</function>` (then `</tool_call>` or the end) is recovered. One leading and one
trailing newline of a value are stripped. Values are typed by the tool's schema: a string
parameter stays raw, anything else is JSON-decoded, falling back to the raw string.

Streaming (stream=True): "start" when the name is known; "args" fragments that join to exactly
`json.dumps(arguments)`. String values stream as written (minus a held trailing newline and any
`<` that could still be a terminator); other values when complete. A repeated parameter keeps
its first value, so the streamed fragments and the final object always agree.
"""

from __future__ import annotations

import json

from engine.dialects.common import (
    FULL,
    NONE,
    PREFIX,
    CallBody,
    escape_fragment,
    is_string_schema,
    match_literal,
    param_schema,
    skip_ws,
)

NAME = "qwen-xml"
OPENER = "<function="
_PARAM = "<parameter="
_END_PARAM = "</parameter>"
_END_FUNC = "</function>"
_END_CALL = "</tool_call>"
_MAX_NAME = 256

(_PRE, _NAME, _BETWEEN, _KEY, _VALUE, _AFTER) = range(6)


def match_opener(text: str, i: int) -> int:
    return match_literal(text, i, OPENER)


class CallParser(CallBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._buf = ""
        self._pos = 0  # relative offset of _buf[0]
        self._st = _PRE
        self._key = ""
        self._skip = False  # current parameter is a repeat: its value is dropped
        self._raw_str = False  # current value streams as a raw JSON string
        self._val: list[str] = []
        self._val_first = True  # no value character seen yet (strip one leading newline)
        self._nparams = 0

    # -- driving -----------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if self.done or self.error:
            return
        self._buf += text
        self._run(eof=False)

    def finish(self) -> None:
        """End of output: resolve what is pending. Sets done (a complete call) or error."""
        if not (self.done or self.error):
            self._run(eof=True)
            if not (self.done or self.error):
                self.error = "unfinished"

    def _emit(self, kind: str, text: str) -> None:
        if self.stream:
            self.out.append((kind, text, self._pos))

    def _eat(self, k: int) -> None:
        self._buf = self._buf[k:]
        self._pos += k

    def _fail(self, why: str) -> None:
        self.error = why
        self.resume = self._pos  # the text that broke the grammar is the channel's again

    # -- the state machine -------------------------------------------------------------------

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            b = self._buf
            st = self._st
            if st in (_PRE, _BETWEEN, _AFTER):
                j = skip_ws(b, 0, None)
                if j:
                    self._eat(j)
                    b = self._buf
                if not b:
                    if eof and st == _AFTER:
                        self.done, self.end = True, self._pos
                    return
                if st == _PRE:
                    m = match_literal(b, 0, OPENER)
                    if m == FULL:
                        self._eat(len(OPENER))
                        self._st = _NAME
                        continue
                elif st == _BETWEEN:
                    m = match_literal(b, 0, _PARAM)
                    if m == FULL:
                        self._eat(len(_PARAM))
                        self._st = _KEY
                        continue
                    m2 = match_literal(b, 0, _END_FUNC)
                    if m2 == FULL:
                        self._eat(len(_END_FUNC))
                        self._close_function()
                        continue
                    m = max(m, m2)
                else:  # _AFTER
                    m = match_literal(b, 0, _END_CALL)
                    if m == FULL:
                        self._eat(len(_END_CALL))
                        self.done, self.end = True, self._pos
                        return
                    if m == NONE:
                        # Something other than </tool_call> after a complete function: the
                        # call is whole; the rest belongs to the answer again.
                        self.done, self.end = True, self._pos
                        return
                if m == PREFIX and not eof:
                    return
                if m == PREFIX and st != _AFTER:  # the output ended inside a tag
                    self.error = "unfinished"
                    return
                if st == _AFTER:  # eof inside a partial </tool_call>: the function is complete
                    self.done, self.end = True, self._pos
                    return
                self._fail("expected " + ("<function=" if st == _PRE else "<parameter="))
                return
            if st in (_NAME, _KEY):
                k = b.find(">")
                bad = b.find("\n", 0, k if k >= 0 else len(b))
                if bad >= 0 or (k < 0 and len(b) > _MAX_NAME) or k > _MAX_NAME:
                    self._fail("bad function name" if st == _NAME else "bad parameter name")
                    return
                if k < 0:
                    if eof:
                        self._fail("unfinished")
                    return
                word = b[:k].strip()
                self._eat(k + 1)
                if not word:
                    self._fail("empty name")
                    return
                if st == _NAME:
                    self.name = word
                    self._emit("start", word)
                    self._st = _BETWEEN
                else:
                    self._open_value(word)
                continue
            # _VALUE
            if not self._value(eof):
                return

    def _open_value(self, key: str) -> None:
        self._key = key
        self._skip = key in self.arguments
        self._raw_str = is_string_schema(param_schema(self.schemas, self.name, key))
        self._val = []
        self._val_first = True
        self._st = _VALUE
        if self.stream and self._raw_str and not self._skip:
            sep = "{" if self._nparams == 0 else ", "
            self._emit("args", f'{sep}{json.dumps(key)}: "')

    def _value(self, eof: bool) -> bool:
        """Consume value text; True when the value closed (state changed), False to wait."""
        b = self._buf
        n = len(b)
        i = 0
        while True:
            lt = b.find("<", i)
            if lt < 0:
                # All of it is value text, except a final newline (it may be the one that is
                # stripped before the terminator).
                cut = n - 1 if (n and b[-1] == "\n" and not eof) else n
                self._take(cut)
                if eof:
                    self._fail("unfinished")
                return False
            end = self._terminator(b, lt, eof)
            if end == PREFIX:
                cut = lt - 1 if (lt and b[lt - 1] == "\n") else lt
                self._take(cut)
                return False
            if end is None:  # '<' is ordinary value text
                i = lt + 1
                continue
            # A terminator at lt: strip one trailing newline, close the value.
            cut = lt - 1 if (lt and b[lt - 1] == "\n") else lt
            self._take(cut)
            self._eat(lt - cut)  # the stripped newline belongs to the tag
            self._close_value()
            if end == _END_PARAM:
                self._eat(len(_END_PARAM))
                self._st = _BETWEEN
            else:
                self._eat(len(_END_FUNC))
                self._close_function()
            return True

    def _terminator(self, b: str, lt: int, eof: bool):
        """What the '<' at b[lt] starts: _END_PARAM / _END_FUNC (a real end), PREFIX (can't
        tell yet) or None (value text)."""
        m = match_literal(b, lt, _END_PARAM)
        if m == FULL:
            j = skip_ws(b, lt + len(_END_PARAM), None)
            if j == len(b):
                return _END_PARAM if eof else PREFIX
            a = match_literal(b, j, _PARAM)
            c = match_literal(b, j, _END_FUNC)
            if FULL in (a, c):
                return _END_PARAM
            if PREFIX in (a, c):
                return _END_PARAM if eof else PREFIX
            return None
        if m == PREFIX:
            return None if eof else PREFIX
        m = match_literal(b, lt, _END_FUNC)
        if m == FULL:  # recovery of a missing </parameter>
            j = skip_ws(b, lt + len(_END_FUNC), None)
            if j == len(b):
                return _END_FUNC if eof else PREFIX
            c = match_literal(b, j, _END_CALL)
            if c == FULL:
                return _END_FUNC
            if c == PREFIX:
                return _END_FUNC if eof else PREFIX
            return None
        if m == PREFIX:
            return None if eof else PREFIX
        return None

    def _take(self, k: int) -> None:
        """Move b[:k] from the buffer into the current value (streaming it if raw string)."""
        if k <= 0:
            return
        piece = self._buf[:k]
        if self._val_first:
            self._val_first = False
            if piece[0] == "\n":
                piece = piece[1:]
        self._eat(k)
        if self._skip or not piece:
            return
        self._val.append(piece)
        if self._raw_str:
            self._emit("args", escape_fragment(piece))

    def _close_value(self) -> None:
        if self._skip:
            return
        raw = "".join(self._val)
        if self._raw_str:
            value = raw
            self._emit("args", '"')
        else:
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
            sep = "{" if self._nparams == 0 else ", "
            self._emit("args", f"{sep}{json.dumps(self._key)}: {json.dumps(value)}")
        self.arguments[self._key] = value
        self._nparams += 1

    def _close_function(self) -> None:
        self._emit("args", "}" if self._nparams else "{}")
        self._st = _AFTER
