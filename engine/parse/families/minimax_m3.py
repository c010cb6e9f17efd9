"""MiniMax-M3: `<mm:think>` reasoning, calls in `]<]minimax[>[`-namespaced tags, each value an
XML element (nested objects and arrays expanded into elements of their own).

Owns the family's markers, the reader of one call, its writer and its forced-call grammar. Run
by whichever thread drives the parser.

Every call tag starts with the namespace token `]<]minimax[>[` (NS below), and a parameter is
named by its tag (MiniMax-M3.jinja's `to_xml`):

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>
        ]<]minimax[>[<opts>]<]minimax[>[<item>1]<]minimax[>[</item>]<]minimax[>[</opts>
        ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

(the indented lines go on the invoke's line: the template writes each invoke on one line, no
space between its tags). A leaf's text is the value (a string raw, anything else as `tojson` or
`str` writes it), typed by the tool's schema (engine/parse/schema.py); an element whose content
is elements is an object, or an array when the schema says so or (no schema) every child is
`<item>`; an empty element is `[]` / `{}` where the schema allows no string. The prompt opens
the reasoning only with `thinking_mode` "enabled" (`<mm:think>`; "disabled" writes
`</mm:think>`); in the default, adaptive mode the model writes `<mm:think>…</mm:think>` or the
bare `</mm:think>` its template prefixes non-thinking turns with: at the very start of the
answer that closer is the family's own prefix (`Markers.lead`), consumed as markup, never a
stray closer. `[e~[` ends the turn. Several invokes share one section: each `NS<invoke name="`
is read as its own call, and the section's end is consumed by the call before it.

Detected by the namespace token (or `<mm:think>`), which only M3's templates write; M3's
templates also hold `]~b]`, MiniMax-M2's marker, so this family supersedes minimax-xml.

Choices where the other servers differ: a leaf closed by a bare `</key>` (no NS; real M3
replies do this) is accepted, and counted as a repair, when the next NS tag is not that leaf's
own closer (the namespace-stripping regex parsers accept any `</key>`); an `NS<invoke name="`
outside a section is a call too, unless quoted; values keep their text exactly (no strip: the
template writes them flush against their tags); nested values are typed by the schema's
`properties` / `items` (the regex parsers type only the top level, or not at all); JSON text
in an element the schema types as an object or array is read too (the forced-call grammar
writes containers so); a repeated key keeps its first value. The writer writes None as `null`
(the template drops None-valued arguments) and a nested value as JSON where its XML form would
not read back the same without a schema (a string that reads as JSON, an empty container, a
key that cannot be a tag).
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import PREFIX, Match
from engine.parse.families.framed import ParamBody, call_or_word
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.schema import (
    ARRAY,
    OBJECT,
    STRING,
    convert,
    param_types,
    schema_types,
    tool_params,
)

NAME = "minimax-m3"
NS = "]<]minimax[>["
SECTION = NS + "<tool_call>"
SECTION_END = NS + "</tool_call>"
INVOKE = NS + '<invoke name="'
INVOKE_END = NS + "</invoke>"
THINK_OPEN = "<mm:think>"
THINK_CLOSE = "</mm:think>"
NAME_CHARS = "_-.:"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION, INVOKE), lead=(THINK_CLOSE,))
PRESERVED_TOKENS = (NS, THINK_OPEN, THINK_CLOSE, "<tool_call>", "</tool_call>")

_MAX_TAG = 256  # a tag's text between `<` and `>`
_MAX_DEPTH = 32  # nesting of elements inside one parameter
_BARE = "closer without " + NS
_BEGIN, _NAME, _NAME_END, _TEXT, _TAG, _TAG_NAME, _AFTER = range(7)


def match_opener(text: str, i: int) -> Match:
    """After the section: an invoke; after an invoke's opener: `NAME">`."""
    return call_or_word(text, i, INVOKE, NAME_CHARS, ('">',))


# --- schemas of nested values -----------------------------------------------------------------


def _resolve(root, ref: str):
    """A local `$ref` (`#/$defs/X`, `#/definitions/X`, any `#/a/b`) into `root`, or None."""
    if not isinstance(root, dict) or not ref.startswith("#"):
        return None
    node = root
    for part in ref[2:].split("/") if len(ref) > 2 else ():
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node if isinstance(node, dict) else None


