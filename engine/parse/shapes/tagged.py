"""The tagged shape: a function opener with the name, then key/value parameters between tags,
typed by the tool's schema; its reader, writer and forced-call grammar from one `CallFormat`.

Owns `TaggedCall` (the reader, configured by class attributes: GLM's `<arg_key>`/`<arg_value>`,
MiniMax's and DSML's `<invoke>`, Hunyuan's), `tagged_reader` (a `TaggedCall` class made from a
record, every spelling of it accepted), `opener_test`, `write_call` and `grammar_call`. Run by
whichever thread drives the parser (the grammar on the service's thread).

A value ends at the first value closer; one leading and one trailing newline are stripped (as
Qwen XML's, docs/design.md section 4, rule 7). A value is typed by engine/parse/schema.py: a
string parameter keeps its raw text, anything else is JSON, then a Python literal, then the raw
text; a format that marks strings itself (DSML's `string="true"`) decides that instead. With
`stream`, each parameter's `json.dumps` fragment is written when its value closes, so the
fragments join to exactly `json.dumps(arguments)`. A repeated key keeps its first value. Where
the record allows it, the body may instead be one JSON arguments object (`json_body`: DSML's
`<｜DSML｜invoke name="f">{"city": "Paris"}</｜DSML｜invoke>`, as SGLang reads it), and a call
without parameters may close its own tag (`self_closing`: `<｜DSML｜invoke name="f"/>`).
"""

from __future__ import annotations

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, text_or_json
from engine.parse.families.framed import ParamBody, word_then
from engine.parse.schema import convert
from engine.parse.shapes.record import CallFormat

_BEGIN, _NAME, _FUNC_TAG, _PARAMS, _KEY, _ATTRS, _VALUE, _AFTER, _JSON, _JSON_END = range(10)
_MAX_KEY = 256
_MAX_ATTRS = 64
SELF_CLOSE = ('"/>', '" />')  # what ends a quoted name's tag that holds no parameters
NAME_CHARS = "_-.:"


def _alts(x) -> tuple[str, ...]:
    return tuple(a for a in ((x,) if isinstance(x, str) else x) if a)


