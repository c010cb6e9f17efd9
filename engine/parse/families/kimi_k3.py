"""Kimi K3: channels framed as `<|open|>NAME<|sep|>…<|close|>NAME<|sep|>` (its "XTML"), the
reasoning in `think`, the answer in `response`, calls in `tools`.

Owns the family's markers, the reader of one call, its writer and its forced-call grammar. Run
by whichever thread drives the parser.

Kimi-K3.jinja writes an assistant turn as one message; the generation prompt opens the message
and its first channel (`think` when thinking is on, its default, else `response`), so a reply
with thinking reads (without the line breaks):

    Let me check.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

`<|open|>`, `<|close|>`, `<|sep|>` and `<|end_of_msg|>` are its special tokens (the channel
names and attributes are text); attribute values escape `&` and `"` (`&amp;`, `&quot;`). An
argument's `type` (string, number, boolean, null, object, array) says how its value is written:
a string raw, anything else as JSON. A call may instead carry its arguments as one JSON object,
`<|open|>json type="object"<|sep|>{…}<|close|>json<|sep|>`. The response's tags and the
message's closer are markup; `<|end_of_msg|>` ends the turn. Several calls share one `tools`
section: each `<|open|>call ` is read as its own call, and the section's end is consumed by the
call before it.

Choices where the other servers differ: the `type` attribute decides a value's type (a string
stays a string whatever the schema says; a value that does not read as its declared type, JSON
or a Python literal, makes the call malformed, as vLLM's K3 parser refuses it); an argument
without a `type` is typed by the schema; a repeated key keeps its first value and a call's
other attributes (`index`) are not checked (vLLM refuses both); `tool` must be the call's first
attribute (as the template writes it); values keep their text exactly; a `<|open|>call ` outside
a `tools` section is a call too, unless quoted; `<|open|>response<|sep|>` inside the reasoning
stays reasoning text (only `<|close|>think<|sep|>`, or a real call, ends the thinking).
"""

from __future__ import annotations

from engine.parse.families.common import FULL, NONE, Match, match_literal, text_or_json
from engine.parse.families.framed import AT_CLOSE, AT_PARAM, ParamBody, unescape, word_then
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.schema import STRING, convert, fits

NAME = "kimi-k3"
OPEN, CLOSE, SEP, END_OF_MSG = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
THINK_OPEN = OPEN + "think" + SEP
THINK_CLOSE = CLOSE + "think" + SEP
RESPONSE_OPEN = OPEN + "response" + SEP
RESPONSE_CLOSE = CLOSE + "response" + SEP
MESSAGE_CLOSE = CLOSE + "message" + SEP
TOOLS = OPEN + "tools" + SEP
TOOLS_END = CLOSE + "tools" + SEP
CALL = OPEN + "call "
CALL_TOOL = CALL + 'tool="'
CALL_END = CLOSE + "call" + SEP
ARG = OPEN + 'argument key="'
ARG_END = CLOSE + "argument" + SEP
JSON_OPEN = OPEN + "json"
JSON_END = CLOSE + "json" + SEP
NAME_CHARS = "_-.:"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (TOOLS, CALL),
                  markup=(RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE, END_OF_MSG))
PRESERVED_TOKENS = (OPEN, CLOSE, SEP, END_OF_MSG)

# The JSON types an argument's `type` attribute names.
TYPES = {"number": frozenset({"number", "integer"}), "integer": frozenset({"integer"}),
         "boolean": frozenset({"boolean"}), "null": frozenset({"null"}),
         "object": frozenset({"object"}), "array": frozenset({"array"})}
_MAX_ATTRS = 128
(_BEGIN, _NAME, _CALL_ATTRS, _ARGS, _KEY, _ARG_ATTRS, _VALUE, _JSON_ATTRS, _JSON, _JSON_END,
 _AFTER) = range(11)


def match_opener(text: str, i: int) -> Match:
    """After `<|open|>tools<|sep|>`: a call's opener; after `<|open|>call `: `tool="NAME"`."""
    m = match_literal(text, i, CALL_TOOL)
    if m != NONE:
        return m
    m = match_literal(text, i, 'tool="')
    if m != FULL:
        return m
    return word_then(text, i + len('tool="'), NAME_CHARS, ('"',))


def escape(s: str) -> str:
    return s.replace("&", "&amp;").replace('"', "&quot;")


def _attr(attrs: str, name: str) -> str | None:
    """The value of attribute `name` in ` a="x" b="y"`, or None."""
    key = f'{name}="'
    at = attrs.find(key)
    if at < 0 or (at and attrs[at - 1] not in " \t"):
        return None
    end = attrs.find('"', at + len(key))
    return unescape(attrs[at + len(key):end]) if end >= 0 else None