def _sub(sch, root, key: str | None, depth: int = 0):
    """The schema of property `key` of `sch` (of its array items when `key` is None), looked
    for through `$ref` and `anyOf` / `oneOf` / `allOf`; None when the schema does not say."""
    if not isinstance(sch, dict) or depth > _MAX_DEPTH:
        return None
    if key is None:
        if isinstance(sch.get("items"), dict):
            return sch["items"]
    else:
        props = sch.get("properties")
        if isinstance(props, dict) and isinstance(props.get(key), dict):
            return props[key]
    branches = [_resolve(root, sch["$ref"])] if isinstance(sch.get("$ref"), str) else []
    for k in ("anyOf", "oneOf", "allOf"):
        if isinstance(sch.get(k), list):
            branches += sch[k]
    for b in branches:
        found = _sub(b, root, key, depth + 1)
        if found is not None:
            return found
    return None


# --- the reader ---------------------------------------------------------------------------------


class _Element:
    """An open element: its tag, the text read before its first child, its children."""

    __slots__ = ("children", "tag")

    def __init__(self, tag: str | None) -> None:
        self.tag = tag  # None: the invoke itself
        self.children: list[tuple[str, object]] | None = None  # (tag, leaf text or children)


class CallParser(ParamBody):
    """One invoke: `NAME">` (after the invoke's opener), its parameter elements, its closer."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._stack: list[_Element] = []
        self._text: list[str] = []  # the open element's text read so far
        self._raw = ""  # the text before the NS tag being read

    def _run(self, eof: bool) -> None:
        while not (self.done or self.error):
            st = self._st
            if st == _BEGIN:
                if not self._ws() or self._lit(INVOKE) == PREFIX:
                    return
                self._st = _NAME
            elif st == _NAME:
                name = self._word(NAME_CHARS)
                if not name:
                    return
                self._start(name)
                self._st = _NAME_END
            elif st == _NAME_END:
                if not self._expect('">'):
                    return
                self._stack.append(_Element(None))
                self._st = _TEXT
            elif st == _TEXT:  # up to the next NS: an element's text, or what lies between tags
                raw = self._upto(NS, self._text)
                if raw is None:
                    return
                self._raw = raw
                self._st = _TAG
            elif st == _TAG:
                if not self._expect("<"):
                    return
                self._st = _TAG_NAME
            elif st == _TAG_NAME:
                tag = self._until(">", _MAX_TAG)
                if not tag:
                    return
                self._tag(tag.strip() if tag != " " else "")
            else:
                self._close(SECTION_END, eof)
                return

    def _tag(self, tag: str) -> None:
        """The NS tag `<tag>` after the text `_raw`: open, close, or end the invoke."""
        closing = tag.startswith("/")
        name = tag[1:].strip() if closing else tag
        if not name or any(c in name for c in '<"\n') or name.startswith("invoke "):
            self._fail(f"bad tag <{tag}>")
            return
        raw = self._raw
        while True:
            top = self._stack[-1]
            if top.tag is None:  # between parameters: only whitespace
                if raw.strip():
                    self._fail("text between parameters")
                elif closing and name == "invoke":
                    self._emit_args("}" if self._nparams else "{}")
                    self._st = _AFTER
                elif closing:
                    self._fail(f"unexpected </{name}>")
                else:
                    self._open(name)
                return
            if closing and name == top.tag:
                if top.children is not None and raw.strip():
                    self._fail(f"text after the elements of <{name}>")
                    return
                self._pop(raw if top.children is None else top.children)
                self._st = _TEXT
                return
            bare = "</" + top.tag + ">"
            if top.children is None and raw.rstrip().endswith(bare):
                # A leaf its model closed without NS: the tag read now belongs to its parent.
                self.repaired(_BARE)
                self._pop(raw.rstrip()[: -len(bare)])
                raw = ""
                continue
            if closing or raw.strip():
                self._fail(f"unexpected <{tag}> in <{top.tag}>")
            else:
                self._open(name)
            return

    def _open(self, name: str) -> None:
        if len(self._stack) > _MAX_DEPTH:
            self._fail("nested too deep")
            return
        top = self._stack[-1]
        if top.tag is not None and top.children is None:
            top.children = []
        self._stack.append(_Element(name))
        self._st = _TEXT

    def _pop(self, node) -> None:
        el = self._stack.pop()
        parent = self._stack[-1]
        if parent.tag is not None:
            parent.children.append((el.tag, node))
        else:
            self._param(el.tag, node)

    def _param(self, key: str, node) -> None:
        if key in self.arguments:  # a repeat: the first value stays
            return
        if isinstance(node, str):
            value, repaired = _leaf(node, param_types(self.schemas, self.name, key))
        else:
            params = tool_params(self.schemas, self.name)
            value, repaired = _typed(node, _sub(params, self.schemas.get(self.name), key),
                                     self.schemas.get(self.name))
        if repaired:
            self.repaired("Python literal")
        self._store(key, value)


def _leaf(raw: str, types) -> tuple[object, bool]:
    """A leaf's text typed: an empty element is `[]` / `{}` where no string is allowed."""
    if not raw and types and STRING not in types:
        if ARRAY in types:
            return [], False
        if OBJECT in types:
            return {}, False
    return convert(raw, types)


