"""What the XML-like families' call readers share: a function opener with the name, then
key/value parameters between tags, typed by the tool's schema.

Owns `TaggedCall`, configured per family by class attributes (DeepSeek V3.2's DSML, MiniMax's
`<invoke>`, GLM's `<arg_key>`/`<arg_value>`). Run by whichever thread drives the parser.

A value ends at the first value closer; one leading and one trailing newline are stripped (as
Qwen XML's, docs/design.md section 4, rule 7). A value is typed by engine/parse/schema.py: a string
parameter keeps its raw text, anything else is JSON, then a Python literal, then the raw text;
a family that marks strings itself (DSML's `string="true"`) decides that instead. With
`stream`, each parameter's `json.dumps` fragment is written when its value closes, so the
fragments join to exactly `json.dumps(arguments)`. A repeated key keeps its first value.
"""

from __future__ import annotations

import json

from engine.parse.families.common import FULL, PREFIX
from engine.parse.families.framed import FramedBody
from engine.parse.schema import convert, param_types

_BEGIN, _NAME, _FUNC_TAG, _PARAMS, _KEY, _ATTRS, _VALUE, _AFTER = range(8)
_MAX_KEY = 256
_MAX_ATTRS = 64


class TaggedCall(FramedBody):
    FUNC_OPEN = ""  # before the name, when the call opener was the section's (may be "")
    NAME_CHARS = "_-.:"
    NAME_END: tuple[str, ...] = ()  # what may end the name (consumed when in NAME_EAT)
    NAME_EAT = True
    PARAM_OPEN = ""
    KEY_END = ""  # ends the key (DSML and MiniMax: the attribute's closing quote)
    ATTRS_END = ""  # ends the key's tag after the key ("" when KEY_END ends it)
    VALUE_OPEN = ""  # before the value, after the key (GLM's <arg_value>), after whitespace
    VALUE_END = ""
    FUNC_CLOSE = ""
    SECTION_CLOSE = ""  # "" when FUNC_CLOSE ends the section too

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._key = ""
        self._raw_string: bool | None = None  # the family said string / not (DSML), or None
        self._nparams = 0
        self._val: list[str] = []  # the value's text read so far (without a possible closer)

    # -- the family's hooks ------------------------------------------------------------------

    def attrs(self, text: str) -> bool | None:
        """Read the key tag's attributes: is the value a raw string (True), JSON (False), or
        up to the schema (None)."""
        return None

    # -- the state machine ---------------------------------------------------------------------

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws():
                    return
                if self.FUNC_OPEN:
                    m = self._lit(self.FUNC_OPEN)
                    if m == PREFIX:
                        return
                self._st = _NAME
            elif st == _NAME:
                name = self._word(self.NAME_CHARS)
                if not name:
                    return
                self._start(name)
                self._st = _FUNC_TAG if self.NAME_EAT else _PARAMS
            elif st == _FUNC_TAG:  # the end of the function's opening tag
                if not self._name_end():
                    return
                self._st = _PARAMS
            elif st == _PARAMS:
                if not self._ws():
                    return
                m = self._lit(self.PARAM_OPEN)
                if m == FULL:
                    self._st = _KEY
                    continue
                m2 = self._lit(self.FUNC_CLOSE)
                if m2 == FULL:
                    self._emit_args("}" if self._nparams else "{}")
                    self._st = _AFTER
                    continue
                if PREFIX in (m, m2):
                    return
                self._fail("expected " + self.PARAM_OPEN)
            elif st == _KEY:
                key = self._until(self.KEY_END, _MAX_KEY)
                if not key:
                    return
                key = key.strip()
                if not key or "\n" in key:
                    self._fail("bad parameter name")
                    return
                self._key = key
                self._st = _ATTRS
            elif st == _ATTRS:
                if self.ATTRS_END:
                    attrs = self._until(self.ATTRS_END, _MAX_ATTRS)
                    if not attrs:
                        return
                    self._raw_string = self.attrs(attrs.strip())
                if self.VALUE_OPEN:
                    if not self._ws():
                        return
                    if not self._expect(self.VALUE_OPEN):
                        return
                self._st = _VALUE
            elif st == _VALUE:
                raw = self._upto(self.VALUE_END, self._val)
                if raw is None:
                    return
                self._value(raw)
                self._st = _PARAMS
            else:
                if self.SECTION_CLOSE:
                    self._close(self.SECTION_CLOSE, eof)
                else:
                    self.done, self.end = True, self._pos
                return

    def _name_end(self) -> bool:
        """The end of the name's tag (`">`): consumed; True when done."""
        for lit in self.NAME_END:
            m = self._lit(lit)
            if m == FULL:
                return True
            if m == PREFIX:
                return False
        self._fail("bad function name")
        return False

    def _emit_args(self, text: str) -> None:
        if self.stream:
            self.out.append(("args", text, self._pos))

    def _value(self, raw: str) -> None:
        if raw.startswith("\n"):
            raw = raw[1:]
        if raw.endswith("\n"):
            raw = raw[:-1]
        key = self._key
        if key in self.arguments:  # a repeat: the first value stays
            return
        if self._raw_string is True:
            value = raw
        elif self._raw_string is False:
            value, _ = convert(raw, None)
        else:
            value, repaired = convert(raw, param_types(self.schemas, self.name, key))
            if repaired:
                self.repaired("Python literal")
        self.arguments[key] = value
        sep = "{" if not self._nparams else ", "
        self._emit_args(f"{sep}{json.dumps(key)}: {json.dumps(value)}")
        self._nparams += 1


__all__ = ["TaggedCall"]


def write_value(v) -> str:
    """A value as TaggedCall reads it back: a string raw, anything else JSON. The reader strips
    one leading and one trailing newline, so a string that begins or ends with one gets one
    more there."""
    if not isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return ("\n" if v.startswith("\n") else "") + v + ("\n" if v.endswith("\n") else "")
