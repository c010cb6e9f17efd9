"""Client input that must be a 400, not a 500: checks shared by every API.

Owns `parse_json` (request bytes -> a JSON object, refusing what Python's json accepts but
JSON does not, and what later code cannot handle), `check_tree`, `schema_grammar` (a
`json_schema` output format's grammar, refusing schemas no value can match), and
`check_tool_schema` (a tool's `parameters` must be a JSON Schema). Runs on the asyncio loop's
thread. docs/design.md, section "Hardening".

Why each check (each was a 500 found by fuzzing):
- NaN / Infinity / -Infinity: Python's json reads them, JSON has no such numbers; a
  `temperature: NaN` generated, then failed to serialise the reply. `1e999` reads as inf.
- Lone surrogates (`"\\ud800"`): valid JSON escapes, but no UTF-8 can encode them, so the
  tokenizer or the recorder failed mid-request (after the metrics had counted it as running).
- Deep nesting: json.loads raises RecursionError near 1,000 levels, and pydantic, jsonschema
  and templates recurse too. Nothing a client sends needs more than `MAX_DEPTH` levels.
- A schema with an empty `enum`/`anyOf`/`type` list accepts no value: llama.cpp's schema
  converter makes an empty GBNF rule, which llama.cpp refuses when the job starts.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

from app.api.errors import APIError

MAX_DEPTH = 64  # JSON levels; a deep tool schema is ~10
log = logging.getLogger("prism")


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError("invalid_request", message, param=param, code=code)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> dict:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    if not raw.strip():
        raise _bad("The request body is empty; send a JSON object")
    try:
        data = json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        raise _bad(f"The request body is nested too deeply (the limit is {MAX_DEPTH} "
                   "levels)", code="nested_too_deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"The request body is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise _bad("The request body must be a JSON object")
    check_tree(data)
    return data


def _path(parts: tuple) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _surrogate_at(s: str) -> int | None:
    if s.isascii():
        return None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def check_tree(data: Any) -> None:
    """400 for a value nested past MAX_DEPTH, a string (or key) holding a lone surrogate, or
    a number that is not finite. Iterative: the tree may be as deep as json.loads allows."""
    stack: list[tuple[Any, tuple]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            at = _surrogate_at(value)
            if at is not None:
                field = _path(where) or "body"
                raise _bad(f"'{field}' holds a lone UTF-16 surrogate "
                           f"(\\u{ord(value[at]):04x} at character {at}), which is not text; "
                           "send valid Unicode", param=_path(where) or None,
                           code="invalid_unicode")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise _bad(f"'{_path(where)}' is not a finite number",
                           param=_path(where) or None)
        elif isinstance(value, dict | list):
            if len(where) >= MAX_DEPTH:
                raise _bad(f"'{_path(where)}' is nested too deeply (the limit is {MAX_DEPTH} "
                           "levels)", param=_path(where) or None, code="nested_too_deeply")
            if isinstance(value, dict):
                for k, v in value.items():
                    if _surrogate_at(k) is not None:
                        raise _bad(f"A key in '{_path(where) or 'body'}' holds a lone UTF-16 "
                                   "surrogate; send valid Unicode",
                                   param=_path(where) or None, code="invalid_unicode")
                    stack.append((v, (*where, k)))
            else:
                stack.extend((v, (*where, i)) for i, v in enumerate(value))


# JSON schemas ---------------------------------------------------------------------------------

_EMPTY_RULE = re.compile(r"^[\w-]+ ::= *$", re.MULTILINE)


def schema_grammar(schema: dict, field: str) -> str | None:
    """The GBNF grammar for an output schema (None when llama.cpp's converter does not cover
    it), bounded (engine/grammar/bounds.py: a count too large for a grammar is relaxed and
    logged), or a 400: when no value can match the schema (the converter writes an empty rule
    for `{"enum": []}`, `{"anyOf": []}`, `{"type": []}` wherever they occur), or when even the
    relaxed grammar exceeds the size limit (naming the field and the limit)."""
    from engine.grammar.bounds import GrammarTooLarge, count_relaxed
    from engine.grammar.json_schema import schema_gbnf
    from engine.grammar.tools import brief

    try:
        got = schema_gbnf(schema, field)
    except GrammarTooLarge as e:
        raise _bad(str(e), param=field, code="schema_too_large") from None
    if got.relaxed:
        count_relaxed(len(got.relaxed))
        log.warning("[prism] '%s': %d bounds are too large for a grammar and are not enforced "
                    "while sampling (the output is still checked): %s", field, len(got.relaxed),
                    brief(got.relaxed))
    gbnf = got.gbnf
    if gbnf is not None and _EMPTY_RULE.search(gbnf):
        raise _bad(f"'{field}' accepts no value at all (an empty 'enum', 'anyOf' or 'type' "
                   "list), so no output could match it", param=field, code="invalid_schema")
    return gbnf


def check_tool_schema(parameters: Any, field: str) -> None:
    """A tool's `parameters` / `input_schema` must be a JSON Schema object (checked against
    its metaschema, as OpenAI does), since templates show it to the model and the parser
    types arguments by it."""
    import jsonschema

    if not isinstance(parameters, dict):
        raise _bad(f"'{field}' must be a JSON Schema object", param=field,
                   code="invalid_function_parameters")
    try:
        jsonschema.validators.validator_for(parameters).check_schema(parameters)
    except jsonschema.SchemaError as e:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
        raise _bad(f"'{field}{where}' is not a valid JSON Schema: {e.message}",
                   param=field, code="invalid_function_parameters") from None
    if parameters.get("type", "object") != "object":
        raise _bad(f"'{field}' must describe an object (type 'object'): a call's arguments "
                   "are named", param=field, code="invalid_function_parameters")


# content parts ----------------------------------------------------------------------------------

NON_TEXT_PARTS = {
    "image_url": "an image", "image": "an image", "input_image": "an image",
    "input_audio": "audio", "audio": "audio",
    "file": "a file", "input_file": "a file", "document": "a document",
}


def not_text(kind: str, field: str) -> APIError:
    """The 400 for an image (audio, file) part: dropping it silently made the model describe
    an image it never saw."""
    what = NON_TEXT_PARTS.get(kind, f"a '{kind}' part")
    return _bad(f"'{field}' is {what}, but the model served here has no vision or audio "
                "input: it reads text only. Send the conversation as text.",
                param=field, code="unsupported_content")
