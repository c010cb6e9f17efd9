"""LFM2 and LFM2.5 (Liquid AI): `<think>` reasoning and Python-style calls between
`<|tool_call_start|>` and `<|tool_call_end|>`.

Owns the family's markers, the reader of one call of a pythonic list and the reader of its
values. Run by whichever thread drives the parser.

    <think>The user wants the weather.</think>Checking.<|tool_call_start|>[get_weather(
    city="Paris", days=3), get_time(zone='CET')]<|tool_call_end|>

(one line, as the model writes it). The list holds calls in Python's syntax: a name (dotted
names such as `Calendar.create_event` too), then keyword arguments whose values are Python
literals (strings in either quote, numbers, `True` / `False` / `None`, lists, tuples, dicts),
JSON's `true` / `false` / `null` too (LFM2.5's template writes a dict argument with `tojson`).
Each value is parsed on its own with `ast.parse(..., mode="eval")` and read with
`ast.literal_eval` (never evaluated), after JSON's three words are turned into constants and
sets into lists (JSON has no set; source order is kept). The calls stream one by one (`follow`
hands the next one of the list to the parser), each argument as soon as its value is complete.
A list element may also be a JSON object `{"name": …, "arguments": …}` (what LFM2 writes when
its system prompt asks for JSON calls), read by the Hermes JSON scanner.

The three LFM templates (LFM2-8B-A1B, LFM2.5-8B-A1B, LFM2.5-Instruct) differ in what they show
the model (tool lists between `<|tool_list_start|>` tokens or plain `List of tools: [`; past
calls rendered or left in the content) but not in what the model writes: one family.

Choices where the other servers differ: a value is typed by its literal, except that a bare word
for a parameter whose schema allows a string but not what the word reads as (or that has no
schema, when the word is no literal) is kept as that text (`city=Paris`, `city=42`, `zip=02134`:
a repair, `repaired_call` "unquoted string"; SGLang drops such a call, llama.cpp's grammar never
writes one), and a zero-padded integer (`month=07`, which Python refuses) is the integer where
the schema takes a number or says nothing ("zero-padded integer", as vLLM and SGLang read it); a
raw line end or NUL inside a one-line string is read as its escape ("raw control character in a
string", as SGLang and vLLM escape them), and a backslash that starts no escape is kept (`"\\d"`
is `\\d`, as Python reads it, without its warning); positional arguments, `**kwargs`, a repeated
argument and values that are not literals (names where no string goes, expressions, bytes) make
that call malformed (its text comes back with `malformed_call`, the list's calls before it stay
calls), never a call with arguments missing; unescaped quotes nested in a string (`command='sed
-n '1,5p' f'`) are not guessed at (SGLang and vLLM try every closing quote; here the call is
malformed); a keyword that Python reserves (`from=1`) is an argument like any other (SGLang
renames it around `ast`); an empty list (`[]`) is text, no call; the answer may go on after
`<|tool_call_end|>` (llama.cpp's grammar ends the turn there), and a call list the model echoes
after it stays answer text (vLLM hides it); a list whose calls are complete is accepted at the
end of output without its closer, and a `<|tool_call_end|>` right after the last call without
the `]` is repaired ("no ]").
"""

from __future__ import annotations

import json
import re

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody, word_then
from engine.parse.families.granite import JsonElement
from engine.parse.families.pyliteral import literal, normalize, typed
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers
from engine.parse.schema import param_types

NAME = "lfm2"
CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"
TOOL_LIST = "<|tool_list_start|>"
_NAME_CHARS = "_-."
_KEY_CHARS = "_-"
_MAX_DEPTH = 64
RAW_NEWLINE = "raw control character in a string"
NO_CLOSE = "no ]"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (CALL_START,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALL_START, CALL_END)

_BEGIN, _ELEM, _JSON, _NAME, _PAREN, _KEY, _EQ, _VALUE, _DELIM, _AFTER, _END = range(11)