class CallParser(ParamBody):
    """One `<|open|>call tool="NAME" …<|sep|>…<|close|>call<|sep|>`, read after `<|open|>call `
    (or after the section's opener, the call's own opener included)."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._types: frozenset[str] | None = None  # from the argument's `type`; None: schema
        self._raw_string = False

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            m = self._opened(CALL_TOOL)  # else the parser matched it: `tool="` is left
            if m is None or (m == NONE and not self._expect('tool="')):
                return False
            self._st = _NAME
        elif st == _NAME:
            name = self._attr_text('"', "bad function name", "<>\n")
            if name is None:
                return False
            self._start(name)
            self._st = _CALL_ATTRS
        elif st == _CALL_ATTRS:  # the rest of the call's tag (` index="1"`)
            if self._tag_rest() is None:
                return False
            self._st = _ARGS
        elif st == _ARGS:  # the JSON form only where no argument came before it
            found = self._param_or_close(ARG, CALL_END, "" if self._nparams else JSON_OPEN)
            if not found:
                return False
            self._st = _KEY if found == AT_PARAM else _AFTER if found == AT_CLOSE else _JSON_ATTRS
        elif st == _KEY:
            return self._go(self._key_upto('"', "bad argument key"), _ARG_ATTRS)
        elif st == _ARG_ATTRS:
            attrs = self._tag_rest()
            if attrs is None:
                return False
            kind = _attr(attrs, "type")
            self._raw_string = kind == STRING
            self._types = TYPES.get(kind) if kind is not None else None
            self._st = _VALUE
        elif st == _VALUE:
            return self._go(self._value_upto(ARG_END), _ARGS)
        elif st == _JSON_ATTRS:
            if self._tag_rest() is None:
                return False
            self._st = _JSON
        elif st == _JSON:
            return self._go(self._args(eof), _JSON_END)
        elif st == _JSON_END:  # the JSON form's closer, then the call's
            return self._go(self._expect_seq((JSON_END, CALL_END)), _AFTER)
        else:
            self._close(TOOLS_END, eof)
            return False
        return True

    def _tag_rest(self) -> str | None:
        """The attributes left in the open tag, up to its `<|sep|>` (consumed); None while it
        has not come, or after failing the body (no tag ends so)."""
        attrs = self._until(SEP, _MAX_ATTRS)
        if attrs is None:
            return None
        if not attrs or "<|" in attrs or "\n" in attrs:
            if not self.error:
                self._fail("bad tag attributes")
            return None
        return attrs

    def _typed_value(self, key: str, raw: str):
        """The value as its `type` attribute says (a string raw; the body fails when it is not
        of that type), else typed by the schema."""
        if self._raw_string:
            return raw
        if self._types is None:
            return super()._typed_value(key, raw)
        value, repaired = convert(raw, self._types)
        if not fits(value, self._types):
            self._fail(f"{key} is not {'/'.join(sorted(self._types))}")
        elif repaired:
            self.repaired("Python literal")
        return value


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


# --- the writer ---------------------------------------------------------------------------------


def xtml_type(v) -> str:
    """The `type` the template writes for a value."""
    if isinstance(v, bool):
        return "boolean"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "object" if isinstance(v, dict) else "array"


def _write_call(call, index: int) -> str:
    args = "".join(f'{ARG}{escape(k)}" type="{xtml_type(v)}"{SEP}{text_or_json(v)}{ARG_END}'
                   for k, v in call.arguments.items())
    return f'{CALL_TOOL}{escape(call.name)}" index="{index + 1}"{SEP}{args}{CALL_END}'


# --- the forced-call grammar ------------------------------------------------------------------

_SCHEMA_TYPES = {"integer": "number", "number": "number", "boolean": "boolean",
                 "object": "object", "array": "array", "null": "null"}


def _schema_type(schema: dict) -> str | None:
    """The `type` attribute a property's value is written with, None when its schema names no
    single type (it is then written in the JSON form)."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return "string" if all(isinstance(e, str) for e in enum) else None
    t = schema.get("type", "string")
    return "string" if t == "string" else _SCHEMA_TYPES.get(t) if isinstance(t, str) else None


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): the declared arguments
    in order (the required ones always), each with its `type`; a tool whose properties are not
    all of one plain type (or that declares none) gets the JSON form."""
    items, required = w.props(fn)
    head = (f'{w.seq(CALL_TOOL + escape(fn["name"]) + chr(34) + " index=" + chr(34))} '
            f'[1-9] [0-9]? {w.seq(chr(34) + SEP)}')
    kinds = [_schema_type(s) for _, s in items]
    if not items or None in kinds:
        body = (f'{w.seq(JSON_OPEN + " type=" + chr(34) + "object" + chr(34) + SEP)} '
                f"{w.args(i, fn)} {w.seq(JSON_END)}")
    else:
        parts = []
        for j, ((k, schema), kind) in enumerate(zip(items, kinds, strict=True)):
            value = (w.raw(schema, CLOSE) if kind == "string"
                     else w.json(schema, f"{w.prefix}{i}-p{j}", {}))
            tag = f'{ARG}{escape(k)}" type="{kind}"{SEP}'
            parts.append(f"({w.seq(tag)} {value} {w.seq(ARG_END)})"
                         + ("" if k in required else "?"))
        body = " ".join(parts)
    return f"{head} {body} {w.seq(CALL_END)}"


FAMILY = register(Family(
    name=NAME, models="Kimi K3", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    # The prompt opens the reasoning (thinking on) or the response (off); after thinking the
    # model opens the response itself, and closes it before its calls.
    writer=Writer(_write_call, reasoning_open=THINK_OPEN,
                  reasoning_close=THINK_CLOSE + RESPONSE_OPEN, before_calls="",
                  calls_open=RESPONSE_CLOSE + TOOLS, calls_sep="", calls_close=TOOLS_END),
    detect=(END_OF_MSG, OPEN), stops=(END_OF_MSG,),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="kimi-k3",
    tag_forms=(r'<\|(?:open|close)\|>[A-Za-z_]+(?: [A-Za-z_]+="[^"<>\n]*")*<\|sep\|>',),
    grammar=CallGrammar(_grammar_call, open=RESPONSE_CLOSE + TOOLS, close=TOOLS_END),
))
