"""What the framed families' call readers share: a buffered reader over markers, and a JSON
arguments object read as it streams.

Owns `FramedBody`, the base of the call readers whose calls are a few fixed markers around a
name and its arguments (Harmony, DeepSeek, Kimi K2, Mistral, ...), and `JsonArgs`, the Hermes
JSON scanner (engine/parse/families/hermes_json.py) applied to a bare arguments object; and the
opener tests of those families, a name followed by a marker (`name_at`, `word_then`,
`call_or_word`); and `ParamBody`, the base of the readers whose arguments come one key/value
parameter at a time (the tagged shape's `TaggedCall`, Kimi K3, Muse Glimmer, MiniCPM 5,
MiniMax-M3): reading a quoted name or key (`unescape`), the loop between parameters, typing a
value by the tool's schema, keeping a parameter, and streaming its `json.dumps` fragment, so
the fragments join to exactly `json.dumps(arguments)`. Pure Python, run by whichever thread
drives the parser.

A reader keeps the text it has not decided in `_buf` (`_pos` is the body offset of `_buf[0]`)
and runs its own small state machine: `_run(eof)` steps it (`_step`, one state at a time, with
the steps the readers share: `_opened`, `_expect_seq`, `_go`), or a reader runs
its own loop; every decision waits until the text that decides it has arrived (a marker that
is still a prefix holds), so the outcome is the same for every chunking. An error always names
the body offset where the text resumes (`resume`): the parser then gives the raw text back to
the channel it came from (docs/design.md, section 4, rule 7).
"""

from __future__ import annotations

import json

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, CallBody, Match, match_literal, skip_ws
from engine.parse.schema import convert, param_types

MAX_NAME = 256
# What `ParamBody._param_or_close` found: a parameter's opener, the call's closer, the other.
AT_PARAM, AT_CLOSE, AT_OTHER = 1, 2, 3


def unescape(s: str) -> str:
    """A quoted attribute's value as the templates escape it (`&quot;`, `&amp;`), read back."""
    return s.replace("&quot;", '"').replace("&amp;", "&")


def name_at(text: str, i: int, chars: str) -> tuple[Match, int]:
    """Does a name (word characters and `chars`, at most MAX_NAME) start at text[i]?
    (FULL, its end) when something follows it; (PREFIX, len) when the text ends inside it (or
    at i); (NONE, i) when there is none, or it is too long to be one."""
    n = len(text)
    j = i
    while j < n and (text[j].isalnum() or text[j] in chars):
        j += 1
        if j - i > MAX_NAME:
            return NONE, i
    if j == n:
        return PREFIX, n
    return (NONE, i) if j == i else (FULL, j)


def word_then(text: str, i: int, chars: str, after: tuple[str, ...], gap: bool = False) -> Match:
    """Does a name (word characters and `chars`) followed by one of `after` start at i? With
    `gap`, whitespace (at most MAX_GAP) may come between them."""
    m, j = name_at(text, i, chars)
    if m != FULL:
        return m
    if gap:
        j = skip_ws(text, j)
        if j < 0:
            return NONE
    best = NONE
    for a in after:
        best = max(best, match_literal(text, j, a))
    return best


def call_or_word(text: str, i: int, call: str, chars: str, after: tuple[str, ...],
                 gap: bool = False) -> Match:
    """The opener test of a family whose calls share a section: after the section's opener,
    the call's own opener `call`; after `call`, a name then one of `after` (`word_then`)."""
    m = match_literal(text, i, call)
    return m if m != NONE else word_then(text, i, chars, after, gap)


class JsonArgs(hermes_json.CallParser):
    """One JSON object read as a call's arguments (its name came before it): done right after
    its closing brace; with `stream`, canonical `json.dumps` fragments as it is written."""

    _top_args = True

    def _finish_object(self) -> None:
        try:
            obj = json.loads("".join(self._raw), strict=False)
        except ValueError as e:
            self.error, self.resume = f"bad JSON: {e}", self._pos
            return
        if not isinstance(obj, dict):
            self.error, self.resume = "arguments is not an object", self._pos
            return
        self.arguments = obj
        self.done, self.end = True, self._pos


