"""The python-list shape: calls as a list of Python calls, `[get_weather(city="Paris"),
get_time(tz="UTC")]`; its reader, writer and forced-call grammar from one `CallFormat`.

Owns `PythonCalls` (the reader of one call of the list; `follow` hands the next one to the
parser), `python_reader`, `opener_test`, `write_call`, `write_value` and `grammar_call`. Run
by whichever thread drives the parser (the grammar on the service's thread).

A call is a name (dotted names such as `Calendar.create_event` too), then keyword arguments
whose values are Python literals (strings in either quote, numbers, `True` / `False` / `None`,
lists, tuples, dicts), JSON's `true` / `false` / `null` too. Each value is read on its own by
engine/parse/shapes/pyliteral.py (`ast.literal_eval`, never evaluated) and typed by the tool's
schema, with the repairs it names (an unquoted word for a string, a zero-padded integer, a raw
line end in a string). A list element may also be a JSON object `{"name": …, "arguments": …}`.
Positional arguments, `**kwargs`, a repeated argument and values that are not literals make that
call malformed (the list's calls before it stay calls). A list whose calls are complete is a
call at the end of output without its closer; the format's closer right after the last call
without the `]` is repaired ("no ]"). The families: LFM2 (between `<|tool_call_start|>` and
`<|tool_call_end|>`), `pythonic` (a bare list at a line start, the whole reply or after text:
Llama 3.2 / 4's pythonic templates, vLLM's `pythonic` parser) and `pythonic-tagged` (between
`<|python_start|>` and `<|python_end|>`, vLLM's `llama4_pythonic`).
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody, word_then
from engine.parse.schema import param_types
from engine.parse.shapes.json_list import Element, object_opener
from engine.parse.shapes.pyliteral import normalize, typed
from engine.parse.shapes.record import CallFormat

_NAME_CHARS = "_-."
_KEY_CHARS = "_-"
_MAX_DEPTH = 64
RAW_NEWLINE = "raw control character in a string"
NO_CLOSE = "no ]"

_BEGIN, _ELEM, _JSON, _NAME, _PAREN, _KEY, _EQ, _VALUE, _DELIM, _AFTER, _END = range(11)

# What the value scanner stops at: outside a string, quotes, brackets and the comma; inside a
# string, its quote character and a backslash (and, for `normalize`, raw line ends).
_CODE = re.compile(r"""['"()\[\]{},]""")
_IN = {q: re.compile("[" + re.escape(q) + r"\\]") for q in ("'", '"')}


def match_opener(text: str, i: int) -> Match:
    """`[` then (after whitespace) a call `NAME(` or a JSON call object; or that call or
    object alone."""
    n = len(text)
    if i >= n:
        return PREFIX
    if text[i] == "[":
        i = skip_ws(text, i + 1)
        if i < 0:
            return NONE
        if i == n:
            return PREFIX
    if text[i] == "{":
        return object_opener(text, i, ("name", "arguments"))
    return word_then(text, i, _NAME_CHARS, ("(",), gap=True)


# --- the reader ---------------------------------------------------------------------------------


class _JsonElement(Element):
    """A JSON call object in the list (`arguments` or `parameters`, either before the name)."""

    args = ("arguments", "parameters")


class PythonCalls(FramedBody):
    """One call of a python list; `CLOSE`: the format's closers after the `]` (none: bare)."""

    CLOSE: tuple[str, ...] = ()

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._list = False  # a `[` opened the calls
        self._more = False  # a `,` followed this call: the next one continues the list
        self._key = ""
        self._parts: list[str] = []  # the value's text read so far
        self._depth = 0  # open brackets in the value
        self._quote = ""  # the open string's quote (', ", ''' or """), "" outside strings

    def follow(self) -> PythonCalls | None:
        """The reader of the list's next call, when one follows this one."""
        if not self._more:
            return None
        nxt = type(self)(self.schemas, self.stream)
        nxt._st, nxt._list = _ELEM, True
        return nxt

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            if not self._ws():
                return False
            if self._buf[0] == "[":
                self._eat(1)
                self._list = True
            self._st = _ELEM
        elif st == _ELEM:
            if not self._ws():
                return False
            if self._buf[0] == "{":
                self._json = _JsonElement(self.schemas, self.stream)
                self._json_at = self._pos
                self._st = _JSON
            else:
                self._st = _NAME
        elif st == _JSON:
            return self._go(self._sub(eof), _AFTER)
        elif st == _NAME:
            word = self._word(_NAME_CHARS)
            if not word:
                return False
            self.name = word
            self._st = _PAREN
        elif st == _PAREN:
            if not self._ws():
                return False
            if not self._expect("("):
                return False
            self._start(self.name)
            self._st = _KEY
        elif st == _KEY:
            if not self._ws():
                return False
            if self._buf[0] == ")":
                self._eat(1)
                self._close_args()
                return True
            if not self._read_key():
                return False
        elif st == _EQ:
            if not self._ws():
                return False
            b = self._buf
            if b[0] != "=":
                self._fail("expected = after " + self._key)
                return False
            if len(b) < 2 and not eof:
                return False  # `=` or `==`
            if b[1:2] == "=":
                self._fail("expected = after " + self._key)
                return False
            self._eat(1)
            self._st = _VALUE
        elif st == _VALUE:
            if not self._scan_value(eof):
                return False
        elif st == _DELIM:  # the `,` or `)` that ended a value
            c = self._buf[0]
            self._eat(1)
            if c == ")":
                self._close_args()
            else:
                self._st = _KEY
        elif st == _AFTER:
            self._after_call(eof)
            if self._st == _AFTER:
                return False
        else:
            self._close(self.CLOSE, eof)
            return False
        return True

    # -- a keyword argument ------------------------------------------------------------------

    def _read_key(self) -> bool:
        b = self._buf
        if not (b[0].isalpha() or b[0] == "_"):
            what = "**kwargs" if b[0] == "*" else "a positional argument"
            self._fail(f"{what} in a call (keyword arguments only)")
            return False
        word = self._word(_KEY_CHARS)
        if not word:
            return False
        if word in self.arguments:
            self._fail("argument repeated: " + word)
            return False
        self._key = word
        self._st = _EQ
        return True

    def _scan_value(self, eof: bool) -> bool:
        """Scan the value's text up to the `,` or `)` that ends it (outside strings and
        brackets); True once it is read and stored. What is scanned moves from the buffer to
        `_parts` as it comes (a long string costs linear time); only an undecided quote or
        escape at the buffer's end waits there."""
        b = self._buf
        n = len(b)
        i = 0
        quote, depth = self._quote, self._depth
        end = -1
        while i < n:
            if quote:
                m = _IN[quote[0]].search(b, i)
                if m is None:
                    i = n
                    break
                j = m.start()
                c = b[j]
                if c == "\\":
                    if j + 1 >= n:
                        i = j  # the escaped character has not come yet
                        break
                    i = j + 2
                elif len(quote) == 1:
                    quote = ""
                    i = j + 1
                elif b.startswith(quote, j):
                    quote = ""
                    i = j + 3
                elif j + 3 > n and quote.startswith(b[j:]) and not eof:
                    i = j  # the closer may be arriving
                    break
                else:
                    i = j + 1
                continue
            m = _CODE.search(b, i)
            if m is None:
                i = n
                break
            j = m.start()
            c = b[j]
            if c in "'\"":
                if j + 3 > n and b[j:] == c * (n - j) and not eof:
                    i = j  # "" or """: the next character decides
                    break
                quote = c * 3 if b.startswith(c * 3, j) else c
                i = j + len(quote)
            elif c in "([{":
                depth += 1
                if depth > _MAX_DEPTH:
                    self._fail("value nested too deep")
                    return False
                i = j + 1
            elif depth:
                if c != ",":
                    depth -= 1
                i = j + 1
            elif c in "]}":
                self._fail(f"unbalanced {c} in the value of {self._key}")
                return False
            else:  # `,` or `)` at the call's own level: the value ends
                end = j
                break
        self._quote, self._depth = quote, depth
        if end < 0:
            if i:
                self._parts.append(b[:i])
                self._eat(i)
            return False
        text = "".join(self._parts) + b[:end]
        self._parts.clear()
        self._eat(end)
        try:
            line_end = False
            if "\\" in text or "\n" in text or "\r" in text or "\x00" in text:
                text, line_end = normalize(text)
            value, repair = typed(text, param_types(self.schemas, self.name, self._key))
        except ValueError as e:
            self._fail(f"bad value of {self._key}: {e}")
            return False
        if repair:
            self.repaired(repair)
        if line_end:
            self.repaired(RAW_NEWLINE)
        if self.stream:
            head = "{" if not self.arguments else ", "
            self.out.append(("args", f"{head}{json.dumps(self._key)}: {json.dumps(value)}",
                             self._pos))
        self.arguments[self._key] = value
        self._st = _DELIM
        return True

    def _close_args(self) -> None:
        if self.stream:
            self.out.append(("args", "}" if self.arguments else "{}", self._pos))
        self._st = _AFTER

    # -- after a call: the list goes on, ends, or is left open ----------------------------------

    def _after_call(self, eof: bool) -> None:
        if not self._list:
            self._st = _END
            return
        if self._close_at < 0:
            self._close_at = self._pos
        if not self._ws():
            if eof:  # the output ended inside the list: its calls are whole
                self.done, self.end = True, self._close_at
            return
        c = self._buf[0]
        if c in ",]":
            self._eat(1)
            self._close_at = -1
            if c == "]":
                self._st = _END
            else:
                self._more = True
                self.done, self.end = True, self._pos
            return
        m, size = NONE, 0
        for lit in self.CLOSE:
            m = max(m, match_literal(self._buf, 0, lit))
            if m == FULL:
                size = len(lit)
                break
        if m == PREFIX and not eof:
            return
        self.repaired(NO_CLOSE)
        if m == FULL:
            self._eat(size)
            self.done, self.end = True, self._pos
        else:
            self.done, self.end = True, self._close_at
        self._close_at = -1



# --- from a record, writer and grammar ----------------------------------------------------------


def write_value(v) -> str:
    """A value as a Python literal the reader takes back: strings in JSON's quoting (a JSON
    string is a Python string literal), `True` / `False` / `None`, lists and dicts nested."""
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if v is True or v is False or v is None:
        return repr(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {write_value(x)}"
                               for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(write_value(x) for x in v) + "]"
    return json.dumps(v)


def write_call(fmt: CallFormat):
    """The writer of one call (the list's brackets are the writer's frame, `frame`)."""

    def write(call, index: int) -> str:
        args = ", ".join(f"{k}={write_value(v)}" for k, v in call.arguments.items())
        return f"{fmt.call}{call.name}({args}){fmt.call_end}"

    return write


def _kwargs(items: list[tuple[str, bool]]) -> str:
    """`items` (expression, required) in order, joined by ", ", the optional ones omissible:
    each alternative starts at one of the items up to the first required one."""
    alts = []
    for k, (first, _) in enumerate(items):
        rest = " ".join(f'(", " {e})' + ("" if req else "?") for e, req in items[k + 1:])
        alts.append(f"{first} {rest}".strip())
        if items[k][1]:
            break
    else:
        alts.append('""')
    return "(" + " | ".join(alts) + ")"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer, which bounds the
    schemas): each declared property as `key=` then JSON by its schema (JSON is a Python
    literal to the reader, `true` and `null` included)."""
    items, required = w.props(fn)
    if items:
        args = _kwargs([(f"{w.lit(k + '=')} {w.json(s, f'{w.prefix}{i}-p{j}', {})}",
                         k in required) for j, (k, s) in enumerate(items)])
    else:
        key = f"{w.prefix}-lkey"
        w.rules[key] = "[A-Za-z_] [A-Za-z0-9_]{0,63}"
        value = w.json({}, f"{w.prefix}{i}-any", {})
        args = f'({key} "=" {value} (", " {key} "=" {value})*)?'
    return f"{w.seq(fn['name'] + '(')} {args} {w.seq(')')}"


def grammar_call(fmt: CallFormat):
    """A forced call in `fmt` as GBNF (registry.CallGrammar's `call`)."""
    if not (fmt.call or fmt.call_end):
        return _grammar_call
    return lambda w, i, fn: f"{w.seq(fmt.call)} {_grammar_call(w, i, fn)} {w.seq(fmt.call_end)}"


def frame(fmt: CallFormat) -> tuple[str, str]:
    """(what opens, what closes) a list of calls: the section's tags around the brackets."""
    return fmt.section + "[", "]" + fmt.section_end


def python_reader(fmt: CallFormat) -> type[PythonCalls]:
    """The reader of `fmt`'s calls."""
    closers = tuple(dict.fromkeys(s for f in fmt.spellings if (s := f.section_end.strip())))
    return type("CallParser", (PythonCalls,), {"CLOSE": closers})


def openers(fmt: CallFormat) -> tuple[str, ...]:
    """The parser's call openers: the section's; for a bare list, its `[`."""
    return tuple(dict.fromkeys(s for f in fmt.spellings if (s := f.section.strip()))) or ("[",)


def opener_test(fmt: CallFormat):
    """`match_opener(text, i)`: right after the section opener (or the bare `[`)."""
    return match_opener


__all__ = ["NO_CLOSE", "RAW_NEWLINE", "PythonCalls", "frame", "grammar_call", "match_opener",
           "opener_test", "openers", "python_reader", "write_call", "write_value"]
