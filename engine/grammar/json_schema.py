"""GBNF grammars built from a JSON schema, for the API's structured-output formats.

Owns `schema_gbnf` (a schema -> its bounded grammar and what was relaxed, engine/grammar/
bounds.py), `from_json_schema` (the grammar alone), `converter` (llama-cpp-python's
`SchemaConverter`, with literals escaped for GBNF) and `gbnf_literal`, so that `app/` never
imports `llama_cpp` (docs/design.md, section "Layers"); the engine checks a job's grammar when
it builds the job's sampler (engine/backends/llama/slots.py). Runs on the caller's thread (the
asyncio loop's, for the server).

llama-cpp-python's converter writes a literal (an enum or const value, a property name) by
escaping its quotes and line breaks but not its backslashes, while the JSON text it starts
from has backslashes of its own: `"say \\"hi\\""` became `"\\"say \\\\"hi..."`, whose quote
after `\\\\` ends the literal, and llama.cpp refused the grammar. `gbnf_literal` escapes
everything GBNF reads specially.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

from engine.backends.llama import log as llama_log  # noqa: F401 - closes llama-cpp-python's stray files at exit
from engine.grammar.bounds import GRAMMAR_BYTES, GrammarTooLarge, bound

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal: quotes, backslashes and control characters escaped
    (GBNF knows `\\x`, `\\t`, `\\n`, `\\r`, `\\\\`, `\\"`; JSON's `\\b` and `\\f` it does not)."""
    out = []
    for ch in text:
        esc = _ESCAPES.get(ch)
        if esc is None and (ord(ch) < 0x20 or ord(ch) == 0x7F):
            esc = f"\\x{ord(ch):02X}"
        out.append(esc or ch)
    return '"' + "".join(out) + '"'


@functools.cache
def _converter_class():
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def _format_literal(self, literal: str) -> str:
            return gbnf_literal(literal)

    return Converter


def converter():
    """A fresh schema converter (llama-cpp-python's, its literals escaped for GBNF)."""
    return _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


@dataclass(frozen=True, slots=True)
class SchemaGrammar:
    """A schema's grammar (None when the converter does not cover the schema: the caller then
    validates the output only) and the relaxations made to bound it ("PATH: what")."""

    gbnf: str | None
    relaxed: tuple[str, ...] = ()


def schema_gbnf(schema: dict, path: str) -> SchemaGrammar:
    """The bounded grammar for JSON matching `schema`, which the request names `path`.
    Raises GrammarTooLarge (naming `path`) when even the relaxed grammar is too large."""
    bounded = bound(schema, path)
    conv = converter()
    try:
        conv.visit(conv.resolve_refs(copy.deepcopy(bounded.schema), "stdin"), "")
        gbnf = conv.format_grammar()
    except Exception:  # the converter raises assorted errors on schemas it does not support
        return SchemaGrammar(None, bounded.relaxed)
    if len(gbnf) > GRAMMAR_BYTES:
        raise GrammarTooLarge(path, len(gbnf))
    return SchemaGrammar(gbnf, bounded.relaxed)


def from_json_schema(schema: dict) -> str | None:
    """GBNF text constraining output to JSON matching `schema` (bounded; relaxations are not
    reported), or None when the converter does not cover the schema or it is too large."""
    try:
        return schema_gbnf(schema, "schema").gbnf
    except GrammarTooLarge:
        return None