class FramedBody(CallBody):
    """A buffered call reader; subclasses implement `_run(eof)` with the helpers below."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._buf = ""
        self._pos = 0  # body offset of _buf[0]
        self._json: hermes_json.CallParser | None = None
        self._json_at = 0  # body offset where the arguments object's text began
        self._close_at = -1  # body offset where the whitespace before a closer began
        self._st = 0  # the state `_run` steps (each reader numbers its own)
        self._seq = 0  # how many of `_expect_seq`'s literals are consumed

    # -- driving -------------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if self.done or self.error:
            return
        self._buf += text
        self._run(eof=False)

    def finish(self) -> None:
        if not (self.done or self.error):
            self._run(eof=True)
            if not (self.done or self.error):
                self.error = "unfinished"

    def _run(self, eof: bool) -> None:
        """Run the state machine: `_step` the state in `_st` until the body is done or broken,
        or a step waits for more text. (A reader may override this with its own loop.)"""
        while not (self.done or self.error) and self._step(self._st, eof):
            pass

    def _step(self, st: int, eof: bool) -> bool:
        """One step in state `st` (the reader's own numbering, kept in `_st`): False to wait
        for more text (or once done or failed), True to go on."""
        raise NotImplementedError

    def _go(self, read: bool, nxt: int) -> bool:
        """A step that reads one thing: once it is `read`, the machine goes on in state `nxt`
        (else it waits, or the body failed)."""
        if read:
            self._st = nxt
        return read

    # -- helpers -------------------------------------------------------------------------------

    def _eat(self, k: int) -> None:
        self._buf = self._buf[k:]
        self._pos += k

    def _fail(self, why: str, at: int = 0) -> None:
        """The body is not a call: the channel's text resumes at `_buf[at]`."""
        self.error = why
        self.resume = self._pos + at

    def _lit(self, lit: str) -> Match:
        """Consume `lit` at the start of the buffer when it is there (FULL)."""
        m = match_literal(self._buf, 0, lit)
        if m == FULL:
            self._eat(len(lit))
        return m

    def _expect(self, lit: str) -> bool:
        """Consume `lit`, which the format requires here: True once it is consumed; False
        while the buffer ends inside it (wait for more), or after failing the body when the
        text is something else."""
        m = self._lit(lit)
        if m == NONE:
            self._fail("expected " + lit)
        return m == FULL

    def _opened(self, *lits: str) -> Match | None:
        """At the body's start: whitespace, then the call's own opener (one of `lits`), there
        after a section's opener and not where the parser matched the call's: FULL when one is
        (consumed), NONE when none is; None while the text may still be one."""
        if not self._ws():
            return None
        best = NONE
        for lit in lits:
            m = self._lit(lit)
            if m == FULL:
                return FULL
            best = max(best, m)
        return None if best == PREFIX else NONE

    def _expect_seq(self, lits: tuple[str, ...]) -> bool:
        """Whitespace then each of `lits` in turn, all required (`_expect`; how many are
        consumed is kept across feeds): True once the last is consumed."""
        while self._seq < len(lits):
            if not self._ws() or not self._expect(lits[self._seq]):
                return False
            self._seq += 1
        self._seq = 0
        return True

    def _ws(self) -> bool:
        """Skip whitespace; True when something other than whitespace follows."""
        b = self._buf
        j = len(b) - len(b.lstrip(" \t\r\n"))
        if j:
            self._eat(j)
        return bool(self._buf)

    def _word(self, allowed: str) -> str | None:
        """A name made of word characters and `allowed`, ended by any other character. None
        while it may go on (`finish` then calls the body unfinished); "" when the body breaks
        (`error` set)."""
        b = self._buf
        k = 0
        n = len(b)
        while k < n and (b[k].isalnum() or b[k] in allowed or b[k] == "_"):
            k += 1
            if k > MAX_NAME:
                self._fail("bad function name")
                return ""
        if k == n:
            return None
        if not k:
            self._fail("no function name")
            return ""
        word = b[:k]
        self._eat(k)
        return word

    def _until(self, lit: str, limit: int) -> str | None:
        """The text before `lit` (both consumed), at most `limit` characters. None while `lit`
        may still come; "" with `error` set when it cannot."""
        b = self._buf
        k = b.find(lit, 0, limit + len(lit))
        if k < 0:
            if len(b) >= limit + len(lit):
                self._fail("no " + lit)
                return ""
            return None
        head = b[:k]
        self._eat(k + len(lit))
        return head or " "  # not "" (which means failure)

    def _upto(self, closer: str, parts: list[str]) -> str | None:
        """The text before `closer` (both consumed, `parts` emptied), or None while `closer`
        has not come. Meanwhile all but what could begin `closer` moves from the buffer into
        `parts` (it is text for sure), so a long text costs linear time."""
        b = self._buf
        k = b.find(closer)
        if k < 0:
            safe = len(b) - len(closer) + 1
            if safe > 0:
                parts.append(b[:safe])
                self._eat(safe)
            return None
        text = "".join(parts) + b[:k]
        parts.clear()
        self._eat(k + len(closer))
        return text

    def _start(self, name: str) -> None:
        self.name = name
        if self.stream:
            self.out.append(("start", name, self._pos))

    def _args(self, eof: bool) -> bool:
        """Read the JSON arguments object; True once it is complete (arguments set)."""
        if self._json is None:
            self._json = JsonArgs(self.schemas, self.stream)
            self._json.name = self.name
            self._json_at = self._pos
        return self._sub(eof)

    def _sub(self, eof: bool) -> bool:
        """Feed the buffer to the sub-reader in `_json` (started at `_json_at`); True once it is
        done (its name and arguments taken), False while it reads or when it failed."""
        js = self._json
        piece = self._buf
        fed_at = self._pos
        if getattr(self, "_fed_to", None) is not js:  # a new sub-reader: what it was fed
            self._fed_to, self._fed = js, []
        self._fed.append(piece)
        js.feed(piece)
        if eof and not (js.done or js.error):
            js.finish()
        base = self._json_at
        for kind, text, rel in js.out:
            self.out.append((kind, text, base + rel))
        js.out.clear()
        if js.error:
            at = base + (js.resume if js.resume is not None else js._pos)
            self.error, self.resume = js.error, at
            return False
        if not js.done:
            self._buf, self._pos = "", fed_at + len(piece)
            return False
        end = base + js.end
        # The sub-reader may end before this piece (it looked ahead over whitespace fed in
        # earlier chunks): the rest is what it was fed after its end, whatever the chunking.
        self._buf = piece[end - fed_at :] if end >= fed_at else "".join(self._fed)[js.end :]
        self._fed_to = None
        self._pos = end
        self.arguments = js.arguments
        if js.name is not None:
            self.name = js.name
        return True

    def _close(self, lits: str | tuple[str, ...], eof: bool) -> Match | None:
        """After the call: whitespace then one of `lits` (consumed: FULL), or anything else or
        the end of output (NONE: the call ends before the whitespace, which goes back to the
        channel). None while undecided. The whitespace is eaten as it comes and only its start
        remembered, so any amount of it costs linear time."""
        if self._close_at < 0:
            self._close_at = self._pos
        self._ws()
        m = NONE
        for lit in (lits,) if isinstance(lits, str) else lits:
            m = max(m, match_literal(self._buf, 0, lit))
            if m == FULL:
                self._eat(len(lit))
                break
        if m == PREFIX and not eof:
            return None
        self.done, self.end = True, self._pos if m == FULL else self._close_at
        self._close_at = -1
        return m if m == FULL else NONE


class ParamBody(FramedBody):
    """A framed reader whose arguments are key/value parameters, kept in `arguments` in the
    order they close; a repeated key keeps its first value."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._key = ""
        self._val: list[str] = []  # the value's text read so far
        self._nparams = 0

    def _emit_args(self, text: str) -> None:
        if self.stream:
            self.out.append(("args", text, self._pos))

    def _typed_value(self, key: str, raw: str):
        """`raw` typed by the tool's schema for `key` (a Python literal read is a repair). A
        reader whose format types values itself overrides this (failing the body where a value
        is not of its type)."""
        value, literal = convert(raw, param_types(self.schemas, self.name, key))
        if literal:
            self.repaired("Python literal")
        return value

    def _value(self, raw: str) -> None:
        """Keep parameter `_key` with its text `raw`, typed (`_typed_value`); a repeated key
        keeps its first value (the repeat is not even typed, so it cannot break the call)."""
        key = self._key
        if key in self.arguments:
            return
        value = self._typed_value(key, raw)
        if not self.error:
            self._store(key, value)

    def _value_upto(self, closer: str) -> bool:
        """The value's text up to `closer` (consumed), kept as parameter `_key`; True once it
        is, False while `closer` has not come (linear cost: `_upto`)."""
        raw = self._upto(closer, self._val)
        if raw is None:
            return False
        self._value(raw)
        return True

    def _key_upto(self, end: str, why: str) -> bool:
        """A parameter's key written as a quoted attribute, up to `end` (`_attr_text`), kept
        in `_key`; True once it is."""
        key = self._attr_text(end, why)
        if key is None:
            return False
        self._key = key
        return True

    def _attr_text(self, end: str, why: str, bad: str = "\n") -> str | None:
        """A name or key written as a quoted attribute, up to `end` (consumed), `&quot;` and
        `&amp;` read back; None while it may go on, or after failing the body (`why`) when it
        is blank or holds one of `bad`."""
        text = self._until(end, MAX_NAME)
        if not text:
            return None
        text = unescape(text)
        if not text.strip() or any(c in text for c in bad):
            self._fail(why)
            return None
        return text

    def _param_or_close(self, param: str, close: str, other: str = "") -> int:
        """Between parameters: whitespace, then the next parameter's opener `param` (consumed:
        AT_PARAM), the call's closer `close` (consumed, the streamed arguments closed:
        AT_CLOSE) or, where the format has one, `other` (consumed: AT_OTHER); 0 while the text
        may still be one of them, or after failing the body when it is none."""
        if not self._ws():
            return 0
        m = self._lit(param)
        if m == FULL:
            return AT_PARAM
        m2 = self._lit(close)
        if m2 == FULL:
            self._emit_args("}" if self._nparams else "{}")
            return AT_CLOSE
        m3 = self._lit(other) if other else NONE
        if m3 == FULL:
            return AT_OTHER
        if PREFIX not in (m, m2, m3):
            self._fail("expected " + param)
        return 0

    def _store(self, key: str, value) -> None:
        """Keep a parameter and stream its fragment (the caller skips a repeated key)."""
        self.arguments[key] = value
        sep = "{" if not self._nparams else ", "
        self._emit_args(f"{sep}{json.dumps(key)}: {json.dumps(value)}")
        self._nparams += 1


__all__ = [
    "AT_CLOSE", "AT_OTHER", "AT_PARAM", "FULL", "MAX_NAME", "NONE", "PREFIX", "FramedBody",
    "JsonArgs", "ParamBody", "call_or_word", "name_at", "unescape", "word_then",
]
