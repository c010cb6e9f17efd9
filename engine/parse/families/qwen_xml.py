"""Qwen XML tool-call bodies: `<function=NAME>`, `<parameter=KEY>` value `</parameter>`.

Owns the incremental reader of one call body (the text after `<tool_call>`, or a bare
`<function=` the parser found in the answer). Run by whichever thread drives the parser.

Rules (docs/design.md, section 4 "The parser", rule 7): a value ends at the first `</parameter>`
followed, after whitespace, by `<parameter=` or `</function>`, so values may contain
`</parameter>`. One leading and one trailing newline of a value are stripped. Repaired, and
noted in `repairs` (the parser counts `repaired_call`): a missing `</parameter>` before
`</function>` (then `</tool_call>` or the end) or before a `<parameter=NAME>` that names a
declared parameter (any name when the tool has no schema); a drifted closer (`</parameter1>`,
`</parameter_function>`, a bare `</parameter` at a line end) followed by what a real one
would be; a Python literal for a non-string parameter. Values are typed by engine/parse/schema.py.

Streaming (stream=True): "start" when the name is known; "args" fragments that join to exactly
`json.dumps(arguments)`. A value that can only be a string streams as written (minus a held
trailing newline and any `<` that could still be a terminator); a string that could still turn
out null or an object (`Optional[str]`) streams once its first characters rule that out; other
values when complete. A repeated parameter keeps its first value, so the streamed fragments and
the final object always agree.
"""

from __future__ import annotations

import json

from engine.parse.families.common import (
    FULL,
    NONE,
    PREFIX,
    CallBody,
    Match,
    escape_fragment,
    match_literal,
    skip_ws,
)
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import CALL_CLOSE, CALL_OPEN, THINK_MARKERS
from engine.parse.schema import (
    STRING,
    convert,
    declared_params,
    param_types,
    raw_is_final,
    streams_raw,
)
from engine.parse.shapes import tagged
from engine.parse.shapes.record import TAGGED, CallFormat

NAME = "qwen-xml"
OPENER = "<function="
_PARAM = "<parameter="
_END_PARAM = "</parameter>"
_END_FUNC = "</function>"
_END_CALL = CALL_CLOSE
_CLOSE_STEM = "</parameter"  # what every closer, exact or drifted, begins with
_MAX_NAME = 256
_MAX_DRIFT = 32  # at most this many word characters in a drifted closer (`</parameter1>`)

(_PRE, _NAME, _BETWEEN, _KEY, _VALUE, _AFTER) = range(6)
# How the current value streams: as written, once complete, or undecided yet.
(_RAW, _WHOLE, _PENDING) = range(3)
# Repairs, as reported in the `repaired_call` anomaly's text.
_MISSING = "missing </parameter>"
_DRIFTED = "drifted </parameter>"
_LITERAL = "Python literal"


def match_opener(text: str, i: int) -> Match:
    return match_literal(text, i, OPENER)