# What the value scanner stops at: outside a string, quotes, brackets and the comma; inside a
# string, its quote character and a backslash (and, for `normalize`, raw line ends).
_CODE = re.compile(r"""['"()\[\]{},]""")
_IN = {q: re.compile("[" + re.escape(q) + r"\\]") for q in ("'", '"')}


def match_opener(text: str, i: int) -> Match:
    """`[` then (after whitespace) a call `NAME(` or a JSON object whose first key is "name";
    or that call or object alone."""
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
        return hermes_json.match_opener(text, i)
    return word_then(text, i, _NAME_CHARS, ("(",), gap=True)


# --- the reader ---------------------------------------------------------------------------------


class CallParser(FramedBody):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._list = False  # a `[` opened the calls
        self._more = False  # a `,` followed this call: the next one continues the list
        self._key = ""
        self._parts: list[str] = []  # the value's text read so far
        self._depth = 0  # open brackets in the value
        self._quote = ""  # the open string's quote (', ", ''' or """), "" outside strings

    def follow(self) -> CallParser | None:
        """The reader of the list's next call, when one follows this one."""
        if not self._more:
            return None
        nxt = CallParser(self.schemas, self.stream)
        nxt._st, nxt._list = _ELEM, True
        return nxt

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                if self._buf[0] == "[":
                    self._eat(1)
                    self._list = True
                self._st = _ELEM
            elif st == _ELEM:
                if not self._ws():
                    return
                if self._buf[0] == "{":
                    self._json = JsonElement(self.schemas, self.stream)
                    self._json_at = self._pos
                    self._st = _JSON
                else:
                    self._st = _NAME
            elif st == _JSON:
                if not self._sub(eof):
                    return
                self._st = _AFTER
            elif st == _NAME:
                word = self._word(_NAME_CHARS)
                if not word:
                    return
                self.name = word
                self._st = _PAREN
            elif st == _PAREN:
                if not self._ws():
                    return
                if not self._expect("("):
                    return
                self._start(self.name)
                self._st = _KEY
            elif st == _KEY:
                if not self._ws():
                    return
                if self._buf[0] == ")":
                    self._eat(1)
                    self._close_args()
                    continue
                if not self._read_key():
                    return
            elif st == _EQ:
                if not self._ws():
                    return
                b = self._buf
                if b[0] != "=":
                    self._fail("expected = after " + self._key)
                    return
                if len(b) < 2 and not eof:
                    return  # `=` or `==`
                if b[1:2] == "=":
                    self._fail("expected = after " + self._key)
                    return
                self._eat(1)
                self._st = _VALUE
            elif st == _VALUE:
                if not self._scan_value(eof):
                    return
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
                    return
            else:
                self._close(CALL_END, eof)
                return

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
        m = match_literal(self._buf, 0, CALL_END)
        if m == PREFIX and not eof:
            return
        self.repaired(NO_CLOSE)
        if m == FULL:
            self._eat(len(CALL_END))
            self.done, self.end = True, self._pos
        else:
            self.done, self.end = True, self._close_at
        self._close_at = -1


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "literal", "match_opener",
           "typed"]


# --- writer and grammar -------------------------------------------------------------------------


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


def _write_call(call, index: int) -> str:
    args = ", ".join(f"{k}={write_value(v)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


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
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): each declared property
    as `key=` then JSON by its schema (JSON is a Python literal to the reader, `true` and
    `null` included)."""
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


FAMILY = register(Family(
    name=NAME, models="LFM2, LFM2.5 (Liquid AI)", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(_write_call, calls_open=CALL_START + "[", calls_sep=", ",
                        calls_close="]" + CALL_END, before_calls=""),
    detect=(CALL_START, TOOL_LIST, "List of tools: ["), stops=("<|im_end|>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="lfm2",
    grammar=CallGrammar(_grammar_call, open=CALL_START + "[", sep=", ",
                        close="]" + CALL_END),
))