class TaggedCall(ParamBody):
    """Each tag attribute is one string or a tuple of spellings (any of them is read)."""

    FUNC_OPEN: str | tuple[str, ...] = ""  # before the name, after the section's opener
    NAME_CHARS = NAME_CHARS
    NAME_END: tuple[str, ...] = ()  # what may end the name (consumed when in NAME_EAT)
    NAME_EAT = True
    SELF_CLOSE: tuple[str, ...] = ()  # a name's tag that closes the call (no parameters)
    PARAM_OPEN: str | tuple[str, ...] = ""
    KEY_END = ""  # ends the key (DSML and MiniMax: the attribute's closing quote)
    ATTRS_END = ""  # ends the key's tag after the key ("" when KEY_END ends it)
    VALUE_OPEN = ""  # before the value, after the key (GLM's <arg_value>), after whitespace
    VALUE_END: str | tuple[str, ...] = ""
    FUNC_CLOSE: str | tuple[str, ...] = ""
    SECTION_CLOSE: str | tuple[str, ...] = ""  # "" when FUNC_CLOSE ends the section too
    JSON_BODY = False  # the body may be one JSON arguments object instead of parameters
    STRING_ATTR = False  # the key's tag says `string="true|false"`

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        cls = type(self)
        self._func_open = _alts(cls.FUNC_OPEN)
        self._param_open = _alts(cls.PARAM_OPEN)
        self._value_end = _alts(cls.VALUE_END)
        # What of a value's text may still begin a closer (a fixed bound: linear cost).
        self._value_hold = max(map(len, self._value_end), default=1) - 1
        self._func_close = _alts(cls.FUNC_CLOSE)
        self._section_close = _alts(cls.SECTION_CLOSE)
        self._st = _BEGIN
        self._raw_string: bool | None = None  # the format said string / not (DSML), or None
        self._self_closed = False  # the name's tag closed the call (`"/>`)

    # -- the format's hooks --------------------------------------------------------------------

    def attrs(self, text: str) -> bool | None:
        """Read the key tag's attributes: is the value a raw string (True), JSON (False), or
        up to the schema (None)."""
        if self.STRING_ATTR:
            flag = text.replace(" ", "")
            if flag == 'string="true"':
                return True
            if flag == 'string="false"':
                return False
        return None

    # -- the state machine ---------------------------------------------------------------------

    def _any(self, lits: tuple[str, ...]) -> tuple[Match, int]:
        """Consume the first of `lits` at the buffer's start (FULL, its index); PREFIX while
        the buffer ends inside one of them; NONE."""
        best, b = NONE, self._buf
        for k, lit in enumerate(lits):
            m = match_literal(b, 0, lit)
            if m == FULL:
                self._eat(len(lit))
                return FULL, k
            if m > best:
                best = m
        return best, -1

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            return self._go(self._opened(*self._func_open) is not None, _NAME)
        elif st == _NAME:
            name = self._word(self.NAME_CHARS)
            if not name:
                return False
            self._start(name)
            self._st = _FUNC_TAG if self.NAME_EAT else _PARAMS
        elif st == _FUNC_TAG:  # the end of the function's opening tag
            if not self._name_end():
                return False
            self._st = _AFTER if self._self_closed else _PARAMS
        elif st == _PARAMS:
            if not self._ws():
                return False
            if self.JSON_BODY and not self._nparams and self._buf[0] == "{":
                self._st = _JSON
                return True
            m, _ = self._any(self._param_open)
            if m == FULL:
                self._st = _KEY
                return True
            m2, _ = self._any(self._func_close)
            if m2 == FULL:
                self._emit_args("}" if self._nparams else "{}")
                self._st = _AFTER
                return True
            if PREFIX in (m, m2):
                return False
            self._fail("expected " + self._param_open[0])
        elif st == _JSON:  # the arguments as one JSON object (streamed by JsonArgs)
            if not self._args(eof):
                return False
            self._st = _JSON_END
        elif st == _JSON_END:
            if not self._ws():
                return False
            m, _ = self._any(self._func_close)
            if m == NONE:
                self._fail("expected " + self._func_close[0])
            if m != FULL:
                return False
            self._st = _AFTER
        elif st == _KEY:
            key = self._until(self.KEY_END, _MAX_KEY)
            if not key:
                return False
            key = key.strip()
            if not key or "\n" in key:
                self._fail("bad parameter name")
                return False
            self._key = key
            self._st = _ATTRS
        elif st == _ATTRS:
            if self.ATTRS_END:
                attrs = self._until(self.ATTRS_END, _MAX_ATTRS)
                if not attrs:
                    return False
                self._raw_string = self.attrs(attrs.strip())
            if self.VALUE_OPEN:
                if not self._ws():
                    return False
                if not self._expect(self.VALUE_OPEN):
                    return False
            self._st = _VALUE
        elif st == _VALUE:
            raw = self._upto_any(self._value_end)
            if raw is None:
                return False
            self._value(raw)
            self._st = _PARAMS
        else:
            if self._section_close:
                self._close(self._section_close, eof)
            else:
                self.done, self.end = True, self._pos
            return False
        return True

    def _name_end(self) -> bool:
        """The end of the name's tag (`">`, or `"/>` closing a call without parameters):
        consumed; True when done."""
        m, k = self._any(self.NAME_END + self.SELF_CLOSE)
        if m == FULL:
            if k >= len(self.NAME_END):
                self._self_closed = True
                self._emit_args("{}")
            return True
        if m == NONE:
            self._fail("bad function name")
        return False

    def _upto_any(self, closers: tuple[str, ...]) -> str | None:
        """The value's text before the first of `closers` (both consumed), None while none has
        come (what cannot begin a closer moves into `_val` meanwhile: linear cost)."""
        if len(closers) == 1:
            return self._upto(closers[0], self._val)
        b = self._buf
        k, c = -1, ""
        for lit in closers:
            at = b.find(lit)
            if at >= 0 and (k < 0 or at < k or (at == k and lit < c)):  # as min() of (k, c)
                k, c = at, lit
        if k < 0:
            safe = len(b) - self._value_hold
            if safe > 0:
                self._val.append(b[:safe])
                self._eat(safe)
            return None
        text = "".join(self._val) + b[:k]
        self._val.clear()
        self._eat(k + len(c))
        return text

    def _typed_value(self, key: str, raw: str):
        """One leading and one trailing newline stripped; then raw or JSON as the key's tag
        said (DSML), else typed by the schema."""
        if raw.startswith("\n"):
            raw = raw[1:]
        if raw.endswith("\n"):
            raw = raw[:-1]
        if self._raw_string is True:
            return raw
        if self._raw_string is False:
            return convert(raw, None)[0]
        return super()._typed_value(key, raw)


# --- from a record ------------------------------------------------------------------------------


