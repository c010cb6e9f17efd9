"""The json-object shape: one JSON call object `{"name": …, "arguments": …}` in a wrapper per
call (Hermes' `<tool_call>`, Llama 3's bare object); its reader, writer and forced-call grammar
from one `CallFormat`.

Owns `object_reader`, `opener_test`, `openers`, `write_call` and `grammar_call`. The reader is
the Hermes JSON scanner (engine/parse/families/hermes_json.py: a closer inside a string never
ends the call, the arguments stream as canonical `json.dumps` fragments once the name is
known), ended by the record's `call_end`. Run by whichever thread drives the parser (the
grammar on the service's thread).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from engine.parse.families import hermes_json
from engine.parse.families.common import NONE, Match, match_literal, skip_ws
from engine.parse.shapes.record import CallFormat


def object_reader(fmt: CallFormat) -> type[hermes_json.CallParser]:
    """The reader of one call object, then the record's closer; in a section of bare objects
    (MiniMax-M1's `<tool_calls>` lines), then the next object or the section's closer."""
    if fmt.section.strip() and not fmt.call.strip():
        return type("CallParser", (_section_object(),), {"CLOSE": fmt.section_end.strip()})
    return type("CallParser", (hermes_json.CallParser,), {"CLOSE": fmt.call_end.strip()})


@functools.cache
def _section_object() -> type[hermes_json.CallParser]:
    """Made on first use: hermes_json imports this module before its `CallParser` exists."""

    class SectionObject(hermes_json.CallParser):
        """One call object of a section: after it, whitespace (skipped, never kept: linear
        cost), then `{` (the next call, read by `follow`: the whitespace is this one's), the
        section's closer (consumed) or anything else (the call ends at its object, the rest
        is text)."""

        def __init__(self, schemas: dict, stream: bool) -> None:
            super().__init__(schemas, stream)
            self._more = False

        def follow(self) -> SectionObject | None:
            return type(self)(self.schemas, self.stream) if self._more else None

        def _after(self, ch: str) -> bool:
            if not self._tail and ch == "{":
                self._more = True
                self.done, self.end = True, self._pos - 1
                return True
            return super()._after(ch)

    return SectionObject


def opener_test(fmt: CallFormat) -> Callable[[str, int], Match]:
    """Does a call body start at text[i]: after a wrapper, `{` and the name's key; a bare
    object's `{` is the opener itself (Llama 3's bare object), so after it, the name's key."""
    if fmt.call.strip() or fmt.section.strip():
        return hermes_json.match_opener
    key = json.dumps(fmt.name_key)

    def match(text: str, i: int) -> Match:
        j = skip_ws(text, i)
        return NONE if j < 0 else match_literal(text, j, key)

    return match


def openers(fmt: CallFormat) -> tuple[str, ...]:
    """The parser's call openers: the call's wrapper, else its section's, else the object's
    own `{`."""
    return (fmt.call.strip() or fmt.section.strip() or "{",)


def write_call(fmt: CallFormat):
    """The writer of one call, wrapped."""

    def write(call, index: int) -> str:
        body = json.dumps({fmt.name_key: call.name, fmt.args_key: call.arguments},
                          ensure_ascii=False)
        return f"{fmt.call}{body}{fmt.call_end}"

    return write


def grammar_call(fmt: CallFormat):
    """One wrapped call object as GBNF (`w`: engine/grammar's Writer, which bounds the
    schemas)."""

    def call(w, i: int, fn: dict) -> str:
        head = fmt.call + "{" + json.dumps(fmt.name_key) + ": " + json.dumps(fn["name"]) \
            + ", " + json.dumps(fmt.args_key) + ": "
        return f"{w.seq(head)} {w.args(i, fn)} {w.seq('}' + fmt.call_end)}"

    return call


__all__ = ["grammar_call", "object_reader", "opener_test", "openers", "write_call"]