def _typed(node, sch, root, depth: int = 0) -> tuple[object, bool]:
    """A value read from its element: a leaf's text by its schema's types, elements as an array
    (the schema says so, or without one every child is `<item>`) or an object."""
    types = schema_types(sch, root) if isinstance(sch, dict) else None
    if isinstance(node, str):
        return _leaf(node, types)
    items = all(tag == "item" for tag, _ in node)
    as_list = items if not types or (ARRAY in types) == (OBJECT in types) else ARRAY in types
    repaired = False
    if as_list:
        isch = _sub(sch, root, None)
        out = []
        for _, child in node:
            v, r = _typed(child, isch, root, depth + 1)
            out.append(v)
            repaired = repaired or r
        return out, repaired
    obj: dict = {}
    for tag, child in node:
        if tag not in obj:
            obj[tag], r = _typed(child, _sub(sch, root, tag), root, depth + 1)
            repaired = repaired or r
    return obj, repaired


__all__ = ["MARKERS", "NAME", "NS", "PRESERVED_TOKENS", "CallParser", "match_opener"]


# --- the writer ---------------------------------------------------------------------------------

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def _scalar(v) -> str:
    """A scalar as the template writes it (`tojson` for booleans, `str` for numbers), None as
    `null` (which the template would leave out)."""
    if isinstance(v, str):
        return v
    return json.dumps(v)


def _reads_back(v, top: bool) -> bool:
    """Whether `v`'s XML form reads back as `v` without a schema below the parameter: no
    string that reads as JSON or holds a tag, no empty container below the top, no key that
    cannot be a tag (or that is `item`, which reads as an array)."""
    if isinstance(v, dict):
        return (top or bool(v)) and all(
            _TAG_NAME.match(k) and k != "item" and _reads_back(x, False) for k, x in v.items())
    if isinstance(v, list):
        return (top or bool(v)) and all(_reads_back(x, False) for x in v)
    if isinstance(v, str) and not top:
        return "<" not in v and convert(v, None)[0] == v
    return True


def _xml(v) -> str:
    if isinstance(v, dict):
        return "".join(f"{NS}<{k}>{_xml(x)}{NS}</{k}>" for k, x in v.items())
    if isinstance(v, list):
        return "".join(f"{NS}<item>{_xml(x)}{NS}</item>" for x in v)
    return _scalar(v)


def _write_value(v) -> str:
    if isinstance(v, (dict, list)) and not _reads_back(v, True):
        return json.dumps(v, ensure_ascii=False)
    return _xml(v)


def _write_call(call, index: int) -> str:
    params = "".join(f"{NS}<{k}>{_write_value(v)}{NS}</{k}>" for k, v in call.arguments.items())
    return f'{INVOKE}{call.name}">{params}{INVOKE_END}\n'


# --- the forced-call grammar ------------------------------------------------------------------


def _raw_schema(schema: dict) -> bool:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return all(isinstance(e, str) for e in enum)
    return schema.get("type", "string") == "string"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): the declared parameters
    in order (the required ones always), a string raw, anything else as JSON (which the reader
    takes for a container too). A tool that declares none is called without arguments."""
    items, required = w.props(fn)
    parts = []
    for j, (k, schema) in enumerate(items):
        value = (w.raw(schema, NS) if _raw_schema(schema)
                 else w.json(schema, f"{w.prefix}{i}-p{j}", {}))
        one = f"{w.seq(NS + '<' + k + '>')} {value} {w.seq(NS + '</' + k + '>')}"
        parts.append(f"({one})" + ("" if k in required else "?"))
    head = w.seq(INVOKE + fn["name"] + '">')
    return " ".join([head, *parts, w.seq(INVOKE_END + "\n")])


FAMILY = register(Family(
    name=NAME, models="MiniMax-M3", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=THINK_OPEN, reasoning_close=THINK_CLOSE,
                  before_calls="", calls_open=SECTION + "\n", calls_sep="",
                  calls_close=SECTION_END),
    detect=(NS, THINK_OPEN), supersedes=("minimax-xml",), stops=("[e~[",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="minimax-m3",
    tag_forms=(r"\]<\]minimax\[>\[</?[^<>\n]*>",),
    grammar=CallGrammar(_grammar_call, open=SECTION + "\n", close=SECTION_END),
))