def _key_tags(fmt: CallFormat) -> tuple[str, str]:
    """(what ends the key, what ends the key's tag after attributes) as the reader reads them:
    a key quoted as an attribute (`"…>`) ends at its quote, other attributes may follow."""
    end = fmt.key_end.strip()
    if end.startswith('"') and len(end) > 1:
        return '"', end[1:]
    return end, ""


def tagged_reader(fmt: CallFormat) -> type[TaggedCall]:
    """The reader of `fmt`'s calls (every spelling of it)."""
    key_end, attrs_end = _key_tags(fmt)
    sectioned = bool(fmt.section)
    attrs = {
        "FUNC_OPEN": fmt.spelled("call") if sectioned else "",
        "NAME_END": fmt.spelled("name_end"),
        "NAME_EAT": bool(fmt.name_end.strip()),
        "SELF_CLOSE": SELF_CLOSE if fmt.self_closing else (),
        "PARAM_OPEN": fmt.spelled("param"),
        "KEY_END": key_end,
        "ATTRS_END": attrs_end or (">" if fmt.string_attr else ""),
        "VALUE_OPEN": fmt.value.strip(),
        "VALUE_END": fmt.spelled("value_end"),
        "FUNC_CLOSE": fmt.spelled("call_end"),
        "SECTION_CLOSE": fmt.spelled("section_end"),
        "JSON_BODY": fmt.json_body,
        "STRING_ATTR": fmt.string_attr,
    }
    return type("CallParser", (TaggedCall,), attrs)


def openers(fmt: CallFormat) -> tuple[str, ...]:
    """The call openers the parser scans for: each spelling's section, then its call tag."""
    return fmt.tag_openers()


def opener_test(fmt: CallFormat):
    """`match_opener(text, i)` for the format: after a section opener, a call tag; after a
    call tag, a name then the end of its tag (or, where the name ends at whitespace, the
    first parameter or the call's closer)."""
    calls = fmt.spelled("call") if fmt.section else ()
    if fmt.name_end.strip():
        after, gap = fmt.spelled("name_end") + (SELF_CLOSE if fmt.self_closing else ()), False
    else:
        after, gap = fmt.spelled("param") + fmt.spelled("call_end"), True

    def match_opener(text: str, i: int) -> Match:
        best = NONE
        for c in calls:
            best = max(best, match_literal(text, i, c))
        if best != NONE:
            return best
        return word_then(text, i, NAME_CHARS, after, gap=gap)

    return match_opener


def write_value(v, opened: str = "", closing: str = "") -> str:
    """A value as TaggedCall reads it back: a string raw, anything else JSON. The reader strips
    one leading and one trailing newline, so a string that begins or ends with one gets one
    more there, unless the tag before it (`opened`) or after it (`closing`) brings its own."""
    if not isinstance(v, str):
        return text_or_json(v)
    lead = "\n" if v.startswith("\n") and not opened.endswith("\n") else ""
    trail = "\n" if v.endswith("\n") and not closing.startswith("\n") else ""
    return lead + v + trail


def key_close(fmt: CallFormat, raw: bool) -> str:
    """What the writer puts between a key and its value (DSML's string attribute inside)."""
    end = fmt.key_end
    if fmt.string_attr:
        cut = end.rfind(">")
        end = f'{end[:cut]} string="{"true" if raw else "false"}"{end[cut:]}'
    return end + fmt.value


def write_call(fmt: CallFormat):
    """The writer of one call in `fmt` (registry.Writer's `call`)."""

    def write(call, index: int) -> str:
        params = "".join(
            f"{fmt.param}{k}{(opened := key_close(fmt, isinstance(v, str)))}"
            f"{write_value(v, opened, fmt.value_end)}{fmt.value_end}"
            for k, v in call.arguments.items())
        return f"{fmt.call}{call.name}{fmt.name_end}{params}{fmt.call_end}"

    return write


def grammar_call(fmt: CallFormat):
    """A forced call in `fmt` as GBNF (registry.CallGrammar's `call`; `w`: engine/grammar's
    Writer, which bounds the schemas)."""

    def call(w, i: int, fn: dict) -> str:
        params = w.tagged(i, fn, fmt.param, lambda raw: key_close(fmt, raw), fmt.value_end,
                          fmt.value_end.strip())
        return f"{w.seq(fmt.call + fn['name'] + fmt.name_end)} {params} {w.seq(fmt.call_end)}"

    return call


__all__ = ["NAME_CHARS", "SELF_CLOSE", "TaggedCall", "grammar_call", "key_close", "opener_test",
           "openers", "tagged_reader", "write_call", "write_value"]
