"""Helpers shared by the tool-call families: match results, prefix tests, the tools' schemas,
a value written as text or JSON.

Typing a value by its parameter's schema lives in engine/parse/schema.py.

Pure functions; no state (the memo in `ToolSchemas` is the parser's). Run by whichever thread
drives the parser.
"""

from __future__ import annotations

import json
from enum import IntEnum

from engine.parse.schema import ToolSchemas


class Match(IntEnum):
    """How a marker matches at a position, as Starlette's routing `Match`: not at all, not yet
    (the text ends inside a prefix of it, so the caller holds the text back) or wholly.
    Ordered, so `max` of two results is the more hopeful one."""

    NONE = 0
    PREFIX = 1
    FULL = 2


# Module-level names: the parser's hot loop compares against globals, not class attributes.
NONE, PREFIX, FULL = Match.NONE, Match.PREFIX, Match.FULL

# Whitespace allowed between `<tool_call>` and the opener, or inside the Hermes opener. Bounded
# so that hold-back stays bounded: past this, the tag is text (a deterministic rule, so every
# chunking agrees).
MAX_GAP = 64
WS = " \t\r\n"


def match_literal(text: str, i: int, lit: str) -> Match:
    """FULL if `lit` starts at text[i], PREFIX if text ends inside a prefix of it, else NONE."""
    rest = text[i : i + len(lit)]
    if rest == lit:
        return FULL
    if lit.startswith(rest):
        return PREFIX  # includes the empty rest: the text ends exactly at i
    return NONE


def skip_ws(text: str, i: int, limit: int | None = MAX_GAP) -> int:
    """Index of the first non-whitespace character at or after i (at most `limit` skipped,
    None for no bound); returns -1 when more than `limit` whitespace characters follow."""
    n = len(text)
    j = i
    while j < n and text[j] in WS:
        j += 1
        if limit is not None and j - i > limit:
            return -1
    return j


class CallBody:
    """What the parser reads of every family's `CallParser` (the shared half of the contract
    described in engine/parse/families/__init__.py): the streamed items and the outcome."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        self.schemas = schemas
        self.stream = stream
        self.out: list[tuple[str, str, int]] = []  # ("start"|"args", text, relative end)
        self.done = False
        self.end = 0  # relative offset just past the call once done
        self.error: str | None = None  # "unfinished", or why the body is malformed
        self.resume: int | None = None  # where the channel's text resumes after an error
        self.name: str | None = None
        self.call_id: str | None = None  # the model's own id, where its format carries one
        self.arguments: dict = {}
        # What had to be repaired to accept the call (docs/design.md, section 4 "The parser"):
        # the parser reports a non-empty list once per accepted call as `repaired_call`.
        self.repairs: list[str] = []

    def repaired(self, what: str) -> None:
        """Note one repair (each kind once per call, in the order they happened)."""
        if what not in self.repairs:
            self.repairs.append(what)


def escape_fragment(s: str) -> str:
    """The JSON-string escape of s without quotes. Escaping is per code point, so escaping
    pieces and joining them equals escaping the whole (what json.dumps does)."""
    return json.dumps(s)[1:-1]


def text_or_json(v) -> str:
    """A parameter's value as the templates write it: a string as it is, anything else JSON
    (booleans and None as JSON's words)."""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def tool_schemas(tools) -> ToolSchemas:
    """Map tool name -> parameters schema from an OpenAI-style `tools` array (also accepts
    bare function objects and Anthropic's {name, input_schema}). A `ToolSchemas`, so what the
    families derive from a schema is derived once per parser."""
    out = ToolSchemas()
    for t in tools or ():
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if isinstance(name, str):
            params = fn.get("parameters", fn.get("input_schema", {}))
            out[name] = params if isinstance(params, dict) else {}
    return out