class CallParser(CallBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._buf = ""
        self._pos = 0  # relative offset of _buf[0]
        self._st = _PRE
        self._key = ""
        self._skip = False  # current parameter is a repeat: its value is dropped
        self._types: frozenset[str] | None = None  # the JSON types the current value may take
        self._mode = _WHOLE
        self._probe = ""  # how a _PENDING value begins (whitespace runs collapsed)
        self._declared: frozenset[str] | None = None  # the tool's parameter names (None: any)
        self._val: list[str] = []
        self._val_first = True  # no value character seen yet (strip one leading newline)
        self._nparams = 0
        # Whitespace after a closer, set aside while nothing else has come (`feed`), and the
        # buffer index where it began as `_terminator` saw it (-1: not that case).
        self._ws_hold: list[str] = []
        self._ws_from = -1

    # -- driving -----------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if self.done or self.error:
            return
        if self._ws_hold:
            # Waiting on whitespace after a closer: more of it decides nothing, so it is only
            # kept aside (re-scanning a growing run would cost quadratic time).
            if not text.lstrip(" \t\r\n"):
                self._ws_hold.append(text)
                return
            text = "".join(self._ws_hold) + text
            self._ws_hold = []
        self._buf += text
        self._run(eof=False)

    def finish(self) -> None:
        """End of output: resolve what is pending. Sets done (a complete call) or error."""
        if self._ws_hold:
            self._buf += "".join(self._ws_hold)
            self._ws_hold = []
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
                    self._declared = declared_params(self.schemas, word)
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
        self._types = param_types(self.schemas, self.name, key)
        self._mode = _RAW if streams_raw(self._types) else _WHOLE
        if self._mode == _WHOLE and self._types is not None and STRING in self._types:
            self._mode = _PENDING  # a string unless it turns out null / an object / an array
        self._probe = ""
        self._val = []
        self._val_first = True
        self._st = _VALUE
        if self._mode == _RAW:
            self._open_raw()

    def _open_raw(self) -> None:
        if self.stream and not self._skip:
            sep = "{" if self._nparams == 0 else ", "
            self._emit("args", f'{sep}{json.dumps(self._key)}: "')

    def _value(self, eof: bool) -> bool:
        """Consume value text; True when the value closed (state changed), False to wait."""
        b = self._buf
        n = len(b)
        i = 0
        self._ws_from = -1
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
                if self._ws_from >= 0:  # a closer, then only whitespace so far: set it aside
                    keep = self._ws_from - cut
                    self._ws_hold = [self._buf[keep:]]
                    self._buf = self._buf[:keep]
                return False
            if end is None:  # '<' is ordinary value text
                i = lt + 1
                continue
            # A terminator at lt: strip one trailing newline, close the value.
            kind, size = end
            cut = lt - 1 if (lt and b[lt - 1] == "\n") else lt
            self._take(cut)
            self._eat(lt - cut)  # the stripped newline belongs to the tag
            self._close_value()
            self._eat(size)
            if kind == _END_FUNC:
                self._close_function()
            else:
                self._st = _BETWEEN
            return True

    def _terminator(self, b: str, lt: int, eof: bool):
        """What the '<' at b[lt] starts: (kind, size) for a real end of the value (kind
        _END_PARAM or _END_FUNC; `size` characters of closer to consume, 0 when the value ends
        at the next `<parameter=`), PREFIX (can't tell yet) or None (value text)."""
        wait = None if eof else PREFIX
        m = match_literal(b, lt, _CLOSE_STEM)
        if m == PREFIX:
            return wait
        if m == FULL:
            size, drift = self._closer(b, lt)
            if size is None:
                return None
            if size == PREFIX:
                return wait
            j = skip_ws(b, lt + size, None)
            if j == len(b):
                if eof:
                    return self._ends((_END_PARAM, size), drift)
                self._ws_from = lt + size
                return PREFIX
            a = match_literal(b, j, _PARAM)
            c = match_literal(b, j, _END_FUNC)
            if FULL in (a, c):
                return self._ends((_END_PARAM, size), drift)
            if PREFIX in (a, c):
                return self._ends((_END_PARAM, size), drift) if eof else PREFIX
            return None
        m = match_literal(b, lt, _END_FUNC)
        if m == FULL:  # a missing </parameter> before </function> </tool_call> (or the end)
            j = skip_ws(b, lt + len(_END_FUNC), None)
            if j == len(b):
                if eof:
                    return self._ends((_END_FUNC, len(_END_FUNC)), _MISSING)
                self._ws_from = lt + len(_END_FUNC)
                return PREFIX
            c = match_literal(b, j, _END_CALL)
            if c == FULL:
                return self._ends((_END_FUNC, len(_END_FUNC)), _MISSING)
            if c == PREFIX:
                return self._ends((_END_FUNC, len(_END_FUNC)), _MISSING) if eof else PREFIX
            return None
        if m == PREFIX:
            return wait
        m = match_literal(b, lt, _PARAM)
        if m == PREFIX:
            return wait
        if m == FULL:  # a missing </parameter> before the next declared parameter
            start = lt + len(_PARAM)
            k = b.find(">", start, start + _MAX_NAME + 1)
            nl = b.find("\n", start, k if k >= 0 else start + _MAX_NAME + 1)
            if nl >= 0:
                return None
            if k < 0:
                return wait if len(b) - start <= _MAX_NAME else None
            key = b[start:k].strip()
            if key and (self._declared is None or key in self._declared):
                return self._ends((_END_PARAM, 0), _MISSING)
        return None

    @staticmethod
    def _closer(b: str, lt: int):
        """The closer starting with `</parameter` at b[lt]: (size, repair). `</parameter>` is
        exact (repair None); `</parameter` + a word + `>` (`</parameter1>`,
        `</parameter_function>`) or a bare `</parameter` at a line end drifted. (PREFIX, None)
        while the text ends inside it, (None, None) when it is value text."""
        k = lt + len(_CLOSE_STEM)
        n = len(b)
        j = k
        while j < n and j - k <= _MAX_DRIFT and (b[j].isalnum() or b[j] == "_"):
            j += 1
        if j == n:
            return PREFIX, None
        c = b[j]
        if c == ">" and j - k <= _MAX_DRIFT:
            return j + 1 - lt, (_DRIFTED if j > k else None)
        if j == k and c in "\r\n":
            return len(_CLOSE_STEM), _DRIFTED
        return None, None

    def _ends(self, end: tuple, repair: str | None) -> tuple:
        # Noted as the terminator is decided; the parser reports the call's repairs only if
        # the call is accepted, so a repair noted for a call that then fails is never seen.
        if repair is not None:
            self.repaired(repair)
        return end

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
        if self._mode == _RAW:
            self._emit("args", escape_fragment(piece))
        elif self._mode == _PENDING:
            # Only how the value begins decides: keep one leading whitespace character and
            # a few after it, so a long run of blanks is not re-examined on every piece.
            probe = self._probe + piece
            if probe[:1].isspace():
                probe = probe[0] + probe.lstrip()
            self._probe = probe[:8]
            if raw_is_final(self._types, self._probe):
                self._mode = _RAW
                self._open_raw()
                self._emit("args", escape_fragment("".join(self._val)))

    def _close_value(self) -> None:
        if self._skip:
            return
        raw = "".join(self._val)
        if self._mode == _RAW:
            value = raw
            self._emit("args", '"')
        else:
            value, literal = convert(raw, self._types)
            if literal:
                self.repaired(_LITERAL)
            sep = "{" if self._nparams == 0 else ", "
            self._emit("args", f"{sep}{json.dumps(self._key)}: {json.dumps(value)}")
        self.arguments[self._key] = value
        self._nparams += 1

    def _close_function(self) -> None:
        self._emit("args", "}" if self._nparams else "{}")
        self._st = _AFTER


# The syntax as data: the writer and the forced-call grammar come from the tagged shape's
# engine; the reader above is the family's own (its repairs of missing and drifted closers).
FORMAT = CallFormat(TAGGED, call=CALL_OPEN + "\n" + OPENER, name_end=">\n", param=_PARAM,
                    key_end=">", value="\n", value_end="\n" + _END_PARAM + "\n",
                    call_end=_END_FUNC + "\n" + CALL_CLOSE, sep="\n")


FAMILY = register(Family(
    name=NAME, models="Qwen3-Coder, Qwen3.5 (XML calls)",
    markers=THINK_MARKERS, match_opener=match_opener, call_parser=CallParser,
    writer=think_writer(tagged.write_call(FORMAT)), format=FORMAT,
    detect=(_PARAM,), fallback=True, supersedes=("hermes-json",),
    thinking=None, pack="qwen3-xml",
    grammar=CallGrammar(tagged.grammar_call(FORMAT), sep=FORMAT.sep),
))
